//! [`HttpMetricsService`]: starts a request's clock and puts it in flight,
//! listening for its route while the inner service takes it.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::future::ResponseFuture;
use super::slot;
use super::state::{HttpMetrics, Measured};

/// The service [`HttpMetricsLayer`](super::layer::HttpMetricsLayer) makes.
#[derive(Debug, Clone)]
pub(crate) struct HttpMetricsService<S> {
    inner: S,
    metrics: Arc<HttpMetrics>,
    counting: bool,
}

impl<S> HttpMetricsService<S> {
    pub(super) fn new(inner: S, metrics: Arc<HttpMetrics>, counting: bool) -> Self {
        Self {
            inner,
            metrics,
            counting,
        }
    }
}

impl<S, B, ResBody> Service<Request<B>> for HttpMetricsService<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !self.counting {
            return ResponseFuture::uncounted(self.inner.call(request));
        }
        let mut measured = Measured::start(&self.metrics, request.method());
        let (inner, route) = slot::listen(|| self.inner.call(request));
        measured.route = route;
        ResponseFuture::new(inner, measured)
    }
}
