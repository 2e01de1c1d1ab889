//! Every error a client can get from Autumn's guards, as types, rendered as
//! RFC 7807 `application/problem+json` by the one renderer in `autumn_base`.
//!
//! Each refusal is a variant of a rejection enum with its status, its stable
//! machine-readable `code` and a message a client developer can act on
//! (its `Display`), the way axum-core's `extract/rejection.rs` does it:
//!
//! - [`IdempotencyRejection`]: the `Idempotency-Key` layer;
//! - [`SubmitTokenRejection`]: the submit-token layer (form scanning included);
//! - [`IdempotencyContextRejection`] and [`SubmitTokenExtractRejection`]: the
//!   extractors.
//!
//! Their codes are named in [`codes`](crate::codes). All of them,
//! [`Problem`](autumn_base::Problem), and `autumn_core::AutumnError`
//! implement [`ProblemDetails`] and answer through
//! [`render_problem`](autumn_base::render_problem), so every problem
//! document Autumn sends has the same shape and is logged the same way.

use std::fmt;
use std::sync::Arc;

use autumn_base::problem::{ProblemCode, ProblemDetails, render_problem};
use axum::response::Response;
use http::StatusCode;

use crate::codes;
use crate::key::KeyError;

/// Why the idempotency layer answered instead of the handler, or instead of
/// the handler's response.
///
/// Each variant answers a problem document with its own status and
/// [`code`](Self::code); the 409s and 503s carry `Retry-After: 1`.
///
/// ```
/// use autumn_idempotency::IdempotencyRejection;
/// use axum::response::IntoResponse;
///
/// let rejection = IdempotencyRejection::InFlight;
/// assert_eq!(rejection.code(), "idempotency_key_in_flight");
/// let response = rejection.into_response();
/// assert_eq!(response.status(), 409);
/// assert_eq!(response.headers()["retry-after"], "1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyRejection {
    /// 400 `idempotency_key_malformed`: the `Idempotency-Key` header is
    /// malformed.
    #[error(transparent)]
    MalformedKey(#[from] KeyError),
    /// 400 `idempotency_key_missing`: the route requires an
    /// `Idempotency-Key` and the request carries none. The problem `type` is
    /// the app's docs URL when it configures one, else
    /// [`KEY_MISSING_TYPE`].
    #[error(
        "this endpoint requires an Idempotency-Key header: send one with a new unique value (such as a UUID) for each operation, and the same value when retrying it"
    )]
    MissingKey,
    /// 403 `idempotency_key_needs_caller`: the route refuses keys from
    /// callers with no identity
    /// ([`AnonymousKeys::Refuse`](crate::layer::AnonymousKeys::Refuse)), and
    /// the request carries a key but no session, tenant, principal or
    /// `Authorization`; the handler did not run.
    ///
    /// 403 rather than 401: a 401 must name an authentication scheme in
    /// `WWW-Authenticate`, and the guard cannot know which one the app uses
    /// (a session cookie has none).
    #[error(
        "this endpoint does not accept an Idempotency-Key from a caller it cannot identify, because the key alone would decide whose recorded response is returned; sign in or send your credentials (a session cookie or an Authorization header) with the request, or send it without an Idempotency-Key if the endpoint does not require one"
    )]
    KeyNeedsCaller,
    /// 413 `request_body_too_large`: the body is larger than the layer
    /// buffers to fingerprint it.
    #[error(
        "the request body is larger than {limit} bytes, the most buffered for an idempotent request; send a smaller body or raise [idempotency] max_body_bytes"
    )]
    BodyTooLarge {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// 400 `request_body_unreadable`: the request body could not be read.
    #[error("the request body could not be read: {0}")]
    UnreadableBody(String),
    /// 422 `idempotency_key_reused`: the key was used before with a
    /// different request.
    #[error(
        "this Idempotency-Key was already used for a different request (method, path, content type or body differ); use a new key for a new request"
    )]
    PayloadMismatch,
    /// 409 `idempotency_key_in_flight`: the first request with this key is
    /// still running.
    #[error(
        "a request with this Idempotency-Key is still being processed; retry after the Retry-After delay to get its response"
    )]
    InFlight,
    /// 409 `idempotency_replay_unavailable`: the key was used, but this route
    /// cannot replay its response safely.
    #[error(
        "this Idempotency-Key was already used on a route whose response cannot be replayed safely (its middleware is opaque to Autumn); use a new key, or opt the route into ReplayThroughInner with an IdempotencyReplayLayer"
    )]
    ReplayUnavailable,
    /// 409 `idempotency_record_unreadable`: the key's response was recorded,
    /// sealed with a secret key this app no longer has (rotated away, or
    /// made by a process with another key), so it cannot be replayed; the
    /// handler did not run again.
    #[error(
        "this Idempotency-Key was already used, but its recorded response was sealed with a secret key this server does not have, so it cannot be replayed; the request was not run again (list the retired key in security.old_secret_keys, or use a new key to make a new request)"
    )]
    RecordUnreadable,
    /// 409 `idempotency_response_not_recorded`: the first request with this
    /// key ran, but its response was larger than `max_record_bytes`, so only
    /// the fact that it ran was recorded; it cannot be replayed and the
    /// handler did not run again.
    #[error(
        "this Idempotency-Key was already used and its request was processed, but the response was too large to keep, so it cannot be replayed; the request was not run again (fetch the resource to see the result, or use a new key to make a new request)"
    )]
    ResponseNotRecorded,
    /// 409 `idempotency_lock_unavailable`: the lock could not be taken or
    /// renewed.
    #[error(
        "the in-flight lock for this Idempotency-Key could not be taken or renewed; retry after the Retry-After delay"
    )]
    LockUnavailable,
    /// 503 `idempotency_store_unavailable`: the store could not be reached;
    /// the handler did not run.
    #[error(
        "the idempotency store is unavailable, so the request was not processed; retry later with the same Idempotency-Key"
    )]
    StoreUnavailable,
    /// 503 `idempotency_store_full`: the store is at its size limit and took
    /// no new key; the handler did not run.
    #[error(
        "the idempotency store is full, so the request was not processed; retry later with the same Idempotency-Key"
    )]
    StoreFull,
    /// 429 `idempotency_quota_exceeded`: the caller (its principal, session
    /// or address) holds as many live records, or bytes of them, as
    /// `[idempotency.quota]` allows; the handler did not run. Retries of
    /// keys already recorded are still replayed.
    #[error(
        "you hold as many recorded Idempotency-Keys as this server keeps for one caller, so this new request was not processed; retry after the Retry-After delay, when your oldest records expire (retries of keys already answered are still replayed)"
    )]
    QuotaExceeded {
        /// Seconds until the caller's oldest record expires.
        retry_after: u32,
    },
    /// 500 `internal_error`: the handler panicked. Nothing was recorded and
    /// the lock was released, so a retry runs it again.
    #[error(
        "the server failed while handling this request; it was not recorded, so a retry with the same Idempotency-Key runs it again"
    )]
    HandlerPanicked,
    /// 500 `response_lost`: the handler ran but its response body failed, so
    /// nothing could be sent or recorded; the lock is kept until it lapses.
    #[error(
        "the request was processed but its response could not be sent or recorded; a retry with the same Idempotency-Key gets 409 until the in-flight lock expires"
    )]
    ResponseLost,
    /// 500 `response_not_final`: the handler ran, but the work that makes
    /// its response final (saving the session the handler changed) failed;
    /// nothing was recorded and the key stays locked until the record's TTL
    /// ends, so a retry never runs it again.
    #[error(
        "the request was processed but its session could not be saved, so its response was not recorded; a retry with the same Idempotency-Key gets 409 until the key expires"
    )]
    ResponseNotFinal,
}

impl IdempotencyRejection {
    /// The status this rejection answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MalformedKey(_) | Self::MissingKey | Self::UnreadableBody(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::KeyNeedsCaller => StatusCode::FORBIDDEN,
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::PayloadMismatch => StatusCode::UNPROCESSABLE_ENTITY,
            Self::InFlight
            | Self::ReplayUnavailable
            | Self::RecordUnreadable
            | Self::ResponseNotRecorded
            | Self::LockUnavailable => StatusCode::CONFLICT,
            Self::StoreUnavailable | Self::StoreFull => StatusCode::SERVICE_UNAVAILABLE,
            Self::QuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::HandlerPanicked | Self::ResponseLost | Self::ResponseNotFinal => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The stable machine-readable code in the problem document, one of
    /// [`codes`](crate::codes).
    pub fn code(&self) -> &'static str {
        self.typed_code().as_str()
    }

    fn typed_code(&self) -> ProblemCode {
        match self {
            Self::MalformedKey(_) => codes::IDEMPOTENCY_KEY_MALFORMED,
            Self::MissingKey => codes::IDEMPOTENCY_KEY_MISSING,
            Self::KeyNeedsCaller => codes::IDEMPOTENCY_KEY_NEEDS_CALLER,
            Self::UnreadableBody(_) => codes::REQUEST_BODY_UNREADABLE,
            Self::BodyTooLarge { .. } => codes::REQUEST_BODY_TOO_LARGE,
            Self::PayloadMismatch => codes::IDEMPOTENCY_KEY_REUSED,
            Self::InFlight => codes::IDEMPOTENCY_KEY_IN_FLIGHT,
            Self::ReplayUnavailable => codes::IDEMPOTENCY_REPLAY_UNAVAILABLE,
            Self::RecordUnreadable => codes::IDEMPOTENCY_RECORD_UNREADABLE,
            Self::ResponseNotRecorded => codes::IDEMPOTENCY_RESPONSE_NOT_RECORDED,
            Self::LockUnavailable => codes::IDEMPOTENCY_LOCK_UNAVAILABLE,
            Self::StoreUnavailable => codes::IDEMPOTENCY_STORE_UNAVAILABLE,
            Self::StoreFull => codes::IDEMPOTENCY_STORE_FULL,
            Self::QuotaExceeded { .. } => codes::IDEMPOTENCY_QUOTA_EXCEEDED,
            Self::HandlerPanicked => codes::INTERNAL_ERROR,
            Self::ResponseLost => codes::RESPONSE_LOST,
            Self::ResponseNotFinal => codes::RESPONSE_NOT_FINAL,
        }
    }

    /// The `Retry-After` the answer carries, in seconds: 1 where trying
    /// again shortly may succeed, the wait for room over quota.
    fn retry_after(&self) -> Option<u32> {
        match self {
            Self::InFlight | Self::LockUnavailable | Self::StoreUnavailable | Self::StoreFull => {
                Some(1)
            }
            Self::QuotaExceeded { retry_after } => Some(*retry_after),
            _ => None,
        }
    }

    /// Whether the client must send a new key to get anywhere: the key is
    /// spent on another request, or on a response that cannot be replayed.
    /// `None` where the question does not arise.
    pub fn new_key_needed(&self) -> Option<bool> {
        match self {
            Self::PayloadMismatch
            | Self::ReplayUnavailable
            | Self::RecordUnreadable
            | Self::ResponseNotRecorded => Some(true),
            Self::InFlight | Self::LockUnavailable => Some(false),
            _ => None,
        }
    }

    /// The problem document as the layer answers it: with the app's docs
    /// URL as the `type` (`problem_type`, for
    /// [`MissingKey`](Self::MissingKey)), and the first field of a reused
    /// key's request that differs (`differs_at`, for
    /// [`PayloadMismatch`](Self::PayloadMismatch) when the policy explains
    /// mismatches).
    pub(crate) fn render(&self, problem_type: Option<&str>, differs_at: Option<&str>) -> Response {
        render_problem(&Explained {
            rejection: self,
            problem_type,
            differs_at,
        })
    }

    /// The machine-readable members clients act on: `retry_after`
    /// (seconds) when trying again shortly may succeed, `new_key_needed`
    /// on the 409s and the 422.
    fn members(&self) -> Vec<(&'static str, serde_json::Value)> {
        let mut members = Vec::new();
        if let Some(seconds) = self.retry_after() {
            members.push(("retry_after", serde_json::Value::from(seconds)));
        }
        if let Some(needed) = self.new_key_needed() {
            members.push(("new_key_needed", needed.into()));
        }
        members
    }
}

/// The problem `type` of [`IdempotencyRejection::MissingKey`] when the app
/// configures no docs URL.
pub const KEY_MISSING_TYPE: &str = "urn:autumn:problem:idempotency-key-missing";

impl ProblemDetails for IdempotencyRejection {
    fn problem_status(&self) -> StatusCode {
        self.status()
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(self.typed_code())
    }

    fn problem_type(&self) -> &str {
        match self {
            Self::MissingKey => KEY_MISSING_TYPE,
            _ => autumn_base::problem::ABOUT_BLANK,
        }
    }

    fn problem_retry_after(&self) -> Option<u32> {
        self.retry_after()
    }

    fn problem_members(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.members()
    }
}

/// An [`IdempotencyRejection`] with what only the layer knows: the app's
/// problem `type` and where a reused key's request differs. Rendered by
/// the one renderer, so it differs from the plain rejection in nothing else.
struct Explained<'a> {
    rejection: &'a IdempotencyRejection,
    /// `None`: the rejection's own.
    problem_type: Option<&'a str>,
    /// A JSON pointer, said in the detail and in a `differs_at` member.
    differs_at: Option<&'a str>,
}

impl fmt::Display for Explained<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.differs_at {
            Some(pointer) => write!(
                f,
                "{}; the first field that differs is {pointer}",
                self.rejection
            ),
            None => self.rejection.fmt(f),
        }
    }
}

impl ProblemDetails for Explained<'_> {
    fn problem_status(&self) -> StatusCode {
        self.rejection.problem_status()
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        self.rejection.problem_code()
    }

    fn problem_type(&self) -> &str {
        self.problem_type
            .unwrap_or_else(|| self.rejection.problem_type())
    }

    fn problem_retry_after(&self) -> Option<u32> {
        self.rejection.problem_retry_after()
    }

    fn problem_members(&self) -> Vec<(&'static str, serde_json::Value)> {
        let mut members = self.rejection.members();
        if let Some(pointer) = self.differs_at {
            members.push(("differs_at", pointer.into()));
        }
        members
    }
}

/// Why the submit-token layer answered instead of the handler, or instead of
/// the handler's response.
///
/// Each variant answers a problem document with its own status and
/// [`code`](Self::code); `submit_token_in_flight`,
/// `submit_token_store_unavailable` and `submit_token_store_full` carry
/// `Retry-After: 1`, as the idempotency layer's 409s and 503s do. The variants that name
/// the form's field carry its configured name.
///
/// ```
/// use autumn_idempotency::submit::SubmitTokenRejection;
///
/// let rejection = SubmitTokenRejection::TokenRepeated { field: "_submit_token".into() };
/// assert_eq!(rejection.code(), "submit_token_repeated");
/// assert_eq!(rejection.status(), 400);
/// assert_eq!(
///     rejection.to_string(),
///     "the form carries the _submit_token field more than once; send it once",
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitTokenRejection {
    /// 413 `form_too_large`: an urlencoded form body is larger than the
    /// layer scans for the token.
    #[error(
        "the form body is larger than {limit} bytes, the most scanned for a submit token; send less or raise security.submit_token.max_form_bytes"
    )]
    FormTooLarge {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// 400 `form_malformed`, on a form that names the token field: a bad
    /// `%` escape, broken multipart framing (a type without a boundary
    /// included), an unreadable body.
    #[error("the form body is malformed: {0}")]
    FormMalformed(String),
    /// 400 `submit_token_repeated`: the field appears more than once.
    #[error("the form carries the {field} field more than once; send it once")]
    TokenRepeated {
        /// The field's name.
        field: Arc<str>,
    },
    /// 400 `submit_token_malformed`: the value is empty, too long, not
    /// visible ASCII, or a file.
    #[error(
        "the {field} field must be a token of 1 to 255 visible ASCII characters, as rendered by the form"
    )]
    TokenMalformed {
        /// The field's name.
        field: Arc<str>,
    },
    /// 400 `submit_token_late`: in a multipart form, the field's part starts
    /// after the part of the body the layer scans before it runs the handler.
    #[error(
        "the {field} field must come within the first security.submit_token.max_form_bytes of the form body (in a multipart form, before its file fields)"
    )]
    TokenLate {
        /// The field's name.
        field: Arc<str>,
    },
    /// 409 `submit_token_in_flight`: the first post with this token is still
    /// running (or the store failed to lock).
    #[error(
        "this form was already submitted and is still being processed; wait a moment and reload"
    )]
    InFlight,
    /// 422 `submit_token_reused`: the token was recorded for another form.
    #[error("this submit token was rendered for another form; reload the form and submit it again")]
    TokenReused,
    /// 503 `submit_token_store_unavailable`: the store could not be asked;
    /// the handler did not run.
    #[error(
        "the form could not be checked against duplicate submission, so it was not processed; try again"
    )]
    StoreUnavailable,
    /// 503 `submit_token_store_full`: the store had no room for a new token;
    /// the handler did not run.
    #[error(
        "the form could not be checked against duplicate submission because the store is full, so it was not processed; try again in a moment"
    )]
    StoreFull,
    /// 429 `submit_token_quota_exceeded`: the caller holds as many
    /// submitted forms and records as `[idempotency.quota]` allows; the
    /// handler did not run.
    #[error(
        "you have submitted as many forms as this server keeps for one visitor in a while, so this one was not processed; wait a moment and submit it again"
    )]
    QuotaExceeded {
        /// Seconds until the caller's oldest record expires.
        retry_after: u32,
    },
    /// 500 `internal_error`: the handler panicked. Nothing was recorded and
    /// the token was released, so submitting again runs it again.
    #[error(
        "the server failed while handling this request; it was not recorded, so submitting the form again runs it again"
    )]
    HandlerPanicked,
    /// 500 `response_lost`: the handler ran but its response body failed;
    /// the token stays locked until the lock lapses.
    #[error(
        "the request was processed but its response could not be sent or recorded; submitting the form again gets 409 until the in-flight lock expires"
    )]
    ResponseLost,
    /// 500 `response_not_final`: the handler ran, but saving the session it
    /// changed failed; nothing was recorded and the token stays locked until
    /// its TTL ends.
    #[error(
        "the form was processed but its session could not be saved, so its response was not recorded; submitting the form again gets 409 until the token expires"
    )]
    ResponseNotFinal,
    /// 409 `submit_token_other_session`: the token was submitted before from
    /// another session (a copied page, a leaked token); its response belongs
    /// to that session and nothing ran.
    #[error(
        "this form was already submitted from another session; reload the form to get a fresh one"
    )]
    OtherSession,
    /// 409 `submit_token_record_unreadable`: the form was submitted before,
    /// but its recorded response was sealed with a secret key this app no
    /// longer has; nothing ran again.
    #[error(
        "this form was already submitted, but its recorded answer can no longer be read, so it was not processed again; reload the page to see the current state"
    )]
    RecordUnreadable,
    /// 409 `submit_token_response_not_recorded`: the form was submitted
    /// before and processed, but its response was larger than
    /// `max_record_bytes`, so only the fact that it ran was recorded;
    /// nothing ran again.
    #[error(
        "this form was already submitted and processed, but its answer was too large to keep, so it was not processed again; reload the page to see the current state, or reload the form to submit a new one"
    )]
    ResponseNotRecorded,
}

impl SubmitTokenRejection {
    /// The status this rejection answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::FormTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::FormMalformed(_)
            | Self::TokenRepeated { .. }
            | Self::TokenMalformed { .. }
            | Self::TokenLate { .. } => StatusCode::BAD_REQUEST,
            Self::InFlight
            | Self::OtherSession
            | Self::RecordUnreadable
            | Self::ResponseNotRecorded => StatusCode::CONFLICT,
            Self::TokenReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::StoreUnavailable | Self::StoreFull => StatusCode::SERVICE_UNAVAILABLE,
            Self::QuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::HandlerPanicked | Self::ResponseLost | Self::ResponseNotFinal => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The stable machine-readable code in the problem document, one of
    /// [`codes`](crate::codes).
    pub fn code(&self) -> &'static str {
        self.typed_code().as_str()
    }

    fn typed_code(&self) -> ProblemCode {
        match self {
            Self::FormTooLarge { .. } => codes::FORM_TOO_LARGE,
            Self::FormMalformed(_) => codes::FORM_MALFORMED,
            Self::TokenRepeated { .. } => codes::SUBMIT_TOKEN_REPEATED,
            Self::TokenMalformed { .. } => codes::SUBMIT_TOKEN_MALFORMED,
            Self::TokenLate { .. } => codes::SUBMIT_TOKEN_LATE,
            Self::InFlight => codes::SUBMIT_TOKEN_IN_FLIGHT,
            Self::TokenReused => codes::SUBMIT_TOKEN_REUSED,
            Self::StoreUnavailable => codes::SUBMIT_TOKEN_STORE_UNAVAILABLE,
            Self::StoreFull => codes::SUBMIT_TOKEN_STORE_FULL,
            Self::QuotaExceeded { .. } => codes::SUBMIT_TOKEN_QUOTA_EXCEEDED,
            Self::HandlerPanicked => codes::INTERNAL_ERROR,
            Self::ResponseLost => codes::RESPONSE_LOST,
            Self::ResponseNotFinal => codes::RESPONSE_NOT_FINAL,
            Self::OtherSession => codes::SUBMIT_TOKEN_OTHER_SESSION,
            Self::RecordUnreadable => codes::SUBMIT_TOKEN_RECORD_UNREADABLE,
            Self::ResponseNotRecorded => codes::SUBMIT_TOKEN_RESPONSE_NOT_RECORDED,
        }
    }
}

impl ProblemDetails for SubmitTokenRejection {
    fn problem_status(&self) -> StatusCode {
        self.status()
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(self.typed_code())
    }

    /// `Retry-After: 1` where waiting a moment may be enough; over quota,
    /// the wait for room.
    fn problem_retry_after(&self) -> Option<u32> {
        match self {
            Self::InFlight | Self::StoreUnavailable | Self::StoreFull => Some(1),
            Self::QuotaExceeded { retry_after } => Some(*retry_after),
            _ => None,
        }
    }
}

/// Why [`IdempotencyContext`](crate::IdempotencyContext) could not be
/// extracted. Take `Option<IdempotencyContext>` when the key is optional.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyContextRejection {
    /// 400 `idempotency_key_missing`: the request carries no
    /// `Idempotency-Key` (or the idempotency layer is not installed).
    #[error("this endpoint requires an Idempotency-Key header")]
    MissingKey,
}

impl IdempotencyContextRejection {
    /// The status this rejection answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MissingKey => StatusCode::BAD_REQUEST,
        }
    }

    /// The stable machine-readable code in the problem document, one of
    /// [`codes`](crate::codes).
    pub fn code(&self) -> &'static str {
        self.typed_code().as_str()
    }

    fn typed_code(&self) -> ProblemCode {
        match self {
            Self::MissingKey => codes::IDEMPOTENCY_KEY_MISSING,
        }
    }
}

impl ProblemDetails for IdempotencyContextRejection {
    fn problem_status(&self) -> StatusCode {
        self.status()
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(self.typed_code())
    }
}

/// Why [`SubmitToken`](crate::submit::SubmitToken) or
/// [`SubmitFormField`](crate::submit::SubmitFormField) could not be
/// extracted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitTokenExtractRejection {
    /// 500 `submit_token_layer_missing`: the submit-token layer is not
    /// installed (`[security.submit_token] enabled = false`).
    #[error(
        "this handler takes a submit token, but the submit-token layer is not installed; enable [security.submit_token]"
    )]
    LayerMissing,
}

impl SubmitTokenExtractRejection {
    /// The status this rejection answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::LayerMissing => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine-readable code in the problem document, one of
    /// [`codes`](crate::codes).
    pub fn code(&self) -> &'static str {
        self.typed_code().as_str()
    }

    fn typed_code(&self) -> ProblemCode {
        match self {
            Self::LayerMissing => codes::SUBMIT_TOKEN_LAYER_MISSING,
        }
    }
}

impl ProblemDetails for SubmitTokenExtractRejection {
    fn problem_status(&self) -> StatusCode {
        self.status()
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(self.typed_code())
    }
}

// Every rejection answers the same way: its problem document, through the
// one renderer.
autumn_base::problem_into_response!(
    IdempotencyRejection,
    SubmitTokenRejection,
    IdempotencyContextRejection,
    SubmitTokenExtractRejection,
);

#[cfg(test)]
mod tests {
    use axum::response::IntoResponse as _;
    use http::header;
    use http_body_util::BodyExt as _;

    use super::*;

    async fn body(response: Response) -> String {
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[tokio::test]
    async fn every_rejection_answers_its_status_code_and_detail() {
        let field: Arc<str> = "_submit_token".into();
        let rejections: Vec<(StatusCode, &str, String, bool, Response)> = vec![
            {
                let r = SubmitTokenRejection::TokenLate { field };
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
            {
                let r = SubmitTokenRejection::StoreFull;
                (r.status(), r.code(), r.to_string(), true, r.into_response())
            },
            {
                let r = SubmitTokenRejection::StoreUnavailable;
                (r.status(), r.code(), r.to_string(), true, r.into_response())
            },
            {
                let r = IdempotencyRejection::LockUnavailable;
                (r.status(), r.code(), r.to_string(), true, r.into_response())
            },
            {
                let r = IdempotencyRejection::HandlerPanicked;
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
            {
                let r = SubmitTokenRejection::OtherSession;
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
            {
                let r = IdempotencyRejection::RecordUnreadable;
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
            {
                let r = SubmitTokenRejection::RecordUnreadable;
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
            {
                let r = IdempotencyRejection::ResponseNotRecorded;
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
            {
                let r = SubmitTokenRejection::ResponseNotRecorded;
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
            {
                let r = IdempotencyRejection::ResponseNotFinal;
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
            {
                let r = IdempotencyRejection::KeyNeedsCaller;
                assert_eq!(r.status(), StatusCode::FORBIDDEN);
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
            {
                let r = IdempotencyContextRejection::MissingKey;
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
            {
                let r = SubmitTokenExtractRejection::LayerMissing;
                (
                    r.status(),
                    r.code(),
                    r.to_string(),
                    false,
                    r.into_response(),
                )
            },
        ];
        for (status, code, detail, retry, response) in rejections {
            assert_eq!(response.status(), status, "{code}");
            assert_eq!(
                response.headers().get(header::RETRY_AFTER).is_some(),
                retry,
                "{code}"
            );
            let json: serde_json::Value =
                serde_json::from_str(&body(response).await).expect("json");
            assert_eq!(json["code"], code);
            assert_eq!(json["detail"], detail.as_str());
            assert_eq!(json["status"], status.as_u16());
        }
    }
}
