//! The contract an API-token backend implements, and what it keeps.

use std::future::Future;
use std::pin::Pin;

/// The boxed future every [`ApiTokenStore`] method returns.
pub type ApiTokenFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, ApiTokenStoreError>> + Send + 'a>>;

/// A backend that keeps API tokens: memory or the app database.
///
/// A store keeps one [`ApiTokenRecord`] per token, found by its public
/// prefix. It never sees a token: [`ApiTokens`](super::ApiTokens) hashes it
/// first and compares the hashes itself. Implementations are called
/// concurrently from many requests (and, for shared backends, many
/// processes) and must not block the runtime thread.
pub trait ApiTokenStore: Send + Sync + 'static {
    /// Adds `record`.
    ///
    /// Fails with [`ApiTokenStoreError::Duplicate`] when a token with the
    /// same prefix exists.
    fn insert<'a>(&'a self, record: &'a ApiTokenRecord) -> ApiTokenFuture<'a, ()>;

    /// The record under `prefix`, revoked and expired ones included.
    fn find<'a>(&'a self, prefix: &'a str) -> ApiTokenFuture<'a, Option<ApiTokenRecord>>;

    /// Marks the token under `prefix` revoked at `now_millis`; `false` when
    /// there is none, or it was revoked already.
    fn revoke<'a>(&'a self, prefix: &'a str, now_millis: u64) -> ApiTokenFuture<'a, bool>;

    /// Sets the token's `last_used_at_millis` to `now_millis` unless it was
    /// set after `stale_before_millis` (one write per token per interval,
    /// however many replicas see it used); `true` when it wrote.
    fn touch<'a>(
        &'a self,
        prefix: &'a str,
        now_millis: u64,
        stale_before_millis: u64,
    ) -> ApiTokenFuture<'a, bool>;

    /// Every token of `principal`, oldest first.
    fn list<'a>(&'a self, principal: &'a str) -> ApiTokenFuture<'a, Vec<ApiTokenRecord>>;
}

/// What a store keeps for one token. Times are milliseconds since the Unix
/// epoch on the app clock.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiTokenRecord {
    /// The token's public prefix: its id, safe to show and log.
    pub prefix: String,
    /// The SHA-256 hash of the token; the token itself is never kept.
    pub token_hash: Vec<u8>,
    /// Who the token acts for (a user id, a service name).
    pub principal: String,
    /// What the token is for, as its creator named it.
    pub name: String,
    /// When it was created.
    pub created_at_millis: u64,
    /// When it stops working, if ever.
    pub expires_at_millis: Option<u64>,
    /// When it was last used, to the minute.
    pub last_used_at_millis: Option<u64>,
    /// When it was revoked, if it was.
    pub revoked_at_millis: Option<u64>,
}

impl std::fmt::Debug for ApiTokenRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiTokenRecord")
            .field("prefix", &self.prefix)
            .field("principal", &self.principal)
            .field("name", &self.name)
            .field("created_at_millis", &self.created_at_millis)
            .field("expires_at_millis", &self.expires_at_millis)
            .field("last_used_at_millis", &self.last_used_at_millis)
            .field("revoked_at_millis", &self.revoked_at_millis)
            .finish_non_exhaustive()
    }
}

/// Why an [`ApiTokenStore`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiTokenStoreError {
    /// A token with this prefix exists already.
    #[error("an API token with prefix {0} exists already")]
    Duplicate(String),
    /// The backend failed; the message says how (passwords masked).
    #[error("{0}")]
    Backend(String),
}
