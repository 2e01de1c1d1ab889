//! The featured twin of `cargo xtask bench`: the same orders routes as
//! `plain-axum`, with the middleware an axum app adds to get what an Autumn
//! app has by default, each from the crate an axum user would reach for:
//!
//! | Autumn default (prod profile) | here |
//! | --- | --- |
//! | request id, generated when absent, on the response | tower-http `SetRequestId` (UUID v4) and `PropagateRequestId` |
//! | an access line per request at info, with the request id | tower-http `TraceLayer` at info, through `tracing-subscriber`'s text format and `tracing-appender`'s writer thread |
//! | security headers, unless the response sets its own | tower-http `SetResponseHeader::if_not_present`, Autumn's four values |
//! | compression when the client asks | tower-http `Compression` |
//! | panics answered 500 | tower-http `CatchPanic` |
//! | request timeout (30 s) | tower-http `Timeout` |
//! | cookie sessions in memory | `tower-sessions` with its memory store |
//!
//! Autumn's cross-origin check, error pages and submit tokens have no
//! common axum counterpart and are left out, so this twin does a little
//! less per request than Autumn does.
//!
//! The bench compares both Autumn and this twin with bare axum, so the
//! report tells what the framework costs apart from what its features cost.
//! Listens on 127.0.0.1 at the port in `PORT`; logs to standard output.

use std::time::Duration;

use autumn_web::config::DEFAULT_CONTENT_SECURITY_POLICY;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tower_sessions::{MemoryStore, SessionManagerLayer};
use tracing::Level;

/// The request id's header, as Autumn names it.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Serves the routes with the middleware until SIGTERM or Ctrl-C.
///
/// # Errors
///
/// `PORT` unset or not a port, or the port cannot be bound.
#[tokio::main]
pub async fn main() -> std::io::Result<()> {
    // Lines go to a writer thread, as Autumn's do; dropping the guard at
    // the end writes what is still queued.
    let (writer, _flush) = tracing_appender::non_blocking(std::io::stdout());
    tracing_subscriber::fmt()
        .with_max_level(Level::INFO)
        .with_ansi(false)
        .with_writer(writer)
        .init();
    let security_header = |name: HeaderName, value: &'static str| {
        SetResponseHeaderLayer::if_not_present(name, HeaderValue::from_static(value))
    };
    let middleware = ServiceBuilder::new()
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request| {
                    let id = request
                        .headers()
                        .get(REQUEST_ID)
                        .and_then(|id| id.to_str().ok())
                        .unwrap_or_default();
                    // The path only, as Autumn logs it.
                    tracing::info_span!(
                        "request",
                        method = %request.method(),
                        path = %request.uri().path(),
                        request_id = %id,
                    )
                })
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(security_header(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(security_header(
            header::STRICT_TRANSPORT_SECURITY,
            "max-age=31536000",
        ))
        .layer(security_header(
            header::CONTENT_SECURITY_POLICY,
            DEFAULT_CONTENT_SECURITY_POLICY,
        ))
        .layer(security_header(
            header::REFERRER_POLICY,
            "strict-origin-when-cross-origin",
        ))
        .layer(CompressionLayer::new())
        .layer(CatchPanicLayer::new())
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(30),
        ))
        .layer(SessionManagerLayer::new(MemoryStore::default()).with_secure(false));
    crate::plain::serve(crate::plain::routes().layer(middleware)).await
}
