//! The replay guard: [`ReplayGuardLayer`], directly in front of a handler,
//! refuses (409) a forwarded replay that no
//! [`IdempotencyReplayLayer`](crate::IdempotencyReplayLayer) answered, so a
//! retry never runs the handler again. See the [`replay`](crate::replay)
//! module for how it fits with the replay layer.

mod future;
mod layer;
mod service;
mod state;

pub use future::ResponseFuture;
pub use layer::ReplayGuardLayer;
pub use service::ReplayGuard;
pub(crate) use service::refuse_unanswered_replay;
