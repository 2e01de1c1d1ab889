//! [`ReplayGuardLayer`]: refusing unanswered replays, applied to a handler.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tower::Layer;

use super::service::ReplayGuard;
use super::state::GuardState;

/// Refuses a replay that was forwarded into a route and reached this point
/// unanswered, so it never runs the handler.
///
/// With [`ReplayMode::ThroughInner`](crate::ReplayMode) (or a record made
/// through one), a retry is forwarded into the route for an
/// [`IdempotencyReplayLayer`](crate::IdempotencyReplayLayer) to answer. If none does (the route changed
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
        ReplayGuard::new(inner, self.state.clone())
    }
}
