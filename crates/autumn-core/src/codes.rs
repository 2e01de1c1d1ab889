//! Every `code` the framework answers with itself: API tokens, the
//! cross-origin check, sessions, tenancy, app state, key administration,
//! dead jobs, and the codes error pages give an error that had none. A client matches
//! on these; the `detail` beside them is for people and may change.
//!
//! The guards' codes (idempotency keys, submit tokens) are in
//! `autumn_idempotency::codes`. An error nothing more is known about gets
//! the code of its status (`not_found`, `method_not_allowed`, ...): those
//! are in `autumn_base::problem::codes`, all re-exported here.
//!
//! ```
//! use autumn_core::api_token::ApiTokenRejection;
//! use autumn_core::codes;
//!
//! assert_eq!(ApiTokenRejection::Invalid.code(), codes::API_TOKEN_INVALID);
//! ```

use autumn_base::problem::ProblemCode;
/// The code of each status, for an error nothing more is known about
/// (`internal_error` for a handler panic among them).
pub use autumn_base::problem::codes::*;
/// 503: the key administration endpoint could not reach the store.
pub use autumn_idempotency::codes::IDEMPOTENCY_STORE_UNAVAILABLE;

// ---- API tokens ----

/// 401, `WWW-Authenticate: Bearer`: no bearer token was sent.
pub const API_TOKEN_MISSING: ProblemCode = ProblemCode::new("api_token_missing");
/// 401, `WWW-Authenticate: Bearer error="invalid_token"`: the token is
/// malformed, unknown, expired or revoked.
pub const API_TOKEN_INVALID: ProblemCode = ProblemCode::new("api_token_invalid");
/// 503, `Retry-After: 1`: the token could not be checked.
pub const API_TOKEN_STORE_UNAVAILABLE: ProblemCode =
    ProblemCode::new("api_token_store_unavailable");

// ---- the app's principal resolver (`AppBuilder::scope_by`) ----

/// 401: the resolver refused the request's credentials.
pub const PRINCIPAL_UNAUTHORIZED: ProblemCode = ProblemCode::new("principal_unauthorized");
/// 503, `Retry-After: 1`: the resolver could not check the credentials.
pub const PRINCIPAL_UNAVAILABLE: ProblemCode = ProblemCode::new("principal_unavailable");
/// 401: a handler takes a `Principal` and the request named nobody.
pub const PRINCIPAL_MISSING: ProblemCode = ProblemCode::new("principal_missing");

// ---- rate limits (`[rate_limit]`) ----

/// 429, `Retry-After`: the client made more requests than a rule allows.
pub const RATE_LIMITED: ProblemCode = ProblemCode::new("rate_limited");
/// 503, `Retry-After: 1`: a rule's count could not be read (its store is
/// unreachable or full), and the rule refuses what it cannot count.
pub const RATE_LIMIT_UNAVAILABLE: ProblemCode = ProblemCode::new("rate_limit_unavailable");

// ---- the cross-origin check ----

/// 403: a request that changes something came from a page of another
/// origin that is not trusted.
pub const CROSS_ORIGIN_REQUEST_REFUSED: ProblemCode =
    ProblemCode::new("cross_origin_request_refused");

// ---- sessions ----

/// 503, `Retry-After: 1`: the session store could not be reached.
pub const SESSION_STORE_UNAVAILABLE: ProblemCode = ProblemCode::new("session_store_unavailable");
/// 503, `Retry-After: 1`: the session store is at its capacity.
pub const SESSION_STORE_FULL: ProblemCode = ProblemCode::new("session_store_full");
/// 500: a session value did not convert to or from the type asked for.
pub const SESSION_VALUE_INVALID: ProblemCode = ProblemCode::new("session_value_invalid");
/// 500: a handler takes a `Session` but sessions are not enabled.
pub const SESSION_LAYER_MISSING: ProblemCode = ProblemCode::new("session_layer_missing");
/// 500: the handler ran but its session could not be saved.
pub const SESSION_NOT_SAVED: ProblemCode = ProblemCode::new("session_not_saved");

// ---- tenancy ----

/// 400: the request names no tenant.
pub const TENANT_MISSING: ProblemCode = ProblemCode::new("tenant_missing");
/// 404: the id is not one of the app's tenants.
pub const TENANT_UNKNOWN: ProblemCode = ProblemCode::new("tenant_unknown");
/// 503: whether the tenant exists could not be told.
pub const TENANT_UNAVAILABLE: ProblemCode = ProblemCode::new("tenant_unavailable");
/// 500: a handler takes a `Tenant` where no tenant is resolved.
pub const TENANT_NOT_RESOLVED: ProblemCode = ProblemCode::new("tenant_not_resolved");

// ---- app state ----

/// 500: a handler takes `State<S>` and no `S` was registered.
pub const STATE_MISSING: ProblemCode = ProblemCode::new("state_missing");

// ---- key administration ----

/// 401, `WWW-Authenticate: Bearer`: the key administration endpoint needs
/// the configured bearer token.
pub const IDEMPOTENCY_ADMIN_UNAUTHORIZED: ProblemCode =
    ProblemCode::new("idempotency_admin_unauthorized");

/// 403: a recorded body was asked for and `idempotency.admin.allow_bodies`
/// is off.
pub const IDEMPOTENCY_ADMIN_BODIES_DISABLED: ProblemCode =
    ProblemCode::new("idempotency_admin_bodies_disabled");

// ---- dead jobs on the actuator ----

/// 401, `WWW-Authenticate: Bearer`: the dead-job endpoints need the bearer
/// token of `jobs.admin.token`.
pub const JOBS_ADMIN_UNAUTHORIZED: ProblemCode = ProblemCode::new("jobs_admin_unauthorized");

/// 403: payloads were asked for (`?payloads=true`) and
/// `jobs.admin.allow_payloads` is off.
pub const JOBS_ADMIN_PAYLOADS_DISABLED: ProblemCode =
    ProblemCode::new("jobs_admin_payloads_disabled");

/// 400: the path's job id is not a whole number.
pub const JOB_ID_INVALID: ProblemCode = ProblemCode::new("job_id_invalid");

/// 404: no job with that id is dead (there is none, or it is pending or
/// done).
pub const DEAD_JOB_NOT_FOUND: ProblemCode = ProblemCode::new("dead_job_not_found");

/// 503: the job queue in the app database could not be read or written.
pub const JOBS_DATABASE_UNAVAILABLE: ProblemCode = ProblemCode::new("jobs_database_unavailable");

// ---- the server ----

/// 503, `Retry-After: 1`: the client already holds
/// `server.max_connections_per_client` connections (written by the server
/// itself before any request is read).
pub const TOO_MANY_CONNECTIONS: ProblemCode = ProblemCode::new("too_many_connections");

/// 400: a request to `[server.tls] redirect_port` names no host (or one a
/// `Location` header cannot carry), so it cannot be sent to HTTPS.
pub const HTTPS_REDIRECT_IMPOSSIBLE: ProblemCode = ProblemCode::new("https_redirect_impossible");

// ---- error pages: axum's extractor rejections, told apart by their text ----

/// 400: the `Json` extractor could not parse the body.
pub const BAD_JSON: ProblemCode = ProblemCode::new("bad_json");
/// 400: the `Query` extractor (or `Form` on a `GET`) could not read the
/// query.
pub const BAD_QUERY: ProblemCode = ProblemCode::new("bad_query");
/// 422: the JSON parsed but does not fit the handler's type.
pub const UNPROCESSABLE_JSON: ProblemCode = ProblemCode::new("unprocessable_json");
/// 422: the form does not fit the handler's type.
pub const UNPROCESSABLE_FORM: ProblemCode = ProblemCode::new("unprocessable_form");
