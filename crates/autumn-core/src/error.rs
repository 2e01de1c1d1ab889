//! [`AutumnError`]: the error a handler returns, turned into a response whose
//! status follows the error's kind.

use std::borrow::Cow;

use autumn_base::problem::{ProblemCode, ProblemDetails};
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
    /// 429: the client sent more requests than a rate limit allows; retry
    /// after `Retry-After`.
    TooManyRequests,
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
            Self::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error a handler returns.
///
/// Client errors (4xx) send their message to the client; server errors (5xx)
/// log it with its source chain and send only a generic message, so internals
/// never leak, unless [`with_public_detail`](Self::with_public_detail) names
/// a sentence that is safe to send. Any `std::error::Error` converts into an
/// internal error with `?`; a [`SessionError`](crate::session::SessionError)
/// from a session store that cannot be reached converts into a 503
/// `session_store_unavailable` with `Retry-After: 1` instead, and a
/// [`RateLimitRejection`](crate::rate_limit::RateLimitRejection) into its
/// own 429 or 503 with its `Retry-After`.
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
///
/// A stable `code`, a `Retry-After` and a public detail for a 5xx are
/// optional:
///
/// ```
/// use autumn_core::AutumnError;
///
/// let error = AutumnError::unavailable("provider returned 502 after 30 s")
///     .with_code("provider_unavailable")
///     .with_retry_after(5)
///     .with_public_detail("the payment provider is not answering; try again shortly");
/// assert_eq!(error.code(), Some("provider_unavailable"));
/// assert_eq!(error.retry_after(), Some(5));
/// ```
#[derive(Debug)]
pub struct AutumnError {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
    code: Option<ProblemCode>,
    retry_after: Option<u32>,
    public_detail: Option<String>,
}

impl AutumnError {
    /// An error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
            code: None,
            retry_after: None,
            public_detail: None,
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
            message: source.to_string(),
            source: Some(source),
            ..Self::new(ErrorKind::Internal, String::new())
        }
    }

    /// Sends `code` as the problem document's stable, machine-readable
    /// `code` member, e.g. `order_closed`.
    #[must_use]
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(ProblemCode::new(code));
        self
    }

    /// Sends `Retry-After: seconds`, telling the client when trying again
    /// may succeed (typically on a 503 or a 409).
    #[must_use]
    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The `detail` sent to the client in place of the message. For a 5xx
    /// this replaces the generic sentence (the message is still logged, not
    /// sent); write only what a client may read.
    #[must_use]
    pub fn with_public_detail(mut self, detail: impl Into<String>) -> Self {
        self.public_detail = Some(detail.into());
        self
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

    /// The problem document's `code`, if one was given.
    pub fn code(&self) -> Option<&'static str> {
        self.code.map(ProblemCode::as_str)
    }

    /// The `Retry-After` seconds, if any.
    pub fn retry_after(&self) -> Option<u32> {
        self.retry_after
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
        // A session store that is down is an outage to retry, not a bug: it
        // answers as the session's own rejection does.
        let session = error
            .source
            .as_deref()
            .and_then(|source| source.downcast_ref::<crate::session::SessionError>());
        if let Some(session @ crate::session::SessionError::Store(_)) = session {
            error.code = session.problem_code();
            error.public_detail = Some(session.public_detail().to_owned());
            error.retry_after = Some(1);
            error.kind = ErrorKind::Unavailable;
        }
        // A rate limit a handler counted answers as the route's own would.
        let refused = error
            .source
            .as_deref()
            .and_then(|source| source.downcast_ref::<crate::rate_limit::RateLimitRejection>());
        if let Some(refused) = refused {
            let status = refused.problem_status();
            error.kind = match status {
                StatusCode::TOO_MANY_REQUESTS => ErrorKind::TooManyRequests,
                StatusCode::SERVICE_UNAVAILABLE => ErrorKind::Unavailable,
                _ => ErrorKind::Internal,
            };
            error.code = refused.problem_code();
            if !status.is_server_error() || error.kind == ErrorKind::Unavailable {
                error.public_detail = Some(refused.problem_detail().into_owned());
            }
            error.message = refused.to_string();
            error.retry_after = refused.problem_retry_after();
        }
        error
    }
}

/// The same renderer as every rejection of the guards; the document has a
/// `code` only when one was given.
impl ProblemDetails for AutumnError {
    fn problem_status(&self) -> StatusCode {
        self.status()
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        self.code
    }

    /// A 5xx sends its public detail or a generic sentence, never the
    /// message, which may name internals.
    fn problem_detail(&self) -> Cow<'_, str> {
        let detail = match &self.public_detail {
            Some(detail) => detail,
            None if self.status().is_server_error() => "the server could not complete this request",
            None => &self.message,
        };
        Cow::Borrowed(detail)
    }

    fn problem_retry_after(&self) -> Option<u32> {
        self.retry_after
    }

    /// A 5xx is a failure the operators must see: its message and source
    /// chain, which the client is not sent.
    fn log_for_operators(&self) {
        if self.status().is_server_error() {
            tracing::error!(error = %self.message, source = ?self.source, "handler failed");
        }
    }
}

autumn_base::problem_into_response!(AutumnError);

#[cfg(test)]
mod tests {
    use axum::response::IntoResponse as _;

    use super::*;

    async fn answer(error: AutumnError) -> (StatusCode, http::HeaderMap, String) {
        let response = error.into_response();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, 64 * 1024)
            .await
            .expect("a problem document is small");
        let text = String::from_utf8(bytes.to_vec()).expect("problem documents are UTF-8");
        (parts.status, parts.headers, text)
    }

    #[tokio::test]
    async fn a_server_error_sends_a_generic_detail_unless_a_public_one_is_given() {
        let (status, _, hidden) = answer(AutumnError::unavailable("db at 10.0.0.7 refused")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(!hidden.contains("10.0.0.7"), "{hidden}");
        assert!(hidden.contains("the server could not complete this request"));

        let public = AutumnError::unavailable("db at 10.0.0.7 refused")
            .with_public_detail("the payment provider is not answering");
        let (_, _, shown) = answer(public).await;
        assert!(
            shown.contains("the payment provider is not answering"),
            "{shown}"
        );
        assert!(!shown.contains("10.0.0.7"), "{shown}");
    }

    #[tokio::test]
    async fn a_code_and_retry_after_reach_the_problem_document() {
        let error = AutumnError::conflict("the order is closed")
            .with_code("order_closed")
            .with_retry_after(7);
        let (status, headers, text) = answer(error).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(headers[http::header::RETRY_AFTER], "7");
        assert!(text.contains(r#""code":"order_closed""#), "{text}");
        assert!(text.contains("the order is closed"), "{text}");
    }

    #[tokio::test]
    async fn a_session_store_outage_met_with_question_mark_answers_like_the_session_does() {
        let outage = crate::session::SessionError::Store(crate::session::SessionStoreError::new(
            "redis 10.0.0.9 reset the connection",
        ));
        let (status, headers, text) = answer(AutumnError::from(outage)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers[http::header::RETRY_AFTER], "1");
        assert!(
            text.contains(r#""code":"session_store_unavailable""#),
            "{text}"
        );
        assert!(
            !text.contains("10.0.0.9"),
            "the store's text is logged, not sent: {text}"
        );
    }
}
