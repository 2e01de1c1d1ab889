//! [`ResponseFuture`]: the guard's refusal, or the handler's response
//! checked for the marker of a replay layer beneath the guard.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::Response;
use pin_project_lite::pin_project;

use super::state::GuardState;
use crate::context::PassedReplayLayer;

pin_project! {
    /// Response future for [`ReplayGuard`](super::ReplayGuard): the refusal,
    /// ready at once, or the handler's response.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: GuardKind<F>,
    }
}

pin_project! {
    #[project = GuardKindProjection]
    enum GuardKind<F> {
        Refused { response: Option<Response> },
        Inner {
            #[pin]
            future: F,
            state: Option<Arc<GuardState>>,
        },
    }
}

impl<F> ResponseFuture<F> {
    /// The refusal `response`, ready at once.
    pub(super) fn refused(response: Response) -> Self {
        Self {
            kind: GuardKind::Refused {
                response: Some(response),
            },
        }
    }

    /// The handler's `future`; `state` when its response is to be watched
    /// for a replay layer beneath the guard.
    pub(super) fn inner(future: F, state: Option<Arc<GuardState>>) -> Self {
        Self {
            kind: GuardKind::Inner { future, state },
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
            // Polled again after completion: a caller bug, made loud.
            GuardKindProjection::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("`ReplayGuardFuture` polled after completion"))),
            GuardKindProjection::Inner { future, state } => {
                let mut response = std::task::ready!(future.poll(cx))?;
                if let Some(state) = state
                    && response
                        .extensions_mut()
                        .remove::<PassedReplayLayer>()
                        .is_some()
                {
                    state.warn_replay_layer_beneath();
                }
                Poll::Ready(Ok(response))
            }
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayGuardFuture").finish_non_exhaustive()
    }
}
