//! [`RequireApiTokenService`]: what happens to a request.
//!
//! ```text
//! no bearer token      -> 401 Bearer (or on, unauthenticated, with allow_anonymous)
//! malformed / unknown / expired / revoked -> 401 Bearer error="invalid_token"
//!                         (past `api_token_failures` from one address: 429,
//!                         and no lookup while it is held back)
//! store error          -> 503, nothing run
//! valid                -> ApiPrincipal into the extensions; then
//!                           mounted with AppBuilder::layer: the scope's raw
//!                             `authorization` part becomes a `principal` part
//!                             (in the scope after a run too)
//!                           anywhere else: OpaqueCaller (a hit answers 409)
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use autumn_idempotency::OpaqueCaller;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use tower::Service;

use super::rejection::ApiTokenRejection;
use super::token::{Presented, presented};
use super::tokens::ApiTokens;
use crate::rate_limit::{API_TOKEN_FAILURES, RateLimits};

/// What a [`RequireApiTokenLayer`](super::RequireApiTokenLayer) was built with.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) tokens: ApiTokens,
    pub(crate) anonymous: bool,
    /// Mounted with `AppBuilder::layer` itself: nothing the app cannot see
    /// runs between it and the idempotency layer, so it may put the
    /// principal in the request's scope.
    pub(crate) registered: bool,
}

/// The service [`RequireApiTokenLayer`](super::RequireApiTokenLayer) wraps a service
/// in. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct RequireApiTokenService<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> RequireApiTokenService<S> {
    pub(crate) fn new(inner: S, settings: Arc<Settings>) -> Self {
        Self { inner, settings }
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

/// The future of a [`RequireApiTokenService`] call: boxed, since the token
/// lookup is an `async` store call.
pub type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send + 'static>>;

/// The name [`ResponseFuture`] had before every middleware's future was
/// called `ResponseFuture`.
#[deprecated(note = "renamed to autumn_core::api_token::ResponseFuture")]
pub type RequireApiTokenFuture = ResponseFuture;

impl<S> Service<Request> for RequireApiTokenService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let token = match presented(request.headers()) {
            Presented::Bearer(token) => token.to_owned(),
            Presented::Nothing if self.settings.anonymous => {
                return Box::pin(self.inner.call(request));
            }
            Presented::Nothing => return refuse(ApiTokenRejection::Missing),
            Presented::Malformed => return refuse(ApiTokenRejection::Invalid),
        };
        // The clone goes into the future; the service that was polled ready
        // is the one that gets called.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let settings = self.settings.clone();
        // Unknown tokens are counted per client address, so guessing costs
        // the token store a bounded number of lookups: past the rule, this
        // process answers 429 before looking the token up.
        let limits = request.extensions().get::<RateLimits>().and_then(|limits| {
            let client = limits.address_of(request.headers())?;
            Some((limits.clone(), client))
        });
        if let Some(refused) = limits
            .as_ref()
            .and_then(|(limits, client)| limits.held_back(API_TOKEN_FAILURES, client))
        {
            return refuse(refused);
        }
        Box::pin(async move {
            let principal = match settings.tokens.authenticate(&token).await {
                Ok(principal) => principal,
                Err(rejection @ ApiTokenRejection::Invalid) => {
                    if let Some((limits, client)) = limits
                        && let Err(refused) =
                            limits.count_failure(API_TOKEN_FAILURES, &client).await
                    {
                        return Ok(refused.into_response());
                    }
                    return Ok(rejection.into_response());
                }
                Err(rejection) => return Ok(rejection.into_response()),
            };
            let extensions = request.extensions_mut();
            if settings.registered {
                // The principal, not the token: an agent that refreshes its
                // token between attempts still finds its record.
                crate::scope::name_principal(extensions, principal.id());
            } else {
                extensions.insert(OpaqueCaller);
            }
            extensions.insert(principal);
            inner.call(request).await
        })
    }
}

fn refuse(rejection: impl IntoResponse) -> ResponseFuture {
    Box::pin(std::future::ready(Ok(rejection.into_response())))
}
