//! Autumn's side of `cargo xtask bench`: the same orders handler and form
//! page as `plain-axum`, as an Autumn app configured by `AUTUMN_*`
//! variables (the port, the idempotency backend and its Redis or
//! database URL, the access log).
//!
//! - `POST /orders`: under the idempotency layer.
//! - `POST /orders-off`: the same handler with the layer off.
//! - `POST /orders-signed`: the guarded handler whose response also sets a
//!   cookie, which the guard seals before recording and opens on every
//!   replay: what sealing costs.
//! - `POST /orders-limited`: the layer-off route again, under a rate-limit
//!   rule no load reaches (a billion requests a minute from one address),
//!   counted in memory or in Redis as `AUTUMN_RATE_LIMIT__BACKEND` says:
//!   what a rule costs a request that it lets through.
//! - `GET /orders/new`: the form page with a freshly minted submit token.
//! - `GET /orders/blank`: the same page without one, so the bench can tell
//!   what minting costs on an Autumn route.

use autumn_bench::{NewOrder, Order, Orders, form_page};
use autumn_web::config::RateLimitRule;
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};

fn create(orders: &Orders, new: NewOrder) -> AutumnResult<(StatusCode, Json<Order>)> {
    orders
        .create(new)
        .map(|order| (StatusCode::CREATED, Json(order)))
        .map_err(|refused| AutumnError::unprocessable(refused.message()))
}

#[post("/orders")]
async fn create_order(
    State(orders): State<Orders>,
    Json(new): Json<NewOrder>,
) -> AutumnResult<(StatusCode, Json<Order>)> {
    create(&orders, new)
}

#[post("/orders-signed")]
async fn create_signed_order(
    State(orders): State<Orders>,
    Json(new): Json<NewOrder>,
) -> AutumnResult<(
    StatusCode,
    [(axum::http::HeaderName, String); 1],
    Json<Order>,
)> {
    let (status, order) = create(&orders, new)?;
    // A cookie of a session's size and form, set as a sign-in would.
    let cookie = format!(
        "receipt={}; Path=/; Secure; HttpOnly; SameSite=Lax",
        order.id.simple()
    );
    Ok((status, [(axum::http::header::SET_COOKIE, cookie)], order))
}

#[post("/orders-off", idempotent = false)]
async fn create_order_unguarded(
    State(orders): State<Orders>,
    Json(new): Json<NewOrder>,
) -> AutumnResult<(StatusCode, Json<Order>)> {
    create(&orders, new)
}

#[post("/orders-limited", idempotent = false, rate_limit = "orders")]
async fn create_order_limited(
    State(orders): State<Orders>,
    Json(new): Json<NewOrder>,
) -> AutumnResult<(StatusCode, Json<Order>)> {
    create(&orders, new)
}

/// The rule of `/orders-limited`, by client address (the load comes from
/// one): far above what a load generator sends in a run, so every request
/// is counted and let through. A rule's rate has a floor of one request a
/// millisecond, so this one lets a billion through at once and a thousand
/// a second after; three rounds of 10 s at 100,000 a second spend 3
/// million of them.
fn unreached_rule() -> RateLimitRule {
    RateLimitRule::new(1_000_000_000, 60)
}

#[get("/orders/new")]
async fn new_order(token: SubmitToken, field: SubmitFormField) -> Html<String> {
    Html(form_page(&submit_token_field(&token, &field).into_string()))
}

#[get("/orders/blank")]
async fn blank_order() -> Html<String> {
    Html(form_page(""))
}

#[autumn_web::main]
async fn main() {
    autumn_web::app()
        .routes(routes![
            create_order,
            create_signed_order,
            create_order_unguarded,
            create_order_limited,
            new_order,
            blank_order
        ])
        .rate_limit_rule("orders", unreached_rule())
        .with_state(Orders::default())
        .idempotent()
        .run()
        .await;
}
