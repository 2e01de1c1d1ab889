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
//! the errors guide, and are constants of [`codes`](crate::codes).

pub(crate) mod connection;
mod future;
mod layer;
mod render;
mod rewrite;
mod service;

pub use future::ResponseFuture;
pub use layer::ErrorPagesLayer;
pub(crate) use render::escape as escape_html;
pub use render::{ErrorInfo, ErrorPageRenderer};
pub use rewrite::DEFAULT_MAX_BODY_BYTES;
pub use service::ErrorPages;
