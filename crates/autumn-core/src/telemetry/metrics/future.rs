//! [`ResponseFuture`]: the inner response, counted once its head is ready.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{Response, StatusCode};
use pin_project_lite::pin_project;

use super::slot;
use super::state::Measured;

pin_project! {
    /// The future of
    /// [`HttpMetricsService`](super::service::HttpMetricsService): the
    /// inner response as it is. Until the route is known, each poll
    /// listens for it; a future dropped before the answer (the client left)
    /// only leaves the in-flight gauge.
    pub(crate) struct ResponseFuture<F> {
        #[pin]
        inner: F,
        measured: Option<Measured>,
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(inner: F, measured: Measured) -> Self {
        Self {
            inner,
            measured: Some(measured),
        }
    }

    /// The inner response, counted nowhere.
    pub(super) fn uncounted(inner: F) -> Self {
        Self {
            inner,
            measured: None,
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let inner = this.inner;
        let answer = match this.measured.as_mut() {
            Some(measured) if measured.route.is_none() => {
                let (answer, route) = slot::listen(|| inner.poll(cx));
                measured.route = route;
                answer
            }
            _ => inner.poll(cx),
        };
        let answer = ready!(answer);
        if let Some(measured) = this.measured.take() {
            measured.finish(match &answer {
                Ok(response) => response.status(),
                // The app's stack never fails; a service that does is
                // counted as a server error.
                Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
            });
        }
        Poll::Ready(answer)
    }
}
