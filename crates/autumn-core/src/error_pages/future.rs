//! [`ResponseFuture`]: the inner service's response, rewritten when it is
//! an error.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use bytes::Bytes;
use http::Response;
use pin_project_lite::pin_project;

use super::rewrite::{Asked, BoxError, Settings, rewrite};

type Rewriting = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

pin_project! {
    /// The future [`ErrorPages`](super::ErrorPages) returns: the inner
    /// response as it is when it is not an error, with nothing boxed; an
    /// error is rewritten in a boxed future of its own (reading its body
    /// is asynchronous).
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProjection]
    enum State<F> {
        Inner {
            #[pin]
            future: F,
            asked: Option<Asked>,
            settings: Arc<Settings>,
        },
        Rewriting {
            future: Rewriting,
        },
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(future: F, asked: Asked, settings: Arc<Settings>) -> Self {
        Self {
            state: State::Inner {
                future,
                asked: Some(asked),
                settings,
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut this = self.as_mut().project();
            match this.state.as_mut().project() {
                StateProjection::Inner {
                    future,
                    asked,
                    settings,
                } => {
                    let response = ready!(future.poll(cx))?;
                    if response.status().as_u16() < 400 {
                        return Poll::Ready(Ok(response.map(Body::new)));
                    }
                    let (settings, asked) = (settings.clone(), asked.take());
                    let rewriting: Rewriting = Box::pin(async move {
                        match asked {
                            Some(asked) => rewrite(&settings, &asked, response).await,
                            None => response.map(Body::new),
                        }
                    });
                    this.state.set(State::Rewriting { future: rewriting });
                }
                StateProjection::Rewriting { future } => {
                    return future.as_mut().poll(cx).map(Ok);
                }
            }
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
