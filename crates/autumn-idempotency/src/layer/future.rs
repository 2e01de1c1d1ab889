//! The response future of [`Idempotency`](super::Idempotency).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::response::Response;

type Inner = Pin<Box<dyn Future<Output = Response> + Send>>;

/// Response future for [`Idempotency`](super::Idempotency).
///
/// Once the request holds its lock, dropping this future (the client hung
/// up) does not cancel the handler: the rest of the work moves to a task of
/// its own, so the response is still recorded and the client's retry gets
/// the replay rather than a 409 for the rest of the lock's TTL. Until then
/// nothing runs on a task of its own, which keeps the common path cheap.
pub struct ResponseFuture {
    inner: Option<Inner>,
    detach_on_drop: Arc<AtomicBool>,
}

impl ResponseFuture {
    pub(super) fn new(inner: Inner, detach_on_drop: Arc<AtomicBool>) -> Self {
        Self {
            inner: Some(inner),
            detach_on_drop,
        }
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(inner) = self.inner.as_mut() else {
            // Polled after completion: a caller bug; never finish twice.
            return Poll::Pending;
        };
        let response = std::task::ready!(inner.as_mut().poll(cx));
        self.inner = None;
        Poll::Ready(Ok(response))
    }
}

impl Drop for ResponseFuture {
    fn drop(&mut self) {
        if !self.detach_on_drop.load(Ordering::Acquire) {
            return;
        }
        // Moving the box moves a pointer: the pinned future stays put.
        if let (Some(inner), Ok(runtime)) =
            (self.inner.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(inner);
        }
    }
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
