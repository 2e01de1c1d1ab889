//! The inner half of [`ReplayMode::ThroughInner`](crate::ReplayMode).
//!
//! Place [`IdempotencyReplayLayer`] in a route's stack after the checks that
//! must run again on every retry (authentication, tenant, audit). The outer
//! [`IdempotencyLayer`](crate::IdempotencyLayer) records as usual; on a retry
//! it forwards the request into the route, and this layer answers it from the
//! record once those checks have passed.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use autumn_idempotency::{IdempotencyLayer, IdempotencyReplayLayer, MemoryIdempotencyStore};
//! use axum::{Router, routing::post};
//!
//! let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
//! let app: Router = Router::new()
//!     .route(
//!         "/transfers",
//!         post(|| async { "done" })
//!             .layer(IdempotencyReplayLayer::new())
//!             // route-local checks go here, outside the replay layer
//!             ,
//!     )
//!     .layer(IdempotencyLayer::new(store).replay_through_inner());
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use tower::{Layer, Service};

use axum::response::IntoResponse as _;
use futures_util::future::{Either, Ready, ready};

use crate::context::{PassedReplayLayer, PendingReplay, ReplayRefused};
use crate::layer::service_replay_response;
use crate::problem::IdempotencyRejection;

/// Answers replays inside a route, after its own checks. See the
/// [module docs](crate::replay).
#[derive(Debug, Clone, Copy, Default)]
pub struct IdempotencyReplayLayer {
    _private: (),
}

impl IdempotencyReplayLayer {
    /// The layer.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<S> Layer<S> for IdempotencyReplayLayer {
    type Service = IdempotencyReplay<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyReplay { inner }
    }
}

/// The service made by [`IdempotencyReplayLayer`].
#[derive(Debug, Clone)]
pub struct IdempotencyReplay<S> {
    inner: S,
}

impl<S> IdempotencyReplay<S> {
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

impl<S> Service<Request> for IdempotencyReplay<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        if let Some(PendingReplay(record)) = request.extensions_mut().remove::<PendingReplay>() {
            return Box::pin(std::future::ready(Ok(service_replay_response(&record))));
        }
        let future = self.inner.call(request);
        Box::pin(async move {
            let mut response = future.await?;
            response.extensions_mut().insert(PassedReplayLayer);
            Ok(response)
        })
    }
}

/// Refuses a replay that was forwarded into a route and reached this point
/// unanswered, so it never runs the handler.
///
/// With [`ReplayMode::ThroughInner`](crate::ReplayMode) (or a record made
/// through one), a retry is forwarded into the route for an
/// [`IdempotencyReplayLayer`] to answer. If none does (the route changed
/// since the key was recorded), the retry would run the handler again,
/// without a lock. Placed in front of a handler, this layer answers such a
/// request 409 `idempotency_replay_unavailable` instead. Autumn's app
/// builder puts it in front of every route that is not marked
/// `ReplayThroughInner`; requests that carry no forwarded replay pass
/// through untouched.
///
/// ```
/// use autumn_idempotency::replay::ReplayGuardLayer;
/// use axum::{Router, routing::post};
///
/// let app: Router = Router::new().route(
///     "/orders",
///     post(|| async { "created" }).layer(ReplayGuardLayer::new()),
/// );
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayGuardLayer {
    _private: (),
}

impl ReplayGuardLayer {
    /// The layer.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<S> Layer<S> for ReplayGuardLayer {
    type Service = ReplayGuard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ReplayGuard { inner }
    }
}

/// The service made by [`ReplayGuardLayer`].
#[derive(Debug, Clone)]
pub struct ReplayGuard<S> {
    inner: S,
}

impl<S> ReplayGuard<S> {
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
    type Future = Either<Ready<Result<Response, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if request.extensions().get::<PendingReplay>().is_some() {
            return Either::Left(ready(Ok(refuse_unanswered_replay())));
        }
        Either::Right(self.inner.call(request))
    }
}

/// 409 for a forwarded replay that no [`IdempotencyReplayLayer`] answered.
pub(crate) fn refuse_unanswered_replay() -> Response {
    tracing::error!(
        "a replay forwarded into the route reached no IdempotencyReplayLayer; refused with 409 instead of running the handler again"
    );
    let mut response = IdempotencyRejection::ReplayUnavailable.into_response();
    response.extensions_mut().insert(ReplayRefused);
    response
}
