//! [`ReplayGuard`]: refuses a forwarded replay that reached the handler
//! unanswered; watches other mutating responses for a replay layer beneath
//! it.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::{IntoResponse as _, Response};
use tower::Service;

use super::future::ResponseFuture;
use super::state::GuardState;
use crate::context::{ReplayRefused, carries_forwarded};
use crate::detach::is_mutating;
use crate::problem::IdempotencyRejection;

/// The service made by [`ReplayGuardLayer`](super::ReplayGuardLayer).
#[derive(Debug, Clone)]
pub struct ReplayGuard<S> {
    inner: S,
    state: Arc<GuardState>,
}

impl<S> ReplayGuard<S> {
    /// `inner`, guarded with the layer's shared `state`.
    pub(super) fn new(inner: S, state: Arc<GuardState>) -> Self {
        Self { inner, state }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S> Service<Request> for ReplayGuard<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if carries_forwarded(request.extensions()) {
            return ResponseFuture::refused(refuse_unanswered_replay());
        }
        // Only a mutating request is recorded, so only its response can
        // carry a marker that matters.
        let state = is_mutating(request.method()).then(|| self.state.clone());
        ResponseFuture::inner(self.inner.call(request), state)
    }
}

/// 409 for a forwarded replay that no
/// [`IdempotencyReplayLayer`](crate::IdempotencyReplayLayer) answered.
pub(crate) fn refuse_unanswered_replay() -> Response {
    tracing::error!(
        "a replay forwarded into the route reached no IdempotencyReplayLayer; refused with 409 instead of running the handler again"
    );
    let mut response = IdempotencyRejection::ReplayUnavailable.into_response();
    response.extensions_mut().insert(ReplayRefused);
    response
}
