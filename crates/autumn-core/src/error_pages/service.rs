//! [`ErrorPages`]: notes what the client accepts, then has the inner
//! service's error responses rewritten for it (`rewrite.rs`).

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use tower::Service;

use super::future::ResponseFuture;
use super::rewrite::{Asked, BoxError, Settings};

/// The service [`ErrorPagesLayer`](super::ErrorPagesLayer) makes.
#[derive(Clone)]
pub struct ErrorPages<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> ErrorPages<S> {
    pub(crate) fn new(inner: S, settings: Arc<Settings>) -> Self {
        Self { inner, settings }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for ErrorPages<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErrorPages")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ErrorPages<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // Clones that share the request's bytes: no copy per request.
        let asked = Asked::of(&request);
        ResponseFuture::new(self.inner.call(request), asked, self.settings.clone())
    }
}
