//! One-time submit tokens: an at-most-once guarantee for plain HTML forms.
//!
//! [`SubmitTokenLayer`] mints a fresh token for every request (the
//! [`SubmitToken`] extractor reads it; a page puts it in a hidden field).
//! When a mutating form request carries that field, the layer consumes the
//! token against the idempotency store: the first use runs the handler and
//! records a 2xx/3xx response; a repeat answers that response again with
//! `x-submit-token-replayed: true`; a duplicate that arrives while the first
//! still runs gets 409 (or waits for it, when `in_flight_wait` is set).
//! Forms without the field pass through untouched.
//!
//! Every refusal is a [`SubmitTokenRejection`]; the extractors reject with
//! [`SubmitTokenExtractRejection`] when the layer is not installed.
//!
//! # Example
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use autumn_idempotency::MemoryIdempotencyStore;
//! use autumn_idempotency::submit::{SUBMIT_TOKEN_REPLAYED, SubmitToken, SubmitTokenLayer};
//! use axum::{Router, routing::get};
//! use http_body_util::BodyExt as _;
//! use tower::ServiceExt as _;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)));
//! let app = Router::new()
//!     .route(
//!         "/order",
//!         get(|token: SubmitToken| async move { token.token().to_owned() })
//!             .post(|| async { "ordered" }),
//!     )
//!     .layer(SubmitTokenLayer::new(store));
//!
//! // The page renders a token (in a hidden `_submit_token` field)...
//! let page = app
//!     .clone()
//!     .oneshot(http::Request::get("/order").body(axum::body::Body::empty()).unwrap())
//!     .await
//!     .unwrap();
//! let token = page.into_body().collect().await.unwrap().to_bytes();
//! let token = std::str::from_utf8(&token).unwrap().to_owned();
//!
//! // ...and the form posted twice runs the handler once.
//! let post = || {
//!     http::Request::post("/order")
//!         .header("content-type", "application/x-www-form-urlencoded")
//!         .body(axum::body::Body::from(format!("_submit_token={token}")))
//!         .unwrap()
//! };
//! let first = app.clone().oneshot(post()).await.unwrap();
//! assert!(first.headers().get(SUBMIT_TOKEN_REPLAYED).is_none());
//! let again = app.oneshot(post()).await.unwrap();
//! assert_eq!(again.headers()[SUBMIT_TOKEN_REPLAYED], "true");
//! # }
//! ```

mod extract;
mod future;
#[allow(clippy::module_inception)]
mod layer;
pub(crate) mod scan;
mod service;

pub use crate::problem::{SubmitTokenExtractRejection, SubmitTokenRejection};
pub use extract::{SubmitFormField, SubmitToken};
pub use future::ResponseFuture;
pub use layer::{
    DEFAULT_IN_FLIGHT_TTL, DEFAULT_IN_FLIGHT_WAIT, DEFAULT_MAX_FORM_BYTES, DEFAULT_TTL,
    SubmitTokenLayer,
};
pub use service::SubmitTokenService;

/// The response header that marks a replayed form submission,
/// `X-Submit-Token-Replayed: true`.
pub const SUBMIT_TOKEN_REPLAYED: http::HeaderName =
    http::HeaderName::from_static("x-submit-token-replayed");
/// Response extension: the handler rendered a submit token.
///
/// Inserted by the [`SubmitTokenLayer`]'s response future when a handler
/// took a token (the same future makes the page `private, no-cache`).
/// Autumn's session layer reads it on the way out to give a visitor without
/// a session an id in the cookie alone, so the token is bound to that
/// browser when it is submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenMinted;

/// Request extension: who posts this form, as the submit-token layer binds
/// a consumed token to it (Autumn's session layer puts the session here).
/// Without it, the layer binds to the request's
/// [`IdempotencyScope`](crate::IdempotencyScope).
///
/// Inserted by Autumn's session service on a request a guard may act on:
/// the stored session, the cookie's unknown id kept apart from it, or the
/// empty binding when the request has no cookie. Read by the
/// [`SubmitTokenLayer`] alone, when it claims a posted token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenBinding(Vec<u8>);

impl TokenBinding {
    /// A binding to `who` (any bytes that name the client).
    pub fn new(who: impl Into<Vec<u8>>) -> Self {
        Self(who.into())
    }

    /// The bytes that name the client.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The default name of the hidden form field.
pub const DEFAULT_FIELD_NAME: &str = "_submit_token";
