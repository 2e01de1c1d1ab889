//! [`ApiTokenRejection`]: why a request's API token was refused.

use autumn_base::problem::{ProblemCode, ProblemDetails};
use http::{HeaderName, HeaderValue, StatusCode, header};

use crate::codes;

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

    /// The stable machine-readable code in the problem document, one of
    /// [`codes`](crate::codes).
    pub fn code(&self) -> &'static str {
        self.typed_code().as_str()
    }

    fn typed_code(&self) -> ProblemCode {
        match self {
            Self::Missing => codes::API_TOKEN_MISSING,
            Self::Invalid => codes::API_TOKEN_INVALID,
            Self::StoreUnavailable => codes::API_TOKEN_STORE_UNAVAILABLE,
        }
    }
}

impl ProblemDetails for ApiTokenRejection {
    fn problem_status(&self) -> StatusCode {
        self.status()
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(self.typed_code())
    }

    /// The outage is worth retrying shortly; a refused token is not.
    fn problem_retry_after(&self) -> Option<u32> {
        matches!(self, Self::StoreUnavailable).then_some(1)
    }

    /// A 401 says how to authenticate (RFC 6750), and whether the token
    /// sent was the trouble.
    fn problem_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        let challenge = match self {
            Self::Missing => "Bearer",
            Self::Invalid => "Bearer error=\"invalid_token\"",
            Self::StoreUnavailable => return Vec::new(),
        };
        vec![(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        )]
    }
}

autumn_base::problem_into_response!(ApiTokenRejection);
