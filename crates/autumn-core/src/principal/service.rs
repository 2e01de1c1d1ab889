//! [`PrincipalService`]: asks the resolver, then scopes the request by the
//! principal it named.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use autumn_idempotency::key::may_be_guarded;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;
use tower::Service;

use super::{Principal, PrincipalResolver};

/// The boxed part of [`PrincipalService`]'s future: a guarded request,
/// resolved, then served.
type Resolved = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

/// The service [`PrincipalLayer`](super::PrincipalLayer) makes.
#[derive(Clone)]
pub struct PrincipalService<S> {
    inner: S,
    resolver: Arc<dyn PrincipalResolver>,
}

impl<S> PrincipalService<S> {
    pub(super) fn new(inner: S, resolver: Arc<dyn PrincipalResolver>) -> Self {
        Self { inner, resolver }
    }
}

impl<S> std::fmt::Debug for PrincipalService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrincipalService").finish_non_exhaustive()
    }
}

impl<S> Service<Request> for PrincipalService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, Resolved>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // Only a guard reads the scope: every other request passes as it is.
        if !may_be_guarded(request.method(), request.headers()) {
            return Either::Left(self.inner.call(request));
        }
        // The service that was polled ready is the one that gets called.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let resolver = Arc::clone(&self.resolver);
        Either::Right(Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let resolved = resolver.resolve(&parts).await;
            match resolved {
                Ok(Some(id)) => {
                    // The principal, not the credential: a token refreshed
                    // between attempts still finds the first one's record.
                    crate::scope::name_principal(&mut parts.extensions, &id);
                    parts.extensions.insert(Principal::new(id));
                }
                Ok(None) => {}
                Err(error) => return Ok(error.into_response()),
            }
            inner.call(Request::from_parts(parts, body)).await
        }))
    }
}
