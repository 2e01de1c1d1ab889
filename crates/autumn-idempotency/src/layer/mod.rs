//! Middleware that runs a mutating request at most once per `Idempotency-Key`.
//!
//! On `POST`, `PUT`, `PATCH` and `DELETE` requests that carry the header, the
//! layer:
//!
//! 1. reads the key (400 when malformed) and buffers the body up to a limit
//!    (413 past it) to fingerprint the request;
//! 2. claims the storage key: derived from method, path, the caller's
//!    [`IdempotencyScope`](crate::IdempotencyScope) and the key;
//! 3. on a first request, runs the handler to completion (even if the client
//!    goes away), records a 2xx/3xx response and releases the lock; a 4xx/5xx
//!    (or a panic) releases the lock without recording, unless the policy
//!    records server errors ([`RecordErrors::Server`]: a 5xx is then recorded
//!    like a success); a response too large to record leaves a marker that
//!    answers retries 409; the response carries `X-Idempotent-Honoured: true`;
//! 4. on a retry with the same fingerprint, answers the recorded response with
//!    `X-Idempotent-Replayed: true`, without running the handler; with another
//!    fingerprint, 422; while the first request still runs, 409 with
//!    `Retry-After: 1`.
//!
//! Requests without the header, and safe methods, pass through untouched,
//! unless the [`IdempotencyPolicy`] requires a key: then a mutating request
//! without one gets 400 `idempotency_key_missing`. With
//! [`AnonymousKeys::Refuse`], a mutating request that carries a key but no
//! caller identity (an empty [`IdempotencyScope`](crate::IdempotencyScope))
//! gets 403 `idempotency_key_needs_caller`. The policy also sets the
//! TTLs and what the fingerprint covers (see [`crate::fingerprint`]).
//!
//! # Example
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use autumn_idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
//! use axum::{Router, routing::post};
//! use tower::ServiceExt as _;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
//! let app = Router::new()
//!     .route("/echo", post(|body: String| async move { body }))
//!     .layer(IdempotencyLayer::new(store));
//!
//! let request = || {
//!     http::Request::post("/echo")
//!         .header("idempotency-key", "key-1")
//!         .body(axum::body::Body::from("hello"))
//!         .unwrap()
//! };
//! let first = app.clone().oneshot(request()).await.unwrap();
//! assert!(first.headers().get("x-idempotent-replayed").is_none());
//! let retry = app.oneshot(request()).await.unwrap();
//! assert_eq!(retry.headers()["x-idempotent-replayed"], "true");
//! # }
//! ```

mod future;
#[allow(clippy::module_inception)]
mod layer;
mod policy;
mod service;

pub use future::ResponseFuture;
pub(crate) use layer::check_ttl;
pub use layer::{
    DEFAULT_IN_FLIGHT_TTL, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_RECORD_BYTES, DEFAULT_TTL,
    GuardDescription, IdempotencyLayer,
};
pub use policy::{
    AnonymousKeys, FingerprintPolicy, IdempotencyPolicy, KeyRequirement, MIN_TTL, PolicyError,
    RecordErrors,
};
pub(crate) use service::new_owner;
pub use service::{Idempotency, ReplayMode};
