//! [`ApiTokenRejection`]: why a request's API token was refused.

use autumn_base::problem_response;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

/// Why [`RequireApiTokenLayer`](super::RequireApiTokenLayer) (or the
/// [`ApiPrincipal`](super::ApiPrincipal) extractor) refused a request.
///
/// Each variant answers a problem document with its own status and
/// [`code`](Self::code); the 401s carry `WWW-Authenticate: Bearer`, with
/// `error="invalid_token"` when a token was sent.
///
/// ```
/// use autumn_core::api_token::ApiTokenRejection;
/// use axum::response::IntoResponse;
///
/// let response = ApiTokenRejection::Invalid.into_response();
/// assert_eq!(response.status(), 401);
/// assert_eq!(response.headers()["www-authenticate"], "Bearer error=\"invalid_token\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiTokenRejection {
    /// 401 `api_token_missing`: no bearer token was sent.
    #[error("this request needs an API token: send it as `Authorization: Bearer <token>`")]
    Missing,
    /// 401 `api_token_invalid`: the token is malformed, unknown, expired or
    /// revoked.
    #[error(
        "the bearer token is not valid: it is malformed, unknown, expired or revoked; ask for a new token"
    )]
    Invalid,
    /// 503 `api_token_store_unavailable`: the token could not be checked;
    /// the request was not processed.
    #[error(
        "the API token could not be checked because its store is unavailable, so the request was not processed; retry later"
    )]
    StoreUnavailable,
}

impl ApiTokenRejection {
    /// The status this rejection answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Missing | Self::Invalid => StatusCode::UNAUTHORIZED,
            Self::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The stable machine-readable code in the problem document.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Missing => "api_token_missing",
            Self::Invalid => "api_token_invalid",
            Self::StoreUnavailable => "api_token_store_unavailable",
        }
    }
}

impl IntoResponse for ApiTokenRejection {
    fn into_response(self) -> Response {
        let mut response = problem_response(self.status(), Some(self.code()), &self.to_string());
        let challenge = match self {
            Self::Missing => Some("Bearer"),
            Self::Invalid => Some("Bearer error=\"invalid_token\""),
            Self::StoreUnavailable => None,
        };
        let headers = response.headers_mut();
        if let Some(challenge) = challenge {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        } else {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
