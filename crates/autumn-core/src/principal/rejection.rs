//! [`PrincipalError`]: why a request's principal could not be named.

use std::borrow::Cow;

use autumn_base::problem::{ProblemCode, ProblemDetails};
use http::StatusCode;

use crate::codes;

/// Why a [`PrincipalResolver`](super::PrincipalResolver) named nobody, and
/// the problem+json the request is answered with; the handler does not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrincipalError {
    /// 401 `principal_unauthorized`: the credential is refused (expired,
    /// forged, revoked). The reason is logged, not sent.
    #[error("the request's credentials were refused: {0}")]
    Unauthorized(String),
    /// 503 `principal_unavailable`, `Retry-After: 1`: the credential could
    /// not be checked now (the identity provider is down). The reason is
    /// logged, not sent.
    #[error("the request's credentials could not be checked: {0}")]
    Unavailable(String),
    /// 401 `principal_missing`: a handler takes a [`Principal`](super::Principal)
    /// and the request named nobody.
    #[error("this request must be made by a known caller")]
    Missing,
}

impl PrincipalError {
    /// Refused credentials, for `reason` (logged, never sent).
    pub fn unauthorized(reason: impl Into<String>) -> Self {
        Self::Unauthorized(reason.into())
    }

    /// Credentials that cannot be checked now, for `reason` (logged, never
    /// sent).
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self::Unavailable(reason.into())
    }
}

impl ProblemDetails for PrincipalError {
    fn problem_status(&self) -> StatusCode {
        match self {
            Self::Unauthorized(_) | Self::Missing => StatusCode::UNAUTHORIZED,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(match self {
            Self::Unauthorized(_) => codes::PRINCIPAL_UNAUTHORIZED,
            Self::Unavailable(_) => codes::PRINCIPAL_UNAVAILABLE,
            Self::Missing => codes::PRINCIPAL_MISSING,
        })
    }

    fn problem_detail(&self) -> Cow<'_, str> {
        // What the client reads; the resolver's reason may name internals.
        Cow::Borrowed(match self {
            Self::Unauthorized(_) => {
                "the request's credentials were refused; sign in again or refresh the token, then retry with the same Idempotency-Key"
            }
            Self::Unavailable(_) => {
                "the request's credentials could not be checked now, so nothing was done; retry shortly with the same Idempotency-Key"
            }
            Self::Missing => "this request must be made by a known caller",
        })
    }

    fn problem_retry_after(&self) -> Option<u32> {
        matches!(self, Self::Unavailable(_)).then_some(1)
    }

    fn log_for_operators(&self) {
        match self {
            Self::Unauthorized(reason) => {
                tracing::info!(%reason, "a request's credentials were refused by the principal resolver")
            }
            Self::Unavailable(reason) => {
                tracing::warn!(%reason, "the principal resolver could not check a request's credentials")
            }
            Self::Missing => {}
        }
    }
}

autumn_base::problem_into_response!(PrincipalError);
