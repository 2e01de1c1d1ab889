//! What the idempotency and submit-token services share: which methods they
//! guard, calling the inner service, and a request future that outlives its
//! client once it holds a lock.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use tower::Service;

pub(crate) use crate::key::is_guarded_method as is_mutating;

/// Calls an infallible inner service.
pub(crate) async fn call<S>(mut inner: S, request: Request) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    match inner.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// A guarded request's work, boxed.
pub(crate) type BoxedResponse = Pin<Box<dyn Future<Output = Response> + Send>>;

/// Armed by the work once it holds its lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct DetachOnDrop(Arc<AtomicBool>);

impl DetachOnDrop {
    /// From now on, dropping the future must not cancel the work.
    pub(crate) fn arm(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A guarded request's work. Once it holds its lock, dropping it (the client
/// hung up) moves the rest of the work to a task of its own, so the response
/// is still recorded and the client's retry gets the replay instead of a 409
/// for the rest of the lock's TTL. Before that nothing is spawned, which
/// keeps the common path cheap.
pub(crate) struct Detachable {
    future: Option<BoxedResponse>,
    detach: DetachOnDrop,
}

impl Detachable {
    pub(crate) fn new(future: BoxedResponse, detach: DetachOnDrop) -> Self {
        Self {
            future: Some(future),
            detach,
        }
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Response> {
        let Some(future) = self.future.as_mut() else {
            // Polled after completion: a caller bug; never finish twice.
            return Poll::Pending;
        };
        let response = std::task::ready!(future.as_mut().poll(cx));
        self.future = None;
        Poll::Ready(response)
    }
}

impl Drop for Detachable {
    fn drop(&mut self) {
        if !self.detach.0.load(Ordering::Acquire) {
            return;
        }
        // Moving the box moves a pointer: the pinned future stays put.
        if let (Some(future), Ok(runtime)) =
            (self.future.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(future);
        }
    }
}
