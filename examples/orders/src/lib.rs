//! The orders example: a JSON API whose `POST /orders` runs at most once per
//! `Idempotency-Key`.
//!
//! `POST /orders` takes `{"item": "widget", "qty": 2}` (and an optional
//! `delay_ms`, capped at 10 s, standing in for a slow payment provider) and
//! answers 201 with the new order; `GET /orders` lists them.
//!
//! Orders live in memory, or in the app database when `[database] url` is
//! set (PostgreSQL or SQLite); the idempotency store is whatever
//! `[idempotency] backend` says. Both are configuration only.

mod repository;

use std::time::Duration;

use autumn_web::AppBuilder;
use autumn_web::prelude::*;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use repository::Orders;

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

/// `POST /orders`: validates, waits `delay_ms`, creates the order.
#[post("/orders")]
pub async fn create_order(
    orders: Orders,
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
    orders.insert(&order).await?;
    Ok((StatusCode::CREATED, Json(order)))
}

/// `GET /orders`: every order, oldest first.
#[get("/orders")]
pub async fn list_orders(orders: Orders) -> AutumnResult<Json<Vec<Order>>> {
    Ok(Json(orders.list().await?))
}

/// The app. Orders go to the database when one is configured, else to
/// `memory`.
pub fn app(memory: Orders) -> AppBuilder {
    autumn_web::app()
        .routes(routes![create_order, list_orders])
        .layer(axum::Extension(memory))
        .idempotent()
}
