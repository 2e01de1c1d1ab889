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
//!
//! Two middlewares, each a module of its own: [`answer`] (the replay layer)
//! and [`guard`] (the replay guard).

pub mod answer;
pub mod guard;

pub(crate) use answer::replay_response;
pub use answer::{IdempotencyReplay, IdempotencyReplayLayer};
pub(crate) use guard::refuse_unanswered_replay;
pub use guard::{ReplayGuard, ReplayGuardLayer};

/// Deprecated: renamed [`guard::ResponseFuture`]; this name goes in the
/// next release.
#[deprecated(note = "renamed to autumn_idempotency::replay::guard::ResponseFuture")]
pub type ReplayGuardFuture<F> = guard::ResponseFuture<F>;
