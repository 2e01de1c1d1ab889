//! [`ResponseFuture`]: the inner response, with a panic while polling it
//! answered 500; and that answer, [`panic_response`].

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use autumn_base::problem::{ProblemCode, ProblemDetails};
use axum::body::Body;
use axum::response::IntoResponse as _;
use http::{Response, StatusCode};
use pin_project_lite::pin_project;

pin_project! {
    /// The future of [`CatchPanic`](super::service::CatchPanic): the inner
    /// response, or 500 when polling the inner future panicked.
    pub(crate) struct ResponseFuture<F> {
        #[pin]
        inner: Option<F>,
        panicked: Option<Response<Body>>,
    }
}

impl<F> ResponseFuture<F> {
    /// The inner service's future, polled with its panics caught.
    pub(super) fn inner(future: F) -> Self {
        Self {
            inner: Some(future),
            panicked: None,
        }
    }

    /// The answer to a panic while the inner service started the request.
    pub(super) fn panicked(response: Response<Body>) -> Self {
        Self {
            inner: None,
            panicked: Some(response),
        }
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(response) = this.panicked.take() {
            return Poll::Ready(Ok(response));
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            // Polled again after it finished: a caller's bug, answered
            // rather than panicking in turn.
            return Poll::Ready(Ok(panic_response(Box::new(
                "a request future polled after it completed",
            ))));
        };
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => {
                this.inner.set(None);
                Poll::Ready(output)
            }
            Err(panic) => {
                // The panicked future is dropped here, not polled again.
                this.inner.set(None);
                Poll::Ready(Ok(panic_response(panic)))
            }
        }
    }
}

/// The answer to a handler that panicked outside the guards (which answer
/// their own): 500 `internal_error`, the panic logged, never sent.
pub(super) fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response<Body> {
    Panicked(panic).into_response()
}

/// A handler's panic, with its payload: logged, never sent.
#[derive(thiserror::Error)]
#[error("the server failed while handling this request")]
struct Panicked(Box<dyn Any + Send + 'static>);

impl std::fmt::Debug for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Panicked").finish_non_exhaustive()
    }
}

impl ProblemDetails for Panicked {
    fn problem_status(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(crate::codes::INTERNAL_ERROR)
    }

    /// A bug: the operators must see the panic's message.
    fn log_for_operators(&self) {
        let message = self
            .0
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| self.0.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic payload that is not a string");
        tracing::error!(panic = message, "handler panicked");
    }
}

autumn_base::problem_into_response!(Panicked);

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http::Request;
    use tower::{Layer as _, ServiceExt as _};

    use super::super::CatchPanicLayer;
    use super::*;

    #[tokio::test]
    async fn a_panic_before_or_during_the_response_is_a_500_and_bodies_pass_as_they_are() {
        let panics_in_call = tower::service_fn(
            |_: Request<Body>| -> std::future::Ready<Result<Response<Body>, Infallible>> {
                panic!("in call")
            },
        );
        let response = CatchPanicLayer
            .layer(panics_in_call)
            .oneshot(Request::new(Body::empty()))
            .await
            .expect("infallible");
        assert_eq!(response.status(), http::StatusCode::INTERNAL_SERVER_ERROR);

        let panics_in_poll = tower::service_fn(|_: Request<Body>| async {
            tokio::task::yield_now().await;
            if true {
                panic!("in poll");
            }
            Ok::<_, Infallible>(Response::new(Body::empty()))
        });
        let response = CatchPanicLayer
            .layer(panics_in_poll)
            .oneshot(Request::new(Body::empty()))
            .await
            .expect("infallible");
        assert_eq!(response.status(), http::StatusCode::INTERNAL_SERVER_ERROR);

        let fine = tower::service_fn(|_: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(Body::from("fine")))
        });
        let response = CatchPanicLayer
            .layer(fine)
            .oneshot(Request::new(Body::empty()))
            .await
            .expect("infallible");
        let bytes = axum::body::to_bytes(response.into_body(), 64)
            .await
            .expect("body");
        assert_eq!(&bytes[..], b"fine");
    }
}
