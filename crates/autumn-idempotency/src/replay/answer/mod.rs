//! The replay layer: [`IdempotencyReplayLayer`] answers, inside a route and
//! after the route's own checks, a retry that the outer
//! [`IdempotencyLayer`](crate::IdempotencyLayer) forwarded to it. See the
//! [`replay`](crate::replay) module for how the two halves fit together.

mod layer;
mod service;

pub use layer::IdempotencyReplayLayer;
pub use service::IdempotencyReplay;
pub(crate) use service::replay_response;
