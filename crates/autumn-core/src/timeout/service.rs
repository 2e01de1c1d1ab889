//! [`RequestTimeout`]: notes each request's deadline as it arrives.

use std::task::{Context, Poll};
use std::time::Duration;

use axum::response::Response;
use tokio::time::Instant;
use tower::Service;

use super::future::ResponseFuture;

/// The service made by [`RequestTimeoutLayer`](super::RequestTimeoutLayer).
#[derive(Debug, Clone)]
pub(crate) struct RequestTimeout<S> {
    inner: S,
    timeout: Duration,
}

impl<S> RequestTimeout<S> {
    /// `inner`, answered 408 past `timeout`.
    pub(super) fn new(inner: S, timeout: Duration) -> Self {
        Self { inner, timeout }
    }
}

impl<S, R> Service<R> for RequestTimeout<S>
where
    S: Service<R, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        // A clock read, not a timer: the timer waits until it is needed.
        ResponseFuture::new(self.inner.call(request), Instant::now() + self.timeout)
    }
}
