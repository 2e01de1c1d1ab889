//! What the services and futures of one [`ReplayGuardLayer`](super::ReplayGuardLayer)
//! share: the route they guard and whether they have warned about it.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the services of one [`ReplayGuardLayer`](super::ReplayGuardLayer)
/// share.
#[derive(Debug, Default)]
pub(super) struct GuardState {
    /// The route, for the warning.
    pub(super) route: Option<Cow<'static, str>>,
    /// Whether the warning about a replay layer beneath it was logged.
    pub(super) warned: AtomicBool,
}

impl GuardState {
    /// Once per guard: a replay layer sits beneath it, where a retry that
    /// lost its marker would run the handler again.
    pub(super) fn warn_replay_layer_beneath(&self) {
        if self.warned.swap(true, Ordering::Relaxed) {
            return;
        }
        let route = self.route.as_deref().unwrap_or("(unnamed)");
        tracing::warn!(
            "route {route}: an IdempotencyReplayLayer sits beneath the replay guard, which cannot protect it, so its records are not replayed (retries get 409); in an Autumn app, add it with Route::layer on a route marked ReplayThroughInner, not on the handler given to Route::new"
        );
    }
}
