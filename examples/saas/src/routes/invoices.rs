//! Invoices with line items: a master-detail form under one submit token,
//! and the same creation over the JSON API under an `Idempotency-Key`.
//!
//! - `GET /invoices/new` renders the form; its "Add line item" and
//!   "Remove" buttons come back here with `GET`, spending no token;
//! - `POST /invoices` validates the invoice and every line, then creates
//!   them in one transaction (with the email hook's queue row), 303 to the
//!   invoice; a double-click creates one invoice;
//! - `POST /api/invoices` does the same for JSON, the response stored in
//!   the same transaction (`IdempotencyTx`): a retry with the key is
//!   answered from it and writes nothing;
//! - `GET /invoices/{id}` shows one, `GET /invoices/stats.json` counts the
//!   rows of each table.

use autumn_web::forms::{Changeset, FieldErrors, FormPage, NestedChangesetForm, NestedFormData};
use autumn_web::idempotency::IdempotencyTx;
use autumn_web::mail::Mailer;
use autumn_web::prelude::*;
use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;
use autumn_web::repository::{Paging, RepoTx};
use autumn_web::security::{SubmitFormField, SubmitToken};
use axum::Extension;
use serde::Deserialize;

use super::{error_summary, page};
use crate::Site;
use crate::invoices::{
    Invoice, InvoiceStats, Invoices, LineItems, NewInvoice, NewLineItem, Outbox,
};
use crate::mails::InvoiceMail;
use crate::users::Users;

/// The most lines an invoice may have.
pub const MAX_LINES: usize = 50;

/// A line as posted or sent as JSON.
#[derive(Debug, Clone, Deserialize)]
pub struct LineInput {
    /// What was sold.
    pub description: String,
    /// How many (1 or more).
    pub quantity: i32,
    /// The price of one, in cents (0 or more).
    pub unit_cents: i64,
}

/// An invoice with its lines, as `POST /api/invoices` takes it.
#[derive(Debug, Clone, Deserialize)]
pub struct InvoiceInput {
    /// Who it is for.
    pub customer: String,
    /// Its lines, at least one.
    pub lines: Vec<LineInput>,
}

/// Checks the posted form into an invoice, or the messages per field
/// (a line's under `lines[i][field]`).
fn validate(data: &NestedFormData) -> Result<InvoiceInput, FieldErrors> {
    let mut invoice = Changeset::new();
    let customer = invoice.required("customer", data.field("customer"));
    invoice.check(
        "lines",
        !data.children().is_empty(),
        "Add at least one line item.",
    );
    invoice.check(
        "lines",
        data.children().len() <= MAX_LINES,
        "An invoice has at most 50 line items.",
    );
    let mut lines = Vec::new();
    for (index, child) in data.children().iter().enumerate() {
        let value = |field: &str| child.get(field).map_or("", String::as_str);
        let mut line = Changeset::nested("lines", index);
        let description = line.required("description", value("description"));
        let quantity = line.parse::<i32>("quantity", value("quantity"), "Enter a whole number.");
        if let Some(quantity) = quantity {
            line.check(
                "quantity",
                (1..=10_000).contains(&quantity),
                "Between 1 and 10000.",
            );
        }
        let unit_cents =
            line.parse::<i64>("unit_cents", value("unit_cents"), "Enter a price in cents.");
        if let Some(cents) = unit_cents {
            line.check(
                "unit_cents",
                (0..=100_000_000).contains(&cents),
                "Between 0 and 100000000.",
            );
        }
        if let (Some(description), Some(quantity), Some(unit_cents)) =
            (description, quantity, unit_cents)
        {
            lines.push(LineInput {
                description,
                quantity,
                unit_cents,
            });
        }
        invoice.merge(line);
    }
    invoice.finish(|| {
        Some(InvoiceInput {
            customer: customer?,
            lines,
        })
    })
}

/// Creates the invoice and its lines in `tx`; the invoice's hook row and
/// its mail are written with them.
async fn create_in(
    tx: &mut RepoTx<'_>,
    mailer: &Mailer,
    input: &InvoiceInput,
) -> AutumnResult<Invoice> {
    let total_cents = input
        .lines
        .iter()
        .map(|line| i64::from(line.quantity).saturating_mul(line.unit_cents))
        .fold(0i64, i64::saturating_add);
    let invoice = Invoices::create_in(
        tx,
        &NewInvoice {
            customer: input.customer.clone(),
            total_cents,
        },
    )
    .await?;
    for line in &input.lines {
        LineItems::create_in(
            tx,
            &NewLineItem {
                invoice_id: invoice.id,
                description: line.description.clone(),
                quantity: line.quantity,
                unit_cents: line.unit_cents,
            },
        )
        .await?;
    }
    mailer
        .deliver_later_in(tx, &InvoiceMail { invoice: &invoice })
        .await?;
    Ok(invoice)
}

fn form(
    site: &Site,
    data: &NestedFormData,
    errors: &FieldErrors,
    token: &SubmitToken,
    field: &SubmitFormField,
) -> Markup {
    let nested = NestedChangesetForm::new("/invoices", "/invoices/new", "lines", data, errors)
        .with_submit_token(token, field)
        .parent(html! {
            @if !errors.is_empty() { (error_summary(errors.iter().map(|(_, message)| message))) }
            label { "Customer " input name="customer" value=(data.field("customer")); }
            @if let Some(message) = errors.get("customer") { p .error { (message) } }
            @if let Some(message) = errors.get("lines") { p .error { (message) } }
        })
        .add_label("Add line item")
        .submit_label("Save")
        .render(|row| html! {
            label { "Description " input name=(row.name("description")) value=(row.value("description")); }
            label { "Quantity " input name=(row.name("quantity")) value=(row.value("quantity")) inputmode="numeric"; }
            label { "Unit price (cents) " input name=(row.name("unit_cents")) value=(row.value("unit_cents")) inputmode="numeric"; }
            @for field in ["description", "quantity", "unit_cents"] {
                @if let Some(message) = row.error(field) { p .error { (message) } }
            }
        });
    page(
        site,
        None,
        "New invoice",
        html! { h1 { "New invoice" } (nested) },
    )
}

/// `GET /invoices/new`, and the add/remove-row buttons' re-render.
#[get("/invoices/new")]
pub(crate) async fn new_invoice(
    Extension(site): Extension<Site>,
    _tables: Users,
    token: SubmitToken,
    field: SubmitFormField,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Markup {
    let data = NestedFormData::from_pairs(pairs, "lines").with_min_rows(1);
    form(&site, &data, &FieldErrors::new(), &token, &field)
}

/// `POST /invoices`: one invoice and its lines per rendered form.
#[post("/invoices")]
pub(crate) async fn create_invoice(
    Extension(site): Extension<Site>,
    _tables: Users,
    token: SubmitToken,
    field: SubmitFormField,
    mut invoices: Invoices,
    mailer: Mailer,
    Form(pairs): Form<Vec<(String, String)>>,
) -> AutumnResult<FormPage> {
    let data = NestedFormData::from_pairs(pairs, "lines");
    let input = match validate(&data) {
        Ok(input) => input,
        Err(errors) => {
            return Ok(FormPage::invalid(form(
                &site, &data, &errors, &token, &field,
            )));
        }
    };
    site.hold().await;
    let invoice = invoices
        .tx(|tx| async move { create_in(tx, &mailer, &input).await }.scope_boxed())
        .await?;
    Ok(FormPage::redirect(format!("/invoices/{}", invoice.id)))
}

/// `POST /api/invoices`: 201 with the invoice; the response commits with it.
#[post("/api/invoices")]
pub(crate) async fn api_create_invoice(
    _tables: Users,
    idem: IdempotencyTx,
    mut invoices: Invoices,
    mailer: Mailer,
    Json(input): Json<InvoiceInput>,
) -> AutumnResult<Response> {
    if input.customer.trim().is_empty() || input.lines.is_empty() || input.lines.len() > MAX_LINES {
        return Err(AutumnError::unprocessable(
            "an invoice needs a customer and 1 to 50 lines",
        ));
    }
    invoices
        .tx(|tx| {
            async move {
                let invoice = create_in(tx, &mailer, &input).await?;
                idem.commit(tx, (StatusCode::CREATED, Json(invoice))).await
            }
            .scope_boxed()
        })
        .await
}

/// `GET /invoices/{id}`.
#[get("/invoices/{id}")]
pub(crate) async fn show_invoice(
    Extension(site): Extension<Site>,
    _tables: Users,
    mut invoices: Invoices,
    Path(id): Path<i64>,
) -> AutumnResult<Markup> {
    let invoice = invoices
        .find(id)
        .await?
        .ok_or_else(|| AutumnError::not_found("no such invoice"))?;
    Ok(page(
        &site,
        None,
        "Invoice",
        html! {
            h1 { "Invoice #" (invoice.id) }
            p #customer { (invoice.customer) }
            p #total { (invoice.total_cents) " cents" }
        },
    ))
}

/// `GET /invoices/stats.json`.
#[get("/invoices/stats.json")]
pub(crate) async fn invoice_stats(
    tables: Users,
    mut invoices: Invoices,
    mut lines: LineItems,
    mut outbox: Outbox,
) -> AutumnResult<Json<InvoiceStats>> {
    let one = Paging::new(1, 1);
    let [hook_jobs, hook_jobs_pending, mails, mails_pending] = tables.hook_jobs().await?;
    Ok(Json(InvoiceStats {
        hook_jobs,
        hook_jobs_pending,
        mails,
        mails_pending,
        invoices: invoices.list(one).await?.total,
        line_items: lines.list(one).await?.total,
        outbox: outbox.list(one).await?.total,
        emails_on_first_attempt: {
            let all = outbox.list(Paging::new(1, Paging::MAX_PER_PAGE)).await?;
            i64::try_from(all.items.iter().filter(|email| email.attempt == 1).count())
                .unwrap_or(i64::MAX)
        },
    }))
}
