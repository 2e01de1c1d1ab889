//! What the benchmark servers share, so that they differ only in the
//! framework: the orders handler's body and the form page.
//!
//! `cargo xtask bench` starts `plain-axum` (and its mimalloc and featured
//! twins) and `autumn-orders` as their own release processes and drives
//! them with an outside load generator; see `docs/performance.md`. Each
//! plain twin also serves HTTPS and HTTP/2 when given a certificate, for
//! the rows that measure Autumn's own HTTPS.

pub mod featured;
pub mod plain;
mod tls;

use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// An order as stored and returned.
#[derive(Debug, Clone, Serialize)]
pub struct Order {
    /// A fresh UUID.
    pub id: Uuid,
    /// What was ordered.
    pub item: String,
    /// How many.
    pub qty: i64,
}

/// What a client posts.
#[derive(Debug, Deserialize)]
pub struct NewOrder {
    item: String,
    qty: i64,
}

/// Why an order was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `item` was blank.
    BlankItem,
    /// `qty` was below 1.
    NoQuantity,
}

impl Refused {
    /// What the client is told.
    #[must_use]
    pub fn message(self) -> &'static str {
        match self {
            Self::BlankItem => "item must not be blank",
            Self::NoQuantity => "qty must be at least 1",
        }
    }
}

/// The orders taken, in memory. Only the newest few are kept, so that a
/// long run measures the handler and not a growing vector.
#[derive(Clone, Default)]
pub struct Orders(Arc<Mutex<Vec<Order>>>);

/// How many orders [`Orders`] keeps.
const KEPT: usize = 1024;

impl Orders {
    /// The handler's work: validate, make the order, keep it.
    ///
    /// # Errors
    ///
    /// [`Refused`] when the order is invalid.
    pub fn create(&self, new: NewOrder) -> Result<Order, Refused> {
        if new.item.trim().is_empty() {
            return Err(Refused::BlankItem);
        }
        if new.qty < 1 {
            return Err(Refused::NoQuantity);
        }
        let order = Order {
            id: Uuid::new_v4(),
            item: new.item,
            qty: new.qty,
        };
        let mut orders = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if orders.len() == KEPT {
            orders.clear();
        }
        orders.push(order.clone());
        Ok(order)
    }
}

/// The form page's HTML around the submit-token field (`""` for the
/// plain-axum twin, which has no token to render).
#[must_use]
pub fn form_page(token_field: &str) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>New order</title></head>\
         <body><h1>New order</h1><form method=\"POST\" action=\"/orders/form\">{token_field}\
         <input name=\"item\"><input name=\"qty\" type=\"number\"><button type=\"submit\">Order</button>\
         </form></body></html>"
    )
}
