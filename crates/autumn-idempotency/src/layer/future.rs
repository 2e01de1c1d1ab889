//! The response future of [`Idempotency`](super::Idempotency).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::Response;
use pin_project_lite::pin_project;

use crate::context::OptedIntoReplayThroughInner;
use crate::detach::Guarded;

pin_project! {
    /// Response future for [`Idempotency`](super::Idempotency).
    ///
    /// A request without a key is the inner service's own future, untouched.
    /// A keyed request runs boxed; once it holds its lock, dropping this
    /// future (the client hung up) does not cancel the handler: the rest of
    /// the work moves to a task of its own, so the response is still
    /// recorded and the client's retry gets the replay rather than a 409 for
    /// the rest of the lock's TTL.
    ///
    /// Like any future, it must not be polled again once it returned its
    /// response: it panics with "polled after completion".
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<F> {
        PassThrough {
            #[pin]
            future: F,
            // Nested in an outer layer: tell it this route replays through
            // an inner replay layer.
            mark_replay_through_inner: bool,
        },
        Ready { response: Option<Response> },
        Keyed { keyed: Guarded },
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn pass_through(future: F, mark_replay_through_inner: bool) -> Self {
        Self {
            kind: Kind::PassThrough {
                future,
                mark_replay_through_inner,
            },
        }
    }

    pub(super) fn ready(response: Response) -> Self {
        Self {
            kind: Kind::Ready {
                response: Some(response),
            },
        }
    }

    pub(super) fn keyed(keyed: Guarded) -> Self {
        Self {
            kind: Kind::Keyed { keyed },
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
            KindProjection::PassThrough {
                future,
                mark_replay_through_inner,
            } => {
                let mut response = std::task::ready!(future.poll(cx))?;
                if *mark_replay_through_inner {
                    response
                        .extensions_mut()
                        .insert(OptedIntoReplayThroughInner);
                }
                Poll::Ready(Ok(response))
            }
            // Polled again after completion: a caller bug; answering twice,
            // or hanging, would hide it.
            KindProjection::Ready { response } => Poll::Ready(Ok(response
                .take()
                .expect("`ResponseFuture` polled after completion"))),
            KindProjection::Keyed { keyed } => keyed.poll(cx).map(Ok),
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
