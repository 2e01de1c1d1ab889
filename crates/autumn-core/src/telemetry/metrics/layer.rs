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
    counting: bool,
}

impl HttpMetricsLayer {
    /// Counts into `metrics`.
    pub(crate) fn new(metrics: Arc<HttpMetrics>) -> Self {
        Self {
            metrics,
            counting: true,
        }
    }

    /// Whether requests are counted at all: not when nothing can read the
    /// counts (the actuator is off), so an app without it pays nothing.
    pub(crate) fn counting(mut self, counting: bool) -> Self {
        self.counting = counting;
        self
    }
}

impl<S> Layer<S> for HttpMetricsLayer {
    type Service = HttpMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HttpMetricsService::new(inner, Arc::clone(&self.metrics), self.counting)
    }
}
