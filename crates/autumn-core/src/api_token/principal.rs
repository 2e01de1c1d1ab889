//! [`ApiPrincipal`]: who the request's API token acts for.

use std::sync::Arc;

use super::rejection::ApiTokenRejection;

/// Who the request's API token acts for, put in the request by
/// [`RequireApiTokenLayer`](super::RequireApiTokenLayer).
///
/// As an extractor it refuses a request that carried no valid token with
/// 401 (`Option<ApiPrincipal>` takes such requests too).
///
/// A request extension: inserted by the
/// [`RequireApiTokenService`](super::RequireApiTokenService) once the token
/// checked out, wherever the layer is mounted; read by this extractor
/// alone. (The idempotency scope gets the principal's id from the service
/// itself, not from here.)
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

crate::extract::extension_extractor!(ApiPrincipal, ApiTokenRejection::Missing);
