//! RFC 7807 `application/problem+json` answers, and the idempotency layer's
//! rejections.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::key::KeyError;

/// An RFC 7807 problem document: the body of every error the idempotency and
/// submit-token layers answer with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    status: StatusCode,
    code: &'static str,
    detail: String,
}

impl Problem {
    /// A problem with this status, a stable machine-readable `code`, and a
    /// `detail` a client developer can act on.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The machine-readable code, e.g. `idempotency_key_in_flight`.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The human-readable explanation.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
            "code": self.code,
        });
        let mut response = (self.status, body.to_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

/// Why the idempotency layer answered instead of the handler.
///
/// Each variant turns into a [`Problem`] response with its own status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyRejection {
    /// 400: the `Idempotency-Key` header is malformed.
    #[error(transparent)]
    MalformedKey(#[from] KeyError),
    /// 413: the body is larger than the layer buffers to fingerprint it.
    #[error(
        "the request body is larger than {limit} bytes, the most buffered for an idempotent request; send a smaller body or raise [idempotency] max_body_bytes"
    )]
    BodyTooLarge {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// 400: the request body could not be read.
    #[error("the request body could not be read: {0}")]
    UnreadableBody(String),
    /// 422: the key was used before with a different request.
    #[error(
        "this Idempotency-Key was already used for a different request (method, path, content type or body differ); use a new key for a new request"
    )]
    PayloadMismatch,
    /// 409: the first request with this key is still running.
    #[error(
        "a request with this Idempotency-Key is still being processed; retry after the Retry-After delay to get its response"
    )]
    InFlight,
    /// 409: the key was used, but this route cannot replay its response safely.
    #[error(
        "this Idempotency-Key was already used on a route whose response cannot be replayed safely (its middleware is opaque to Autumn); use a new key, or opt the route into ReplayThroughInner with an IdempotencyReplayLayer"
    )]
    ReplayUnavailable,
    /// 409: the lock could not be taken or renewed.
    #[error(
        "the in-flight lock for this Idempotency-Key could not be taken or renewed; retry after the Retry-After delay"
    )]
    LockUnavailable,
    /// 503: the store could not be reached; the handler did not run.
    #[error(
        "the idempotency store is unavailable, so the request was not processed; retry later with the same Idempotency-Key"
    )]
    StoreUnavailable,
    /// 503: the store is at its size limit and took no new key; the handler
    /// did not run.
    #[error(
        "the idempotency store is full, so the request was not processed; retry later with the same Idempotency-Key"
    )]
    StoreFull,
}

impl IdempotencyRejection {
    /// The status this rejection answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MalformedKey(_) | Self::UnreadableBody(_) => StatusCode::BAD_REQUEST,
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::PayloadMismatch => StatusCode::UNPROCESSABLE_ENTITY,
            Self::InFlight | Self::ReplayUnavailable | Self::LockUnavailable => {
                StatusCode::CONFLICT
            }
            Self::StoreUnavailable | Self::StoreFull => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::MalformedKey(_) => "idempotency_key_malformed",
            Self::UnreadableBody(_) => "request_body_unreadable",
            Self::BodyTooLarge { .. } => "request_body_too_large",
            Self::PayloadMismatch => "idempotency_key_reused",
            Self::InFlight => "idempotency_key_in_flight",
            Self::ReplayUnavailable => "idempotency_replay_unavailable",
            Self::LockUnavailable => "idempotency_lock_unavailable",
            Self::StoreUnavailable => "idempotency_store_unavailable",
            Self::StoreFull => "idempotency_store_full",
        }
    }
}

impl IntoResponse for IdempotencyRejection {
    fn into_response(self) -> Response {
        let retry = matches!(
            self,
            Self::InFlight | Self::LockUnavailable | Self::StoreUnavailable | Self::StoreFull
        );
        let mut response =
            Problem::new(self.status(), self.code(), self.to_string()).into_response();
        if retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
