//! The orders example: a JSON API whose `POST /orders` runs at most once per
//! `Idempotency-Key`.
//!
//! `POST /orders` takes `{"item": "widget", "qty": 2}` (and an optional
//! `delay_ms`, capped at 10 s, standing in for a slow payment provider) and
//! answers 201 with the new order and its `Location`; `GET /orders` lists
//! them, `GET /orders/{id}` shows one, and `GET /orders/live` streams their
//! number as server-sent events.
//!
//! Orders live in memory, or in the app database when `[database] url` is
//! set (PostgreSQL or SQLite); the idempotency store is whatever
//! `[idempotency] backend` says. Both are configuration only.
//!
//! With `ORDERS_REQUIRE_TOKEN=true` every request needs an API token
//! (`Authorization: Bearer atk_...`), made with `orders create-token NAME`
//! and kept in the app database: see [`token_app`] and [`create_token`].

mod repository;

use std::sync::Arc;
use std::time::Duration;

use autumn_web::AppBuilder;
use autumn_web::api_token::{ApiTokens, DbApiTokenStore, NewApiToken, RequireApiTokenLayer};
use autumn_web::config::AutumnConfig;
use autumn_web::db::{DbPool, FRAMEWORK_MIGRATIONS};
use autumn_web::openapi::JsonSchema;
use autumn_web::prelude::*;
use autumn_web::sse::{self, Event};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use repository::Orders;

/// The longest `delay_ms` honoured.
const MAX_DELAY: Duration = Duration::from_secs(10);

/// An order as stored and returned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[schemars(crate = "autumn_web::openapi::schemars")]
pub struct Order {
    /// A fresh UUID.
    pub id: Uuid,
    /// What was ordered.
    pub item: String,
    /// How many.
    pub qty: i64,
}

/// What a client posts.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "autumn_web::openapi::schemars")]
pub struct NewOrder {
    /// What is ordered; not blank.
    #[schemars(regex(pattern = r"\S"))]
    item: String,
    /// How many; at least 1.
    #[schemars(range(min = 1))]
    qty: i64,
    /// Milliseconds the handler waits before it creates the order (at most
    /// 10 s; more waits 10 s): for trying retries while the first attempt
    /// runs.
    delay_ms: Option<u64>,
}

/// `POST /orders`: validates, waits `delay_ms`, creates the order; its
/// `Location` is `GET /orders/{id}`.
#[post("/orders")]
pub async fn create_order(
    orders: Orders,
    Json(new): Json<NewOrder>,
) -> AutumnResult<(StatusCode, [(http::HeaderName, String); 1], Json<Order>)> {
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
    let location = format!("/orders/{}", order.id);
    Ok((
        StatusCode::CREATED,
        [(http::header::LOCATION, location)],
        Json(order),
    ))
}

/// `GET /orders/{id}`: one order, or 404.
#[get("/orders/{id}")]
pub async fn show_order(orders: Orders, Path(id): Path<Uuid>) -> AutumnResult<Json<Order>> {
    match orders.find(id).await? {
        Some(order) => Ok(Json(order)),
        None => Err(AutumnError::not_found(format!("no order {id}"))),
    }
}

/// `GET /orders`: every order, oldest first.
#[get("/orders")]
pub async fn list_orders(orders: Orders) -> AutumnResult<Json<Vec<Order>>> {
    Ok(Json(orders.list().await?))
}

/// How often the live counter looks for new orders.
const LIVE_EVERY: Duration = Duration::from_secs(1);

/// `GET /orders/live`: the number of orders as server-sent events (event
/// `orders`), sent at once and again whenever it changes. The stream ends
/// when the server stops; a browser's `EventSource` reconnects by itself.
#[get("/orders/live")]
pub async fn live_count(orders: Orders) -> impl IntoResponse {
    let counts = futures_util::stream::unfold(
        (orders, None::<usize>, true),
        |(orders, mut last, first)| async move {
            if !first {
                tokio::time::sleep(LIVE_EVERY).await;
            }
            loop {
                match orders.count().await {
                    Ok(count) if last != Some(count) => {
                        last = Some(count);
                        let event = Event::default().event("orders").data(count.to_string());
                        return Some((
                            Ok::<_, std::convert::Infallible>(event),
                            (orders, last, false),
                        ));
                    }
                    // Unchanged, or the store cannot answer now: look again later.
                    _ => tokio::time::sleep(LIVE_EVERY).await,
                }
            }
        },
    );
    sse::stream(counts)
}

/// The app. Orders go to the database when one is configured, else to
/// `memory`.
pub fn app(memory: Orders) -> AppBuilder {
    autumn_web::app()
        .routes(routes![create_order, list_orders, show_order, live_count])
        .layer(axum::Extension(memory))
        .idempotent()
}

/// The environment variable that turns on API tokens: `true` or `1`.
pub const REQUIRE_TOKEN_ENV: &str = "ORDERS_REQUIRE_TOKEN";

/// Whether [`REQUIRE_TOKEN_ENV`] asks for API tokens.
pub fn require_token() -> bool {
    std::env::var(REQUIRE_TOKEN_ENV).is_ok_and(|value| matches!(value.as_str(), "true" | "1"))
}

/// The app with every request needing a token from `tokens`. Mounted with
/// `AppBuilder::layer`, so a retry is scoped by the token's principal: an
/// agent that refreshes its token between attempts still gets its replay.
pub fn token_app(memory: Orders, tokens: ApiTokens) -> AppBuilder {
    app(memory).api_tokens(RequireApiTokenLayer::new(tokens))
}

/// The API tokens in the app database `config` names (`[database] url`).
///
/// # Errors
///
/// A message naming the setting when there is no database URL or the pool
/// cannot be made.
pub fn tokens(config: &AutumnConfig) -> Result<ApiTokens, String> {
    Ok(ApiTokens::new(Arc::new(DbApiTokenStore::new(pool(
        config,
    )?))))
}

fn pool(config: &AutumnConfig) -> Result<DbPool, String> {
    let Some(url) = &config.database.url else {
        return Err(format!(
            "API tokens are kept in the app database: set database.url (AUTUMN_DATABASE__URL) to use {REQUIRE_TOKEN_ENV} or create-token"
        ));
    };
    DbPool::new(
        url,
        config.database.pool_size as usize,
        Duration::from_millis(config.database.connect_timeout_ms),
    )
    .map_err(|error| format!("cannot use database.url: {error}"))
}

/// `orders create-token NAME`: a new token acting for `name`, in the
/// database `config` names (its tables created first when missing).
///
/// # Errors
///
/// A one-line message when the database cannot be used.
pub async fn create_token(config: &AutumnConfig, name: &str) -> Result<NewApiToken, String> {
    let pool = pool(config)?;
    FRAMEWORK_MIGRATIONS
        .run(&pool)
        .await
        .map_err(|error| format!("cannot create the framework tables: {error}"))?;
    ApiTokens::new(Arc::new(DbApiTokenStore::new(pool)))
        .create(name, name, None)
        .await
        .map_err(|error| error.to_string())
}
