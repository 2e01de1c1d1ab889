//! Compression only for clients that ask for it: a request without
//! `Accept-Encoding` passes straight through, paying nothing for a layer
//! that has nothing to do for it.

use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures_util::TryFutureExt as _;
use futures_util::future::{Either, MapOk};
use http::header;
use tower::{Layer, Service};
use tower_http::compression::{Compression, CompressionBody, CompressionLayer};

/// tower-http's compression, skipped when the request has no
/// `Accept-Encoding` (it would answer identity anyway).
#[derive(Clone, Default)]
pub(super) struct CompressWhenAskedLayer(CompressionLayer);

impl<S> Layer<S> for CompressWhenAskedLayer {
    type Service = CompressWhenAsked<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CompressWhenAsked(self.0.layer(inner))
    }
}

/// The service made by [`CompressWhenAskedLayer`].
#[derive(Clone)]
pub(super) struct CompressWhenAsked<S>(Compression<S>);

type Compressed = fn(Response<CompressionBody<Body>>) -> Response;

impl<S> Service<Request> for CompressWhenAsked<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future =
        Either<MapOk<<Compression<S> as Service<Request>>::Future, Compressed>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if request.headers().contains_key(header::ACCEPT_ENCODING) {
            let compressed: Compressed = IntoResponse::into_response;
            Either::Left(self.0.call(request).map_ok(compressed))
        } else {
            // Ready: `Compression::poll_ready` polled this same service.
            Either::Right(self.0.get_mut().call(request))
        }
    }
}
