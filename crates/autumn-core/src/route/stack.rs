//! The framework's layers on one route, applied to it in one piece.
//!
//! Each `MethodRouter::layer` call boxes the route again, and every request
//! then clones that box and runs axum's route future around it a second
//! time: 560 to 1,050 instructions a request in the bench. A route a macro
//! made gets these layers around its handler function before axum boxes
//! it, so it is boxed once, as in a plain axum app; a hand-built route
//! (a `MethodRouter` already boxed) gets them in one `layer` call.

use autumn_idempotency::replay::ReplayGuard;
use autumn_idempotency::submit::SubmitTokenLayer;
use autumn_idempotency::{IdempotencyLayer, ReplayGuardLayer};
use tower::Layer;
use tower::layer::util::Identity;
use tower::util::{Either, option_layer};

use crate::rate_limit::RateLimitLayer;
use crate::telemetry::metrics::RouteLabelLayer;

/// The database pool handlers extract.
#[cfg(feature = "database")]
pub(crate) type PoolLayer = axum::Extension<crate::pool::Pool>;
/// No database in this build.
#[cfg(not(feature = "database"))]
pub(crate) type PoolLayer = Identity;

/// The commit-hook queue handlers enqueue on.
#[cfg(feature = "database")]
pub(crate) type QueueLayer = axum::Extension<crate::jobs::CommitQueue>;
/// No database in this build.
#[cfg(not(feature = "database"))]
pub(crate) type QueueLayer = Identity;

/// What the app puts on every route, whether a macro or a hand made it or
/// the app merged or nested it whole, outermost first: the database pool
/// and the commit-hook queue for the handlers, and the submit-token guard.
#[derive(Clone)]
pub(crate) struct SharedLayers {
    pub(crate) pool: Option<PoolLayer>,
    pub(crate) queue: Option<QueueLayer>,
    pub(crate) submit: Option<SubmitTokenLayer>,
}

/// [`SharedLayers`] as one layer.
pub(crate) type Shared = (
    Either<PoolLayer, Identity>,
    Either<QueueLayer, Identity>,
    Either<SubmitTokenLayer, Identity>,
);

impl SharedLayers {
    pub(crate) fn layers(&self) -> Shared {
        (
            option_layer(self.pool.clone()),
            option_layer(self.queue.clone()),
            option_layer(self.submit.clone()),
        )
    }
}

/// What the app puts on a route it mounts, outermost first: the route's
/// label for the request metrics, its rate limits (so a refused request
/// costs the guards nothing), the [`SharedLayers`], the idempotency layer,
/// the opaque route's replay guard, then the replay guard in front of the
/// handler (or of the route's own layers).
#[derive(Clone)]
pub(crate) struct RouteStack {
    pub(crate) label: RouteLabelLayer,
    pub(crate) rate_limit: Option<RateLimitLayer>,
    pub(crate) shared: SharedLayers,
    pub(crate) idempotency: Option<IdempotencyLayer>,
    pub(crate) opaque_guard: Option<ReplayGuardLayer>,
    pub(crate) inner_guard: ReplayGuardLayer,
}

/// Everything above [`RouteStack::inner_guard`], outermost first.
pub(crate) type Outer = (
    RouteLabelLayer,
    Either<RateLimitLayer, Identity>,
    Shared,
    Either<IdempotencyLayer, Identity>,
    Either<ReplayGuardLayer, Identity>,
);

impl RouteStack {
    /// The layers above the inner guard, for a route with layers of its own
    /// between the two.
    pub(crate) fn outer(&self) -> Outer {
        (
            self.label.clone(),
            option_layer(self.rate_limit.clone()),
            self.shared.layers(),
            option_layer(self.idempotency.clone()),
            option_layer(self.opaque_guard.clone()),
        )
    }
}

impl<S> Layer<S> for RouteStack
where
    Outer: Layer<ReplayGuard<S>>,
{
    type Service = <Outer as Layer<ReplayGuard<S>>>::Service;

    fn layer(&self, inner: S) -> Self::Service {
        self.outer().layer(self.inner_guard.layer(inner))
    }
}
