//! Every `code` the guards answer with: the `Idempotency-Key` layer
//! ([`IdempotencyRejection`](crate::IdempotencyRejection)), the submit-token
//! layer ([`SubmitTokenRejection`](crate::submit::SubmitTokenRejection)) and
//! their extractors. A client matches on these; the `detail` beside them is
//! for people and may change.
//!
//! ```
//! use autumn_idempotency::IdempotencyRejection;
//! use autumn_idempotency::codes;
//!
//! assert_eq!(IdempotencyRejection::InFlight.code(), codes::IDEMPOTENCY_KEY_IN_FLIGHT);
//! ```

use autumn_base::problem::ProblemCode;
/// 500 `internal_error`: the handler panicked (either guard). Shared with
/// the framework's panic catcher.
pub use autumn_base::problem::codes::INTERNAL_ERROR;

// ---- the `Idempotency-Key` layer and its extractor ----

/// 400: the `Idempotency-Key` header is malformed.
pub const IDEMPOTENCY_KEY_MALFORMED: ProblemCode = ProblemCode::new("idempotency_key_malformed");
/// 400: the route requires an `Idempotency-Key` and the request has none
/// (the layer), or the handler takes an `IdempotencyContext` and there is
/// none (the extractor).
pub const IDEMPOTENCY_KEY_MISSING: ProblemCode = ProblemCode::new("idempotency_key_missing");
/// 400: the request body could not be read.
pub const REQUEST_BODY_UNREADABLE: ProblemCode = ProblemCode::new("request_body_unreadable");
/// 403: the route refuses keys from callers with no identity
/// (`anonymous_keys = "refuse"`) and the request carries a key but no
/// session, tenant, principal or `Authorization`; the handler did not run.
pub const IDEMPOTENCY_KEY_NEEDS_CALLER: ProblemCode =
    ProblemCode::new("idempotency_key_needs_caller");
/// 413: the body is larger than the layer buffers to fingerprint it.
pub const REQUEST_BODY_TOO_LARGE: ProblemCode = ProblemCode::new("request_body_too_large");
/// 422: the key was used before with a different request.
pub const IDEMPOTENCY_KEY_REUSED: ProblemCode = ProblemCode::new("idempotency_key_reused");
/// 409, `Retry-After: 1`: the first request with this key is still running.
pub const IDEMPOTENCY_KEY_IN_FLIGHT: ProblemCode = ProblemCode::new("idempotency_key_in_flight");
/// 409: the key was used, but this route cannot replay its response safely.
pub const IDEMPOTENCY_REPLAY_UNAVAILABLE: ProblemCode =
    ProblemCode::new("idempotency_replay_unavailable");
/// 409: the key's response was recorded sealed with a secret key this app
/// no longer has; it cannot be replayed, and nothing ran again.
pub const IDEMPOTENCY_RECORD_UNREADABLE: ProblemCode =
    ProblemCode::new("idempotency_record_unreadable");
/// 409: the first request with this key ran, but its response was too
/// large to record, so it cannot be replayed; nothing ran again.
pub const IDEMPOTENCY_RESPONSE_NOT_RECORDED: ProblemCode =
    ProblemCode::new("idempotency_response_not_recorded");
/// 409, `Retry-After: 1`: the lock could not be taken or renewed.
pub const IDEMPOTENCY_LOCK_UNAVAILABLE: ProblemCode =
    ProblemCode::new("idempotency_lock_unavailable");
/// 503, `Retry-After: 1`: the store could not be reached; the handler did
/// not run. Also the key administration endpoint's, when the store is down.
pub const IDEMPOTENCY_STORE_UNAVAILABLE: ProblemCode =
    ProblemCode::new("idempotency_store_unavailable");
/// 503, `Retry-After: 1`: the store is at its size limit; the handler did
/// not run.
pub const IDEMPOTENCY_STORE_FULL: ProblemCode = ProblemCode::new("idempotency_store_full");
/// 429, `Retry-After`: the caller holds as many live records (or bytes of
/// them) as its quota allows; the handler did not run. Its retries of keys
/// already recorded are still replayed.
pub const IDEMPOTENCY_QUOTA_EXCEEDED: ProblemCode = ProblemCode::new("idempotency_quota_exceeded");

// ---- both guards ----

/// 500: the handler ran but its response body failed, so nothing could be
/// sent or recorded; the lock is kept until it lapses.
pub const RESPONSE_LOST: ProblemCode = ProblemCode::new("response_lost");
/// 500: the handler ran but the work that makes its response final (saving
/// the session) failed; nothing was recorded.
pub const RESPONSE_NOT_FINAL: ProblemCode = ProblemCode::new("response_not_final");

// ---- the submit-token layer and its extractors ----

/// 413: an urlencoded form body is larger than the layer scans.
pub const FORM_TOO_LARGE: ProblemCode = ProblemCode::new("form_too_large");
/// 400: a form that names the token field is malformed.
pub const FORM_MALFORMED: ProblemCode = ProblemCode::new("form_malformed");
/// 400: the token field appears more than once.
pub const SUBMIT_TOKEN_REPEATED: ProblemCode = ProblemCode::new("submit_token_repeated");
/// 400: the token is empty, too long, not visible ASCII, or a file.
pub const SUBMIT_TOKEN_MALFORMED: ProblemCode = ProblemCode::new("submit_token_malformed");
/// 400: in a multipart form, the token's part comes after the scanned
/// prefix.
pub const SUBMIT_TOKEN_LATE: ProblemCode = ProblemCode::new("submit_token_late");
/// 409, `Retry-After: 1`: the first post with this token is still running.
pub const SUBMIT_TOKEN_IN_FLIGHT: ProblemCode = ProblemCode::new("submit_token_in_flight");
/// 422: the token was recorded for another form.
pub const SUBMIT_TOKEN_REUSED: ProblemCode = ProblemCode::new("submit_token_reused");
/// 503, `Retry-After: 1`: the store could not be asked; the handler did not
/// run.
pub const SUBMIT_TOKEN_STORE_UNAVAILABLE: ProblemCode =
    ProblemCode::new("submit_token_store_unavailable");
/// 503, `Retry-After: 1`: the store had no room for a new token; the
/// handler did not run.
pub const SUBMIT_TOKEN_STORE_FULL: ProblemCode = ProblemCode::new("submit_token_store_full");
/// 429, `Retry-After`: the caller holds as many live records and submitted
/// tokens as its quota allows; the handler did not run.
pub const SUBMIT_TOKEN_QUOTA_EXCEEDED: ProblemCode =
    ProblemCode::new("submit_token_quota_exceeded");
/// 409: the token was submitted before from another session.
pub const SUBMIT_TOKEN_OTHER_SESSION: ProblemCode = ProblemCode::new("submit_token_other_session");
/// 409: the form was submitted before, but its recorded response was sealed
/// with a secret key this app no longer has; nothing ran again.
pub const SUBMIT_TOKEN_RECORD_UNREADABLE: ProblemCode =
    ProblemCode::new("submit_token_record_unreadable");
/// 409: the form was submitted before and ran, but its response was too
/// large to record, so it cannot be replayed; nothing ran again.
pub const SUBMIT_TOKEN_RESPONSE_NOT_RECORDED: ProblemCode =
    ProblemCode::new("submit_token_response_not_recorded");
/// 500: a handler takes a submit token but the submit-token layer is not
/// installed.
pub const SUBMIT_TOKEN_LAYER_MISSING: ProblemCode = ProblemCode::new("submit_token_layer_missing");
