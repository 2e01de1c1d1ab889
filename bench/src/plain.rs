//! The baseline of `cargo xtask bench`: plain axum serving the same orders
//! handler and form page as `autumn-orders`, with no middleware at all.
//! Two binaries run it: `plain-axum` on the system allocator, as a new axum
//! app is, and `plain-axum-mimalloc` on the allocator Autumn apps get, so
//! the bench can tell the framework's cost from the allocator's. The
//! featured twin (`crate::featured`) serves the same [`routes`] with
//! middleware around them.
//!
//! Listens on 127.0.0.1 at the port in `PORT`; over HTTPS (HTTP/2 or
//! HTTP/1.1 by ALPN) when `TLS_CERT_FILE` and `TLS_KEY_FILE` are set, on
//! the same TLS and HTTP stack as Autumn's (see `crate::tls`).

use crate::{NewOrder, Orders, form_page};

use axum::Router;
use axum::extract::{Json, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};

async fn create_order(State(orders): State<Orders>, Json(new): Json<NewOrder>) -> Response {
    match orders.create(new) {
        Ok(order) => (StatusCode::CREATED, Json(order)).into_response(),
        Err(refused) => (StatusCode::UNPROCESSABLE_ENTITY, refused.message()).into_response(),
    }
}

async fn new_order() -> Html<String> {
    Html(form_page(""))
}

/// The orders routes with no middleware: what every twin serves.
pub fn routes() -> Router {
    Router::new()
        .route("/orders", post(create_order))
        .route("/orders-off", post(create_order))
        .route("/orders/new", get(new_order))
        .with_state(Orders::default())
}

/// Serves the bare routes until SIGTERM or Ctrl-C.
///
/// # Errors
///
/// `PORT` unset or not a port, or the port cannot be bound.
#[tokio::main]
pub async fn main() -> std::io::Result<()> {
    serve(routes()).await
}

/// Serves `app` on 127.0.0.1 at the port in `PORT`, as `axum::serve` does
/// (or over HTTPS, with `TLS_CERT_FILE` and `TLS_KEY_FILE`), until SIGTERM
/// or Ctrl-C.
///
/// # Errors
///
/// `PORT` unset or not a port, the port cannot be bound, or only one of
/// the TLS files is set, or they cannot be used.
pub async fn serve(app: Router) -> std::io::Result<()> {
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|port| port.parse().ok())
        .ok_or_else(|| std::io::Error::other("set PORT to the port to listen on"))?;
    let tls = crate::tls::TlsFiles::from_env()?
        .map(|files| files.acceptor())
        .transpose()?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    if let Some(acceptor) = tls {
        return crate::tls::serve(listener, app, acceptor, async {
            let _ = shutdown().await;
        })
        .await;
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = shutdown().await;
        })
        .await
}

/// SIGTERM (how the bench stops a server) or Ctrl-C.
async fn shutdown() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => Ok(()),
        result = tokio::signal::ctrl_c() => result,
    }
}
