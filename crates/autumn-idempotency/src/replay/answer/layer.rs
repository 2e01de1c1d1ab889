//! [`IdempotencyReplayLayer`]: answering forwarded replays, applied to a
//! route's service.

use tower::Layer;

use super::service::IdempotencyReplay;

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
        IdempotencyReplay::new(inner)
    }
}
