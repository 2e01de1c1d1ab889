//! [`ResponseFuture`]: the inner response, or 408 once the request's
//! deadline passes; the timer is armed on the first wait only (see the
//! module docs).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

pin_project! {
    /// The future of [`RequestTimeout`](super::service::RequestTimeout): the
    /// inner response, or 408 once the deadline passes.
    pub(crate) struct ResponseFuture<F> {
        #[pin]
        inner: F,
        deadline: Instant,
        // Boxed: most requests never make one, and it would otherwise make
        // every request's future larger.
        timer: Option<Pin<Box<Sleep>>>,
    }
}

impl<F> ResponseFuture<F> {
    /// `inner`, due by `deadline`; no timer yet.
    pub(super) fn new(inner: F, deadline: Instant) -> Self {
        Self {
            inner,
            deadline,
            timer: None,
        }
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(answer) = this.inner.poll(cx) {
            return Poll::Ready(answer);
        }
        let deadline = *this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        ready!(timer.as_mut().poll(cx));
        // Dropping the future (with the handler's) is what cancels it.
        Poll::Ready(Ok(StatusCode::REQUEST_TIMEOUT.into_response()))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use tower::{Layer as _, Service};

    use super::super::RequestTimeoutLayer;
    use super::*;

    /// A handler that answers 201 after `wait` (at once for zero), and
    /// sets `finished` when it does.
    fn handler(
        wait: Duration,
        finished: Arc<AtomicBool>,
    ) -> impl Service<(), Response = Response, Error = Infallible> {
        tower::service_fn(move |()| {
            let finished = finished.clone();
            async move {
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                finished.store(true, Ordering::SeqCst);
                Ok::<_, Infallible>(StatusCode::CREATED.into_response())
            }
        })
    }

    /// Calls at once (a `service_fn` is always ready), so the deadline
    /// starts now; polled only when awaited.
    fn call(
        timeout: Duration,
        wait: Duration,
    ) -> (
        ResponseFuture<impl Future<Output = Result<Response, Infallible>>>,
        Arc<AtomicBool>,
    ) {
        let finished = Arc::new(AtomicBool::new(false));
        let future = RequestTimeoutLayer::new(timeout)
            .layer(handler(wait, finished.clone()))
            .call(());
        (future, finished)
    }

    fn status(answer: Result<Response, Infallible>) -> StatusCode {
        answer.unwrap_or_else(|never| match never {}).status()
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_is_passed_through() {
        let (future, _) = call(Duration::from_secs(5), Duration::from_secs(4));
        assert_eq!(status(future.await), StatusCode::CREATED);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_answer_is_408_and_the_handler_is_dropped() {
        let started = Instant::now();
        let (future, finished) = call(Duration::from_secs(5), Duration::from_secs(6));
        assert_eq!(status(future.await), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            !finished.load(Ordering::SeqCst),
            "the handler ran on after its 408"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_counts_from_the_call_not_from_the_first_wait() {
        let started = Instant::now();
        let (future, _) = call(Duration::from_secs(5), Duration::from_secs(4));
        // The request sits unpolled for 3 s (a busy runtime), then waits
        // 4 s more: past its deadline, though it waited less than 5 s.
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(status(future.await), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_request_answered_at_once_arms_no_timer() {
        let (future, _) = call(Duration::from_secs(5), Duration::ZERO);
        let mut future = std::pin::pin!(future);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let Poll::Ready(answer) = future.as_mut().poll(&mut cx) else {
            panic!("not answered on the first poll");
        };
        assert_eq!(status(answer), StatusCode::CREATED);
        assert!(future.timer.is_none(), "a timer was armed for nothing");
    }

    #[tokio::test]
    async fn a_request_that_waits_arms_its_timer() {
        let (future, _) = call(Duration::from_secs(5), Duration::from_secs(1));
        let mut future = std::pin::pin!(future);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert!(future.timer.is_some());
    }
}
