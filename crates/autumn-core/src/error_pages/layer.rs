//! [`ErrorPagesLayer`]: the app's pages and limits, applied to a service.

use std::sync::Arc;

use http::StatusCode;
use tower::Layer;

use super::render::{ErrorInfo, ErrorPageRenderer};
use super::rewrite::Settings;
use super::service::ErrorPages;

/// Answers every error (status 400 and up) the way its client expects: a
/// problem document for API clients, an HTML page for browsers (their
/// `Accept` prefers `text/html`).
///
/// On the way out it rewrites only what it recognises: a problem document
/// (kept for API clients, turned into a page for browsers), an empty error
/// body, and a `text/plain` one such as axum's extractor rejections (both
/// turned into a problem document with a stable `code`, or a page). Every
/// other body, and any error body larger than
/// [`with_max_body_bytes`](Self::with_max_body_bytes), passes through as the
/// handler made it. Headers are kept (`Allow`, `Retry-After`,
/// `WWW-Authenticate`, `Set-Cookie`...), and `Vary: Accept` is added.
///
/// An app built with `autumn_core::app()` has this layer already; the
/// builder's `with_error_page` and `with_error_pages` set its pages. On a
/// plain axum router:
///
/// ```
/// use autumn_core::error_pages::ErrorPagesLayer;
/// use axum::{Router, routing::get};
/// use http::{Request, StatusCode, header};
/// use tower::ServiceExt as _;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let app = Router::new()
///     .route("/", get(|| async { "hi" }))
///     .layer(ErrorPagesLayer::new().with_page(StatusCode::NOT_FOUND, |info| {
///         format!("<h1>No such page</h1><p>{}</p>", info.path())
///     }));
///
/// let api = Request::get("/missing").body(axum::body::Body::empty()).unwrap();
/// let response = app.clone().oneshot(api).await.unwrap();
/// assert_eq!(response.status(), StatusCode::NOT_FOUND);
/// assert_eq!(response.headers()[header::CONTENT_TYPE], "application/problem+json");
///
/// let browser = Request::get("/missing")
///     .header(header::ACCEPT, "text/html,*/*;q=0.8")
///     .body(axum::body::Body::empty())
///     .unwrap();
/// let response = app.oneshot(browser).await.unwrap();
/// assert_eq!(response.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
/// # }
/// ```
#[derive(Clone, Default)]
pub struct ErrorPagesLayer {
    settings: Arc<Settings>,
}

impl std::fmt::Debug for ErrorPagesLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErrorPagesLayer")
            .field("max_body_bytes", &self.settings.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl ErrorPagesLayer {
    /// The layer with Autumn's default page for every status.
    pub fn new() -> Self {
        Self::default()
    }

    /// Renders browsers' pages for `status` with `page`, which returns HTML
    /// (a maud `Markup`, or a `String` whose parts taken from the
    /// [`ErrorInfo`] it escaped). API clients still get the problem document.
    #[must_use]
    pub fn with_page<F, P>(mut self, status: StatusCode, page: F) -> Self
    where
        F: Fn(&ErrorInfo) -> P + Send + Sync + 'static,
        P: Into<String>,
    {
        Arc::make_mut(&mut self.settings)
            .pages
            .insert(status, Arc::new(move |info: &ErrorInfo| page(info).into()));
        self
    }

    /// Renders browsers' pages for every status without a
    /// [`with_page`](Self::with_page) of its own with `renderer`.
    #[must_use]
    pub fn with_renderer(mut self, renderer: impl ErrorPageRenderer) -> Self {
        Arc::make_mut(&mut self.settings)
            .pages
            .set_renderer(Arc::new(renderer));
        self
    }

    /// Rewrites error bodies up to `bytes` long; larger ones pass through.
    #[must_use]
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        Arc::make_mut(&mut self.settings).max_body_bytes = bytes;
        self
    }
}

impl<S> Layer<S> for ErrorPagesLayer {
    type Service = ErrorPages<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ErrorPages::new(inner, self.settings.clone())
    }
}
