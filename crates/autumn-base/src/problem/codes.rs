//! The codes of the HTTP statuses: what an error that nothing more is known
//! about is answered with (the router's empty 404 and 405, the timeout's
//! 408, hyper's 431), and [`INTERNAL_ERROR`], which every crate answers a
//! handler panic with. [`ProblemCode::for_status`] picks one by status.
//!
//! Together with `autumn_idempotency::codes` (the guards') and
//! `autumn_core::codes` (the framework's), these are every code Autumn
//! answers with; each crate's list re-exports the ones of this list it
//! answers itself, so that one module per crate names them all.

use super::ProblemCode;

/// 400 `bad_request`: a malformed request (hyper could not parse its
/// head, or another 400 without a code).
pub const BAD_REQUEST: ProblemCode = ProblemCode::new("bad_request");
/// 401 `unauthorized`.
pub const UNAUTHORIZED: ProblemCode = ProblemCode::new("unauthorized");
/// 403 `forbidden`.
pub const FORBIDDEN: ProblemCode = ProblemCode::new("forbidden");
/// 404 `not_found`: no route matches the path.
pub const NOT_FOUND: ProblemCode = ProblemCode::new("not_found");
/// 405 `method_not_allowed`: the path exists, the method does not.
pub const METHOD_NOT_ALLOWED: ProblemCode = ProblemCode::new("method_not_allowed");
/// 406 `not_acceptable`.
pub const NOT_ACCEPTABLE: ProblemCode = ProblemCode::new("not_acceptable");
/// 408 `request_timeout`: the request ran past the server's timeout.
pub const REQUEST_TIMEOUT: ProblemCode = ProblemCode::new("request_timeout");
/// 409 `conflict`.
pub const CONFLICT: ProblemCode = ProblemCode::new("conflict");
/// 410 `gone`.
pub const GONE: ProblemCode = ProblemCode::new("gone");
/// 411 `length_required`.
pub const LENGTH_REQUIRED: ProblemCode = ProblemCode::new("length_required");
/// 413 `payload_too_large`: the body is over an extractor's limit.
pub const PAYLOAD_TOO_LARGE: ProblemCode = ProblemCode::new("payload_too_large");
/// 414 `uri_too_long`: the request target is too long.
pub const URI_TOO_LONG: ProblemCode = ProblemCode::new("uri_too_long");
/// 415 `unsupported_media_type`: the body's `Content-Type` is not the one
/// the extractor takes.
pub const UNSUPPORTED_MEDIA_TYPE: ProblemCode = ProblemCode::new("unsupported_media_type");
/// 422 `unprocessable_entity`.
pub const UNPROCESSABLE_ENTITY: ProblemCode = ProblemCode::new("unprocessable_entity");
/// 429 `too_many_requests`.
pub const TOO_MANY_REQUESTS: ProblemCode = ProblemCode::new("too_many_requests");
/// 431 `request_header_fields_too_large`: the request head is over the
/// server's limit.
pub const REQUEST_HEADER_FIELDS_TOO_LARGE: ProblemCode =
    ProblemCode::new("request_header_fields_too_large");
/// 500 `internal_error`: a handler panicked, or another 500 without a code.
pub const INTERNAL_ERROR: ProblemCode = ProblemCode::new("internal_error");
/// 501 `not_implemented`.
pub const NOT_IMPLEMENTED: ProblemCode = ProblemCode::new("not_implemented");
/// 502 `bad_gateway`.
pub const BAD_GATEWAY: ProblemCode = ProblemCode::new("bad_gateway");
/// 503 `service_unavailable`.
pub const SERVICE_UNAVAILABLE: ProblemCode = ProblemCode::new("service_unavailable");
/// 504 `gateway_timeout`.
pub const GATEWAY_TIMEOUT: ProblemCode = ProblemCode::new("gateway_timeout");
/// `client_error`: any other 4xx.
pub const CLIENT_ERROR: ProblemCode = ProblemCode::new("client_error");
/// `server_error`: any other status.
pub const SERVER_ERROR: ProblemCode = ProblemCode::new("server_error");
