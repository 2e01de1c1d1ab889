//! [`ApiPrincipal`]: who the request's API token acts for.

use std::sync::Arc;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use http::request::Parts;

use super::rejection::ApiTokenRejection;

/// Who the request's API token acts for, put in the request by
/// [`RequireApiToken`](super::RequireApiToken).
///
/// As an extractor it refuses a request that carried no valid token with
/// 401 (`Option<ApiPrincipal>` takes such requests too).
///
/// ```
/// use autumn_core::api_token::ApiPrincipal;
///
/// async fn whoami(principal: ApiPrincipal) -> String {
///     format!("{} via {}", principal.id(), principal.token_name())
/// }
/// # let _: axum::routing::MethodRouter = axum::routing::get(whoami);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiPrincipal {
    id: Arc<str>,
    token_name: Arc<str>,
    token_id: Arc<str>,
}

impl ApiPrincipal {
    pub(crate) fn new(id: String, token_name: String, token_id: String) -> Self {
        Self {
            id: id.into(),
            token_name: token_name.into(),
            token_id: token_id.into(),
        }
    }

    /// The principal's id, as the token was created for.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The name the token was created with.
    pub fn token_name(&self) -> &str {
        &self.token_name
    }

    /// The token's id (its public prefix), safe to log.
    pub fn token_id(&self) -> &str {
        &self.token_id
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ApiPrincipal {
    type Rejection = ApiTokenRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Self>()
            .cloned()
            .ok_or(ApiTokenRejection::Missing)
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for ApiPrincipal {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Self>().cloned())
    }
}
