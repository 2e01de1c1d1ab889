//! The [`CrossOrigin`] service.

use std::task::{Context, Poll};

use axum::response::{IntoResponse, Response};
use http::Request;
use tower::{Layer, Service};

use super::future::ResponseFuture;
use super::layer::CrossOriginLayer;

/// Refuses cross-origin mutating requests before `S` sees them. Made by
/// [`CrossOriginLayer`]; see the [module docs](super).
#[derive(Debug, Clone)]
pub struct CrossOrigin<S> {
    inner: S,
    layer: CrossOriginLayer,
}

impl<S> CrossOrigin<S> {
    /// `inner`, guarded by `layer`'s settings.
    pub fn new(inner: S, layer: CrossOriginLayer) -> Self {
        Self { inner, layer }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B> Service<Request<B>> for CrossOrigin<S>
where
    S: Service<Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        match self.layer.check(&request) {
            Ok(()) => ResponseFuture::inner(self.inner.call(request)),
            // Logged by the renderer, as every refusal is.
            Err(rejection) => ResponseFuture::refused(rejection.into_response()),
        }
    }
}

/// Beside the service it makes, so that the layer, the settings and the
/// check, needs nothing of the service.
impl<S> Layer<S> for CrossOriginLayer {
    type Service = CrossOrigin<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CrossOrigin::new(inner, self.clone())
    }
}
