//! The response future of [`CrossOrigin`](super::CrossOrigin).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::Response;
use pin_project_lite::pin_project;

pin_project! {
    /// Response future of [`CrossOrigin`](super::CrossOrigin): the inner
    /// service's own future, or the refusal, ready at once.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<F> {
        Inner { #[pin] future: F },
        Refused { response: Option<Response> },
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn inner(future: F) -> Self {
        Self {
            kind: Kind::Inner { future },
        }
    }

    pub(super) fn refused(response: Response) -> Self {
        Self {
            kind: Kind::Refused {
                response: Some(response),
            },
        }
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProjection::Inner { future } => future.poll(cx),
            KindProjection::Refused { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => panic!("cross-origin ResponseFuture polled after completion"),
            },
        }
    }
}
