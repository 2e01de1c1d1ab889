//! The response future of [`Idempotency`](super::Idempotency).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::response::Response;
use pin_project_lite::pin_project;

type Boxed = Pin<Box<dyn Future<Output = Response> + Send>>;

pin_project! {
    /// Response future for [`Idempotency`](super::Idempotency).
    ///
    /// A request without a key is the inner service's own future, untouched.
    /// A keyed request runs boxed; once it holds its lock, dropping this
    /// future (the client hung up) does not cancel the handler: the rest of
    /// the work moves to a task of its own, so the response is still
    /// recorded and the client's retry gets the replay rather than a 409 for
    /// the rest of the lock's TTL.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<F> {
        PassThrough { #[pin] future: F },
        Keyed { keyed: Keyed },
    }
}

struct Keyed {
    future: Option<Boxed>,
    detach_on_drop: Arc<AtomicBool>,
}

impl<F> ResponseFuture<F> {
    pub(super) fn pass_through(future: F) -> Self {
        Self {
            kind: Kind::PassThrough { future },
        }
    }

    pub(super) fn keyed(future: Boxed, detach_on_drop: Arc<AtomicBool>) -> Self {
        Self {
            kind: Kind::Keyed {
                keyed: Keyed {
                    future: Some(future),
                    detach_on_drop,
                },
            },
        }
    }
}

impl<F> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProjection::PassThrough { future } => future.poll(cx),
            KindProjection::Keyed { keyed } => {
                let Some(future) = keyed.future.as_mut() else {
                    // Polled after completion: a caller bug; never finish twice.
                    return Poll::Pending;
                };
                let response = std::task::ready!(future.as_mut().poll(cx));
                keyed.future = None;
                Poll::Ready(Ok(response))
            }
        }
    }
}

impl Drop for Keyed {
    fn drop(&mut self) {
        if !self.detach_on_drop.load(Ordering::Acquire) {
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

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
