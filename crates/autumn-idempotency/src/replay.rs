//! The inner half of [`ReplayMode::ThroughInner`](crate::ReplayMode).
//!
//! Place [`IdempotencyReplayLayer`] in a route's stack after the checks that
//! must run again on every retry (authentication, tenant, audit). The outer
//! [`IdempotencyLayer`](crate::IdempotencyLayer) records as usual; on a retry
//! it forwards the request into the route, and this layer answers it from the
//! record once those checks have passed.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use autumn_idempotency::{IdempotencyLayer, IdempotencyReplayLayer, MemoryIdempotencyStore};
//! use axum::{Router, routing::post};
//!
//! let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
//! let app: Router = Router::new()
//!     .route(
//!         "/transfers",
//!         post(|| async { "done" })
//!             .layer(IdempotencyReplayLayer::new())
//!             // route-local checks go here, outside the replay layer
//!             ,
//!     )
//!     .layer(IdempotencyLayer::new(store).replay_through_inner());
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use tower::{Layer, Service};

use crate::context::{PassedReplayLayer, PendingReplay};
use crate::layer::service_replay_response;

/// Answers replays inside a route, after its own checks. See the
/// [module docs](crate::replay).
#[derive(Debug, Clone, Copy, Default)]
pub struct IdempotencyReplayLayer {
    _private: (),
}

impl IdempotencyReplayLayer {
    /// The layer.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<S> Layer<S> for IdempotencyReplayLayer {
    type Service = IdempotencyReplay<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyReplay { inner }
    }
}

/// The service made by [`IdempotencyReplayLayer`].
#[derive(Debug, Clone)]
pub struct IdempotencyReplay<S> {
    inner: S,
}

impl<S> IdempotencyReplay<S> {
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
            return Box::pin(std::future::ready(Ok(service_replay_response(&record))));
        }
        let future = self.inner.call(request);
        Box::pin(async move {
            let mut response = future.await?;
            response.extensions_mut().insert(PassedReplayLayer);
            Ok(response)
        })
    }
}
