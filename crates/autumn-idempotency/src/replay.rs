//! The inner half of [`ReplayMode::ThroughInner`](crate::ReplayMode).
//!
//! Place [`IdempotencyReplayLayer`] in a route's stack after the checks that
//! must run again on every retry (authentication, tenant, audit). The outer
//! [`IdempotencyLayer`](crate::IdempotencyLayer) records as usual; on a retry
//! it forwards the request into the route, and this layer answers it from the
//! record once those checks have passed. The forwarded replay travels in the
//! request's extensions and, for a middleware that rebuilds the request, in a
//! task-local held for the route's run. [`ReplayGuardLayer`], directly in
//! front of the handler, refuses one that nothing answered.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use autumn_idempotency::{
//!     IdempotencyLayer, IdempotencyReplayLayer, MemoryIdempotencyStore, ReplayGuardLayer,
//! };
//! use axum::{Router, routing::post};
//!
//! let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
//! let app: Router = Router::new()
//!     .route(
//!         "/transfers",
//!         post(|| async { "done" })
//!             .layer(ReplayGuardLayer::new())
//!             .layer(IdempotencyReplayLayer::new())
//!             // route-local checks go here, outside the replay layer
//!             ,
//!     )
//!     .layer(IdempotencyLayer::new(store).replay_through_inner());
//! ```

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use http::HeaderValue;
use tower::{Layer, Service};

use axum::response::IntoResponse as _;
use pin_project_lite::pin_project;

use crate::context::{
    PassedReplayLayer, PendingReplay, ReplayRefused, Replayed, carries_forwarded,
    consume_forwarded, take_forwarded,
};
use crate::detach::is_mutating;
use crate::key::IDEMPOTENT_REPLAYED;
use crate::problem::IdempotencyRejection;
use crate::record::IdempotencyRecord;

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
            consume_forwarded();
            return Box::pin(std::future::ready(Ok(replay_response(&record))));
        }
        // A middleware above rebuilt the request and dropped the marker: the
        // replay is still on the task.
        if let Some(record) = take_forwarded() {
            return Box::pin(std::future::ready(Ok(replay_response(&record))));
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
/// without a lock. Placed directly in front of a handler, this layer answers
/// such a request 409 `idempotency_replay_unavailable` instead, without
/// calling the handler. It sees the forwarded replay even when a middleware
/// above it rebuilt the request and dropped its extensions. Requests that
/// carry no forwarded replay pass through.
///
/// Autumn's app builder puts it directly in front of every handler it
/// mounts, beneath the route's own layers. A router you build yourself (one
/// passed to `merge` or `nest`) that replays through an inner layer should
/// put it directly on its handlers, beneath the replay layer:
///
/// ```
/// use autumn_idempotency::replay::{IdempotencyReplayLayer, ReplayGuardLayer};
/// use axum::{Router, routing::post};
///
/// let app: Router = Router::new().route(
///     "/orders",
///     post(|| async { "created" })
///         .layer(ReplayGuardLayer::new())
///         .layer(IdempotencyReplayLayer::new()),
///         // route-local checks go here, outside the replay layer
/// );
/// ```
///
/// A replay layer beneath the guard cannot be protected by it, so it is made
/// harmless: the guard hides it from the recording layer (records made
/// through it are not replayed; retries get 409) and logs one warning.
#[derive(Debug, Clone, Default)]
pub struct ReplayGuardLayer {
    state: Arc<GuardState>,
}

/// What the services of one [`ReplayGuardLayer`] share.
#[derive(Debug, Default)]
struct GuardState {
    /// The route, for the warning.
    route: Option<Cow<'static, str>>,
    /// Whether the warning about a replay layer beneath it was logged.
    warned: AtomicBool,
}

impl ReplayGuardLayer {
    /// The layer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The layer, naming `route` (its path) in its warning.
    ///
    /// ```
    /// use autumn_idempotency::ReplayGuardLayer;
    ///
    /// let guard = ReplayGuardLayer::for_route("/orders/{id}");
    /// # let _ = guard;
    /// ```
    pub fn for_route(route: impl Into<Cow<'static, str>>) -> Self {
        Self {
            state: Arc::new(GuardState {
                route: Some(route.into()),
                warned: AtomicBool::new(false),
            }),
        }
    }
}

impl<S> Layer<S> for ReplayGuardLayer {
    type Service = ReplayGuard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ReplayGuard {
            inner,
            state: self.state.clone(),
        }
    }
}

/// The service made by [`ReplayGuardLayer`].
#[derive(Debug, Clone)]
pub struct ReplayGuard<S> {
    inner: S,
    state: Arc<GuardState>,
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
    type Future = ReplayGuardFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if carries_forwarded(request.extensions()) {
            return ReplayGuardFuture {
                kind: GuardKind::Refused {
                    response: Some(refuse_unanswered_replay()),
                },
            };
        }
        // Only a mutating request is recorded, so only its response can
        // carry a marker that matters.
        let state = is_mutating(request.method()).then(|| self.state.clone());
        ReplayGuardFuture {
            kind: GuardKind::Inner {
                future: self.inner.call(request),
                state,
            },
        }
    }
}

pin_project! {
    /// Response future for [`ReplayGuard`].
    pub struct ReplayGuardFuture<F> {
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

impl<F> Future for ReplayGuardFuture<F>
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

impl<F> std::fmt::Debug for ReplayGuardFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayGuardFuture").finish_non_exhaustive()
    }
}

impl GuardState {
    /// Once per guard: a replay layer sits beneath it, where a retry that
    /// lost its marker would run the handler again.
    fn warn_replay_layer_beneath(&self) {
        if self.warned.swap(true, Ordering::Relaxed) {
            return;
        }
        let route = self.route.as_deref().unwrap_or("(unnamed)");
        tracing::warn!(
            "route {route}: an IdempotencyReplayLayer sits beneath the replay guard, which cannot protect it, so its records are not replayed (retries get 409); in an Autumn app, add it with Route::layer on a route marked ReplayThroughInner, not on the handler given to Route::new"
        );
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

/// The recorded response, marked as a replay.
pub(crate) fn replay_response(record: &IdempotencyRecord) -> Response {
    let mut response = record.to_response();
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response.extensions_mut().insert(Replayed);
    response
}
