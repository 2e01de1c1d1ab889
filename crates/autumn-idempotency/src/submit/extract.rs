//! The extractors handlers use to render a guarded form.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::extract::FromRequestParts;
use http::request::Parts;

use crate::problem::SubmitTokenExtractRejection;

/// The tokens minted for this request, made on use: a request that renders
/// no form pays for no randomness.
#[derive(Debug, Default)]
pub(crate) struct Mint {
    /// What [`SubmitToken::token`] answers, every time.
    token: OnceLock<String>,
    /// Whether [`SubmitToken::mint`] made one.
    minted: AtomicBool,
}

/// A fresh token: a UUID v4 in 32 lowercase hex digits.
fn new_token() -> String {
    let mut buffer = uuid::Uuid::encode_buffer();
    uuid::Uuid::new_v4()
        .simple()
        .encode_lower(&mut buffer)
        .to_owned()
}

impl Mint {
    pub(crate) fn token(&self) -> &str {
        self.token.get_or_init(new_token)
    }

    pub(crate) fn mint(&self) -> String {
        self.minted.store(true, Ordering::Relaxed);
        new_token()
    }

    /// Whether a handler took a token: its page must not be cached by a
    /// shared cache.
    pub(crate) fn was_used(&self) -> bool {
        self.token.get().is_some() || self.minted.load(Ordering::Relaxed)
    }
}

/// Request extension: the mint for this request and the configured field
/// name (one extension, so a request pays for one insert).
///
/// Inserted by the submit-token service on every request it sees, before
/// anything else it does. Read by the [`SubmitToken`] and
/// [`SubmitFormField`] extractors, which make the token on first use; the
/// service's response future then asks the same mint whether a token was
/// taken.
#[derive(Debug, Clone)]
pub(crate) struct MintSlot {
    pub(crate) mint: Arc<Mint>,
    pub(crate) field: Arc<str>,
}

/// A fresh one-time submit token for the form this handler renders.
///
/// Put it in a hidden field named by [`SubmitFormField`] (by default
/// `_submit_token`); the submit-token layer consumes it when the form is
/// posted, so the POST handler runs at most once per rendering.
///
/// Every form gets its own token through `submit_token_field` (or
/// [`mint`](Self::mint)): a UUID v4, 122 random bits from a
/// cryptographically secure generator (the thread's ChaCha generator,
/// seeded from the OS).
/// Minting stores nothing; only a submitted token touches the store.
#[derive(Debug, Clone)]
pub struct SubmitToken {
    mint: Arc<Mint>,
}

impl SubmitToken {
    /// This request's token, the same on every call: for a page with one
    /// form. A page with several forms gives each its own with
    /// [`mint`](Self::mint) (which `submit_token_field` does), so that
    /// posting one never answers for another.
    pub fn token(&self) -> &str {
        self.mint.token()
    }

    /// A token of its own for one more form: a new one on every call.
    /// Minting stores nothing and costs a few random bytes.
    ///
    /// ```
    /// # fn check(token: autumn_idempotency::submit::SubmitToken) {
    /// let (first, second) = (token.mint(), token.mint());
    /// assert_ne!(first, second);
    /// # }
    /// ```
    pub fn mint(&self) -> String {
        self.mint.mint()
    }
}

/// The name of the hidden field the submit-token layer looks for
/// (`[security.submit_token] field_name`, `_submit_token` by default).
#[derive(Debug, Clone)]
pub struct SubmitFormField {
    name: Arc<str>,
}

impl SubmitFormField {
    /// The field name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SubmitToken {
    type Rejection = SubmitTokenExtractRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<MintSlot>() {
            Some(slot) => Ok(Self {
                mint: slot.mint.clone(),
            }),
            None => Err(SubmitTokenExtractRejection::LayerMissing),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SubmitFormField {
    type Rejection = SubmitTokenExtractRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<MintSlot>() {
            Some(slot) => Ok(Self {
                name: slot.field.clone(),
            }),
            None => Err(SubmitTokenExtractRejection::LayerMissing),
        }
    }
}
