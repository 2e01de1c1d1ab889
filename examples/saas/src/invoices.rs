//! Invoices with line items: three generated repositories, and the durable
//! after-create hook that "emails" each new invoice by writing a row of the
//! `outbox` table.
//!
//! The invoice, its line items, the hook's queue row and (for an API
//! request with an `Idempotency-Key`) the stored response commit in one
//! transaction. The worker runs the hook after the commit; a retry of the
//! same request writes no second queue row, and the hook itself is
//! idempotent (the outbox is unique per invoice), so a hook run again after
//! a crash sends nothing twice.

use autumn_web::jobs::{CommitJob, JobError, MutationContext};
use diesel::{AsChangeset, Insertable, Queryable};
use serde::{Deserialize, Serialize};

/// The tables, as diesel sees them (made by `Users`' schema).
#[allow(missing_docs)]
pub mod schema {
    diesel::table! {
        invoices (id) {
            id -> BigInt,
            customer -> Text,
            total_cents -> BigInt,
        }
    }

    diesel::table! {
        line_items (id) {
            id -> BigInt,
            invoice_id -> BigInt,
            description -> Text,
            quantity -> Integer,
            unit_cents -> BigInt,
        }
    }

    diesel::table! {
        outbox (id) {
            id -> BigInt,
            invoice_id -> BigInt,
            recipient -> Text,
            subject -> Text,
            attempt -> Integer,
        }
    }
}

use schema::{invoices, line_items, outbox};

/// An invoice as stored.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Serialize, Deserialize)]
pub struct Invoice {
    /// Its number.
    pub id: i64,
    /// Who it is for.
    pub customer: String,
    /// The sum of its line items, in cents.
    pub total_cents: i64,
}

/// A new invoice.
#[derive(Debug, Clone, Insertable, Deserialize)]
#[diesel(table_name = invoices)]
pub struct NewInvoice {
    /// Who it is for.
    pub customer: String,
    /// The sum of its line items, in cents.
    pub total_cents: i64,
}

/// A change to an invoice.
#[derive(Debug, Clone, AsChangeset, Deserialize)]
#[diesel(table_name = invoices)]
pub struct InvoiceChanges {
    /// A new customer.
    pub customer: Option<String>,
}

/// A line of an invoice.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Serialize, Deserialize)]
pub struct LineItem {
    /// Its id.
    pub id: i64,
    /// The invoice it belongs to.
    pub invoice_id: i64,
    /// What was sold.
    pub description: String,
    /// How many.
    pub quantity: i32,
    /// The price of one, in cents.
    pub unit_cents: i64,
}

/// A new line.
#[derive(Debug, Clone, Insertable, Deserialize)]
#[diesel(table_name = line_items)]
pub struct NewLineItem {
    /// The invoice it belongs to.
    pub invoice_id: i64,
    /// What was sold.
    pub description: String,
    /// How many.
    pub quantity: i32,
    /// The price of one, in cents.
    pub unit_cents: i64,
}

/// An email waiting to be sent (this example only stores it).
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Serialize, Deserialize)]
pub struct OutboxEmail {
    /// Its id.
    pub id: i64,
    /// The invoice it announces; unique, so an invoice is sent once.
    pub invoice_id: i64,
    /// To whom.
    pub recipient: String,
    /// The subject line.
    pub subject: String,
    /// The run of the hook that wrote it (1 unless a run failed before).
    pub attempt: i32,
}

/// A new email.
#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = outbox)]
pub struct NewOutboxEmail {
    /// The invoice it announces.
    pub invoice_id: i64,
    /// To whom.
    pub recipient: String,
    /// The subject line.
    pub subject: String,
    /// The hook's attempt.
    pub attempt: i32,
}

/// The invoices; each new one is emailed by [`email_invoice`] after commit.
#[autumn_web::repository(
    model = Invoice,
    table = invoices,
    insert = NewInvoice,
    update = InvoiceChanges,
    after_create_commit = email_invoice,
)]
pub struct Invoices;

/// The line items.
#[autumn_web::repository(model = LineItem, table = line_items, insert = NewLineItem)]
pub struct LineItems;

/// The emails written by the hook.
#[autumn_web::repository(model = OutboxEmail, table = outbox, insert = NewOutboxEmail)]
pub struct Outbox;

/// The after-create hook: "emails" the invoice by writing its outbox row.
///
/// It runs at least once. A second run (the worker died after the insert
/// and before it marked the job done) finds the invoice's row there, since
/// `outbox.invoice_id` is unique, and counts as done: nothing is sent twice.
///
/// # Errors
///
/// [`JobError`] when the database fails; the worker runs it again later.
pub async fn email_invoice(job: CommitJob) -> Result<(), JobError> {
    let invoice: Invoice = job.record()?;
    let mut outbox = Outbox::from_pool(job.pool(), MutationContext::detached()).await?;
    let email = NewOutboxEmail {
        invoice_id: invoice.id,
        recipient: format!(
            "billing+{}@example.com",
            invoice.customer.to_lowercase().replace(' ', "-")
        ),
        subject: format!("Invoice #{} for {}", invoice.id, invoice.customer),
        attempt: i32::try_from(job.attempt()).unwrap_or(i32::MAX),
    };
    match outbox.create(&email).await {
        Ok(_) => Ok(()),
        Err(error) if is_unique_violation(&error.to_string()) => Ok(()),
        Err(error) => Err(JobError::retry(error)),
    }
}

/// Whether a database error says a unique index refused the row (the
/// wording of PostgreSQL and of SQLite).
fn is_unique_violation(message: &str) -> bool {
    message.contains("duplicate key") || message.contains("UNIQUE constraint failed")
}

/// How many rows the invoice tables hold, as `GET /invoices/stats.json`
/// serves them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceStats {
    /// Invoices.
    pub invoices: i64,
    /// Line items.
    pub line_items: i64,
    /// Emails in the outbox.
    pub outbox: i64,
    /// Emails written by the hook's first run (of the first 100).
    pub emails_on_first_attempt: i64,
    /// Commit-hook jobs queued: one per created invoice, however often its
    /// request was retried.
    pub hook_jobs: i64,
    /// Of those, the ones not yet run.
    pub hook_jobs_pending: i64,
    /// Mails queued (invoices and sign-up confirmations): one each, however
    /// often its request was retried.
    pub mails: i64,
    /// Of those, the ones not yet sent.
    pub mails_pending: i64,
}
