//! [`IdempotencyReplay`]: answers a replay the outer layer forwarded, or
//! calls the route and marks the response as having passed it.
//!
//! Its future is boxed, so there is no `ResponseFuture` here: the layer sits
//! only on routes that replay through an inner layer, where one allocation
//! per request is not worth a hand-written future.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use http::HeaderValue;
use tower::Service;

use crate::context::{
    PassedReplayLayer, PendingReplay, Replayed, consume_forwarded, take_forwarded,
};
use crate::key::IDEMPOTENT_REPLAYED;
use crate::record::IdempotencyRecord;

/// The service made by [`IdempotencyReplayLayer`](super::IdempotencyReplayLayer).
#[derive(Debug, Clone)]
pub struct IdempotencyReplay<S> {
    inner: S,
}

impl<S> IdempotencyReplay<S> {
    /// `inner`, its forwarded replays answered from the record.
    pub(super) fn new(inner: S) -> Self {
        Self { inner }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S> Service<Request> for IdempotencyReplay<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        if let Some(PendingReplay(record)) = request.extensions_mut().remove::<PendingReplay>() {
            consume_forwarded();
            return Box::pin(std::future::ready(Ok(replay_response(&record))));
        }
        // A middleware above rebuilt the request and dropped the marker: the
        // replay is still on the task.
        if let Some(record) = take_forwarded() {
            return Box::pin(std::future::ready(Ok(replay_response(&record))));
        }
        let future = self.inner.call(request);
        Box::pin(async move {
            let mut response = future.await?;
            response.extensions_mut().insert(PassedReplayLayer);
            Ok(response)
        })
    }
}

/// The recorded response, marked as a replay.
pub(crate) fn replay_response(record: &IdempotencyRecord) -> Response {
    let mut response = record.to_response();
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response.extensions_mut().insert(Replayed);
    response
}
