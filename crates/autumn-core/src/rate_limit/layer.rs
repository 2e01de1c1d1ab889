//! [`RateLimitLayer`]: the rules of one route (or of a router merged
//! whole), put in front of everything else on it.

use tower::Layer;

use super::RouteRules;
use super::service::RateLimitService;

/// Counts each request against the rules that cover its route and refuses
/// it, 429 or 503, when one of them says so; made by the app at launch for
/// each route a rule covers.
#[derive(Clone)]
pub struct RateLimitLayer {
    pub(super) route: RouteRules,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("rules", &self.route.rules.len())
            .field("by_matched_path", &self.route.by_matched_path)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            route: self.route.clone(),
        }
    }
}
