//! The orders example: a JSON API whose `POST /orders` runs at most once per
//! `Idempotency-Key`.
//!
//! `POST /orders` takes `{"item": "widget", "qty": 2}` (and an optional
//! `delay_ms`, capped at 10 s, standing in for a slow payment provider) and
//! answers 201 with the new order; `GET /orders` lists them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use autumn_web::AppBuilder;
use autumn_web::prelude::*;
use axum::Extension;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The longest `delay_ms` honoured.
const MAX_DELAY: Duration = Duration::from_secs(10);

/// An order as stored and returned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
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
    delay_ms: Option<u64>,
}

/// The orders created so far, shared by every request.
#[derive(Debug, Clone, Default)]
pub struct Orders(Arc<Mutex<Vec<Order>>>);

impl Orders {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Order>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many orders exist.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no order exists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `POST /orders`: validates, waits `delay_ms`, creates the order.
#[post("/orders")]
pub async fn create_order(
    Extension(orders): Extension<Orders>,
    Json(new): Json<NewOrder>,
) -> AutumnResult<(StatusCode, Json<Order>)> {
    if new.item.trim().is_empty() {
        return Err(AutumnError::unprocessable("item must not be blank"));
    }
    if new.qty < 1 {
        return Err(AutumnError::unprocessable("qty must be at least 1"));
    }
    if let Some(delay) = new.delay_ms {
        tokio::time::sleep(Duration::from_millis(delay).min(MAX_DELAY)).await;
    }
    let order = Order {
        id: Uuid::new_v4(),
        item: new.item,
        qty: new.qty,
    };
    orders.lock().push(order.clone());
    Ok((StatusCode::CREATED, Json(order)))
}

/// `GET /orders`: every order, oldest first.
#[get("/orders")]
pub async fn list_orders(Extension(orders): Extension<Orders>) -> Json<Vec<Order>> {
    Json(orders.lock().clone())
}

/// The app, with `orders` as its state.
pub fn app(orders: Orders) -> AppBuilder {
    autumn_web::app()
        .routes(routes![create_order, list_orders])
        .layer(Extension(orders))
        .idempotent()
}
