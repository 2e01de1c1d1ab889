//! [`CatchPanic`]: calls the inner service, catching a panic while it
//! starts the request.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::{Context, Poll};

use axum::body::Body;
use http::{Request, Response};
use tower::Service;

use super::future::{ResponseFuture, panic_response};

/// The service made by [`CatchPanicLayer`](super::CatchPanicLayer).
#[derive(Debug, Clone)]
pub(crate) struct CatchPanic<S> {
    inner: S,
}

impl<S> CatchPanic<S> {
    /// `inner`, its panics caught.
    pub(super) fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S, B> Service<Request<B>> for CatchPanic<S>
where
    S: Service<Request<B>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // A panic while the inner service starts the request counts too.
        match catch_unwind(AssertUnwindSafe(|| self.inner.call(request))) {
            Ok(future) => ResponseFuture::inner(future),
            Err(panic) => ResponseFuture::panicked(panic_response(panic)),
        }
    }
}
