//! The mail the app sends: a confirmation for each sign-up and a copy of
//! each new invoice. Each is queued in the transaction that creates the
//! account or the invoice, so it is sent once that commits, and only then.

use autumn_web::mail::{Mail, Message};
use maud::html;

use crate::invoices::Invoice;

/// The sender when `[mail] from` names none.
pub const DEFAULT_FROM: &str = "Saas <no-reply@saas.example>";

/// "Your account is ready", to a new account.
pub struct SignupConfirmation<'a> {
    /// The account's id.
    pub id: &'a str,
    /// Its address.
    pub email: &'a str,
    /// Its display name.
    pub name: &'a str,
}

impl Mail for SignupConfirmation<'_> {
    const NAME: &'static str = "accounts.signup_confirmation";

    fn message(&self) -> Message {
        let user = self;
        Message::to(format!("{} <{}>", user.name, user.email))
            .subject(format!("Welcome to Saas, {}", user.name))
            .html(html! {
                p { "Hello " (user.name) "," }
                p { "Your account for " strong { (user.email) } " is ready." }
                p { "If you did not sign up, ignore this mail." }
            })
            .text(format!(
                "Hello {},\n\nYour account for {} is ready.\n\nIf you did not sign up, ignore this mail.\n",
                user.name, user.email
            ))
    }

    // One per account, whichever request created it.
    fn unique_key(&self) -> Option<String> {
        Some(self.id.to_owned())
    }
}

/// A new invoice, to the customer's billing address.
pub struct InvoiceMail<'a> {
    /// The invoice.
    pub invoice: &'a Invoice,
}

/// Where an invoice for `customer` is mailed.
pub fn billing_address(customer: &str) -> String {
    format!(
        "billing+{}@example.com",
        customer
            .to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>()
    )
}

impl Mail for InvoiceMail<'_> {
    const NAME: &'static str = "invoices.created";

    fn message(&self) -> Message {
        let invoice = self.invoice;
        let total = format!(
            "{}.{:02}",
            invoice.total_cents / 100,
            invoice.total_cents % 100
        );
        Message::to(billing_address(&invoice.customer))
            .subject(format!("Invoice #{} for {}", invoice.id, invoice.customer))
            .html(html! {
                p { "Invoice #" (invoice.id) " for " (invoice.customer) "." }
                p { "Total: " strong { (total) } }
            })
            .text(format!(
                "Invoice #{} for {}.\nTotal: {}\n",
                invoice.id, invoice.customer, total
            ))
    }

    // One per invoice.
    fn unique_key(&self) -> Option<String> {
        Some(self.invoice.id.to_string())
    }
}
