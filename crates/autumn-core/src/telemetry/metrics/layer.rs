//! [`HttpMetricsLayer`]: the request metrics, applied to a service.

use std::sync::Arc;

use tower::Layer;

use super::service::HttpMetricsService;
use super::state::HttpMetrics;

/// Counts every request the inner service answers into `metrics`: by
/// route template, method and status class, with its duration, and the
/// requests in flight.
#[derive(Debug, Clone)]
pub(crate) struct HttpMetricsLayer {
    metrics: Arc<HttpMetrics>,
}

impl HttpMetricsLayer {
    /// Counts into `metrics`.
    pub(crate) fn new(metrics: Arc<HttpMetrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for HttpMetricsLayer {
    type Service = HttpMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HttpMetricsService::new(inner, Arc::clone(&self.metrics))
    }
}
