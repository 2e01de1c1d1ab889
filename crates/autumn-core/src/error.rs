//! [`AutumnError`]: the error a handler returns, turned into a response whose
//! status follows the error's kind.

use axum::response::{IntoResponse, Response};
use http::StatusCode;

/// The result type of handlers: `Ok` renders, `Err` answers with the error's
/// status and a problem document.
pub type AutumnResult<T, E = AutumnError> = Result<T, E>;

/// What went wrong, which decides the status a client sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// 400: the request is malformed.
    BadRequest,
    /// 401: the caller is not authenticated.
    Unauthorized,
    /// 403: the caller may not do this.
    Forbidden,
    /// 404: no such resource.
    NotFound,
    /// 409: the request conflicts with the resource's state.
    Conflict,
    /// 422: the request is well-formed but its content is invalid.
    Unprocessable,
    /// 503: a dependency is unavailable; retry later.
    Unavailable,
    /// 500: a bug or an unexpected failure. Its message is logged, never sent.
    Internal,
}

impl ErrorKind {
    /// The status a response of this kind carries.
    pub fn status(self) -> StatusCode {
        match self {
            Self::BadRequest => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::Conflict => StatusCode::CONFLICT,
            Self::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error a handler returns.
///
/// Client errors (4xx) send their message to the client; server errors (5xx)
/// log it with its source chain and send only a generic message, so internals
/// never leak. Any `std::error::Error` converts into an internal error with
/// `?`.
///
/// ```
/// use autumn_core::{AutumnError, AutumnResult};
///
/// fn find(id: u32) -> AutumnResult<&'static str> {
///     match id {
///         1 => Ok("widget"),
///         _ => Err(AutumnError::not_found(format!("no order {id}"))),
///     }
/// }
/// assert_eq!(find(2).unwrap_err().status(), http::StatusCode::NOT_FOUND);
/// ```
#[derive(Debug)]
pub struct AutumnError {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl AutumnError {
    /// An error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// 400 Bad Request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthorized, message)
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, message)
    }

    /// 404 Not Found.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// 409 Conflict.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }

    /// 422 Unprocessable Entity, e.g. a validation failure.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unprocessable, message)
    }

    /// 503 Service Unavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    /// 500 Internal Server Error wrapping `source`, which is logged, not sent.
    pub fn internal(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        let source = source.into();
        Self {
            kind: ErrorKind::Internal,
            message: source.to_string(),
            source: Some(source),
        }
    }

    /// The error's kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The status the response will carry.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The message (for 5xx errors: what is logged, not what is sent).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for AutumnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.status())
    }
}

impl<E> From<E> for AutumnError
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn from(error: E) -> Self {
        let mut error = Self::internal(error);
        // A session store that is down is an outage to retry, not a bug.
        if error
            .source
            .as_deref()
            .and_then(|source| source.downcast_ref::<crate::session::SessionError>())
            .is_some_and(|source| matches!(source, crate::session::SessionError::Store(_)))
        {
            error.kind = ErrorKind::Unavailable;
        }
        error
    }
}

impl IntoResponse for AutumnError {
    fn into_response(self) -> Response {
        let status = self.status();
        let detail = if status.is_server_error() {
            tracing::error!(error = %self.message, source = ?self.source, "handler failed");
            "the server could not complete this request"
        } else {
            &self.message
        };
        // The same renderer as every rejection of the guards, without a
        // `code`: an app error has no stable code of Autumn's.
        autumn_idempotency::problem_response(status, None, detail)
    }
}
