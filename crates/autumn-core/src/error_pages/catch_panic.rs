//! A panic in a handler (or in a layer under this one) answered as a 500
//! problem document, never a dropped connection.
//!
//! tower-http's `CatchPanic` does the same but boxes every response body
//! into a type of its own, which the error pages above then box again; the
//! app's bodies are already `axum::body::Body`, so here they pass as they
//! are.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::panic_response;

/// Catches panics of the services under it. See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CatchPanicLayer;

impl<S> Layer<S> for CatchPanicLayer {
    type Service = CatchPanic<S>;

    fn layer(&self, inner: S) -> CatchPanic<S> {
        CatchPanic { inner }
    }
}

/// The service made by [`CatchPanicLayer`].
#[derive(Debug, Clone)]
pub(crate) struct CatchPanic<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for CatchPanic<S>
where
    S: Service<Request<B>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = CatchPanicFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // A panic while the inner service starts the request counts too.
        match catch_unwind(AssertUnwindSafe(|| self.inner.call(request))) {
            Ok(future) => CatchPanicFuture {
                inner: Some(future),
                panicked: None,
            },
            Err(panic) => CatchPanicFuture {
                inner: None,
                panicked: Some(panic_response(panic)),
            },
        }
    }
}

pin_project! {
    /// The future of [`CatchPanic`].
    pub(crate) struct CatchPanicFuture<F> {
        #[pin]
        inner: Option<F>,
        panicked: Option<Response<Body>>,
    }
}

impl<F, E> Future for CatchPanicFuture<F>
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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::ServiceExt as _;

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
