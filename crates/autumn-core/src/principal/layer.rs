//! [`PrincipalLayer`]: a [`PrincipalResolver`](super::PrincipalResolver)
//! applied to a service.

use std::sync::Arc;

use tower::Layer;

use super::PrincipalResolver;
use super::service::PrincipalService;

/// Scopes guarded requests by the principal `resolver` names. Mounted for
/// the whole app by `AppBuilder::scope_by`.
#[derive(Clone)]
pub struct PrincipalLayer {
    resolver: Arc<dyn PrincipalResolver>,
}

impl PrincipalLayer {
    /// A layer asking `resolver`.
    pub fn new(resolver: impl PrincipalResolver) -> Self {
        Self {
            resolver: Arc::new(resolver),
        }
    }
}

impl std::fmt::Debug for PrincipalLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrincipalLayer").finish_non_exhaustive()
    }
}

impl<S> Layer<S> for PrincipalLayer {
    type Service = PrincipalService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PrincipalService::new(inner, Arc::clone(&self.resolver))
    }
}
