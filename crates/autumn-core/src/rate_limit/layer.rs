//! [`RateLimitLayer`]: the rules of one route (or of a router merged
//! whole), put in front of everything else on it.

use std::sync::Arc;

use tower::Layer;

use super::Limiter;
use super::service::RateLimitService;

/// Counts each request against the rules that cover its route and refuses
/// it, 429 or 503, when one of them says so; made by the app at launch for
/// each route a rule covers.
#[derive(Clone)]
pub struct RateLimitLayer {
    pub(super) limiter: Arc<Limiter>,
    /// Indexes into `limiter`'s rules: this route's, fixed at launch.
    pub(super) rules: Arc<[usize]>,
    /// A router merged whole: its routes are only known per request, by
    /// the path each one matched, so `rules` are matched then.
    pub(super) by_matched_path: bool,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("rules", &self.rules.len())
            .field("by_matched_path", &self.by_matched_path)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            layer: self.clone(),
        }
    }
}
