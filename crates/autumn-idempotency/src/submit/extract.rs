//! The extractors handlers use to render a guarded form.

use std::sync::{Arc, OnceLock};

use axum::extract::FromRequestParts;
use http::request::Parts;

use crate::problem::SubmitTokenExtractRejection;

/// The token minted for this request, made on first use: a request that
/// renders no form pays for no randomness.
#[derive(Debug, Default)]
pub(crate) struct Mint {
    token: OnceLock<String>,
}

impl Mint {
    pub(crate) fn token(&self) -> &str {
        self.token.get_or_init(|| {
            let mut buffer = uuid::Uuid::encode_buffer();
            uuid::Uuid::new_v4()
                .simple()
                .encode_lower(&mut buffer)
                .to_owned()
        })
    }

    /// Whether a handler took a token: its page must not be cached by a
    /// shared cache.
    pub(crate) fn was_used(&self) -> bool {
        self.token.get().is_some()
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
/// Every request gets its own token: a UUID v4, 122 random bits from a
/// cryptographically secure generator (the thread's ChaCha generator,
/// seeded from the OS).
/// Minting stores nothing; only a submitted token touches the store.
#[derive(Debug, Clone)]
pub struct SubmitToken {
    mint: Arc<Mint>,
}

impl SubmitToken {
    /// The token, to put in the form's hidden field.
    pub fn token(&self) -> &str {
        self.mint.token()
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
