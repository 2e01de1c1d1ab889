//! [`RequestTimeoutLayer`]: the request timeout, applied to a service.

use std::time::Duration;

use tower::Layer;

use super::service::RequestTimeout;

/// Answers 408 when the inner service takes longer than `timeout`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestTimeoutLayer {
    timeout: Duration,
}

impl RequestTimeoutLayer {
    /// Answers 408 to a request not answered within `timeout` of arriving.
    pub(crate) fn new(timeout: Duration) -> Self {
        Self { timeout }
    }
}

impl<S> Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestTimeout::new(inner, self.timeout)
    }
}
