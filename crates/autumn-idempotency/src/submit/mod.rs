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

mod extract;
#[allow(clippy::module_inception)]
mod layer;
mod scan;
mod service;

pub use extract::{SubmitFormField, SubmitToken};
pub use layer::SubmitTokenLayer;
pub use service::{ResponseFuture, SubmitTokenService};

/// The response header that marks a replayed form submission,
/// `X-Submit-Token-Replayed: true`.
pub const SUBMIT_TOKEN_REPLAYED: http::HeaderName =
    http::HeaderName::from_static("x-submit-token-replayed");
/// The default name of the hidden form field.
pub const DEFAULT_FIELD_NAME: &str = "_submit_token";
