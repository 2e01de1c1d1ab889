//! Errors as each client expects them: a problem document
//! (`application/problem+json`) for API clients, an HTML page for browsers.
//!
//! [`ErrorPagesLayer`] rewrites error responses on their way out, by the
//! request's `Accept`; the app builder installs it outermost (inside
//! tracing), so it sees every error: the guards', the app's, axum's
//! extractor rejections, the router's 404 and 405, the timeout's 408.
//! Inside it, a handler panic is caught and answered 500 `internal_error`
//! instead of dropping the connection. The errors hyper answers before the
//! app runs (a head over `server.max_header_bytes`, an unparseable request)
//! get a problem document from the server's connection loop.
//!
//! Apps replace the HTML pages with `AppBuilder::with_error_page` (one
//! status) and `AppBuilder::with_error_pages` (an [`ErrorPageRenderer`] for
//! any status). The codes Autumn gives errors that had none are listed in
//! the errors guide.

pub(crate) mod catch_panic;
pub(crate) mod connection;
mod future;
mod layer;
mod render;
mod rewrite;
mod service;

use std::any::Any;

use axum::body::Body;
use http::{Response, StatusCode};

pub use future::ResponseFuture;
pub use layer::ErrorPagesLayer;
pub use render::{ErrorInfo, ErrorPageRenderer};
pub use rewrite::DEFAULT_MAX_BODY_BYTES;
pub use service::ErrorPages;

/// The answer to a handler that panicked outside the guards (which answer
/// their own): 500 `internal_error`, the panic logged, never sent.
pub(crate) fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response<Body> {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic payload that is not a string");
    tracing::error!(panic = message, "handler panicked");
    autumn_base::problem_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        Some("internal_error"),
        "the server failed while handling this request",
    )
}
