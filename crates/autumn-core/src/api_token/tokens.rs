//! [`ApiTokens`]: creating, revoking and checking tokens over a store.

use std::sync::Arc;
use std::time::Duration;

use autumn_base::clock::{SharedClock, SystemClock};

use super::principal::ApiPrincipal;
use super::rejection::ApiTokenRejection;
use super::store::{ApiTokenRecord, ApiTokenStore, ApiTokenStoreError};
use super::token;

/// How often a token's `last_used_at` is written at most.
pub const LAST_USED_EVERY: Duration = Duration::from_secs(60);

/// API tokens over an [`ApiTokenStore`]: [`create`](Self::create) one (its
/// text is shown once), [`revoke`](Self::revoke) it, and
/// [`authenticate`](Self::authenticate) what a client presents, which is
/// what [`RequireApiTokenLayer`](super::RequireApiTokenLayer) does on every request.
///
/// Cloning is cheap: clones share the store.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use autumn_core::api_token::{ApiTokenRejection, ApiTokens, MemoryApiTokenStore};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let tokens = ApiTokens::new(Arc::new(MemoryApiTokenStore::new()));
/// let created = tokens
///     .create("agent-7", "deploy bot", Some(Duration::from_secs(86_400)))
///     .await
///     .unwrap();
/// assert!(created.token().starts_with("atk_"));
/// assert_eq!(tokens.authenticate(created.token()).await.unwrap().id(), "agent-7");
///
/// tokens.revoke(created.id()).await.unwrap();
/// assert_eq!(
///     tokens.authenticate(created.token()).await,
///     Err(ApiTokenRejection::Invalid)
/// );
/// # });
/// ```
#[derive(Clone)]
pub struct ApiTokens {
    store: Arc<dyn ApiTokenStore>,
    clock: SharedClock,
}

impl std::fmt::Debug for ApiTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiTokens").finish_non_exhaustive()
    }
}

/// Why a token could not be created or revoked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiTokenError {
    /// The principal was empty.
    #[error("an API token needs a principal (who it acts for); it was empty")]
    EmptyPrincipal,
    /// The operating system's secure random source failed.
    #[error("cannot make an API token: the operating system's random source failed: {0}")]
    Randomness(getrandom::Error),
    /// The store failed.
    #[error("the API-token store failed: {0}")]
    Store(#[from] ApiTokenStoreError),
}

/// A token just created: the only time its text is available.
///
/// Its `Debug` output leaves the token out.
#[derive(Clone)]
pub struct NewApiToken {
    token: String,
    record: ApiTokenRecord,
}

impl std::fmt::Debug for NewApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewApiToken")
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

impl NewApiToken {
    /// The token, `atk_<prefix>_<secret>`: hand it to the client now; it
    /// cannot be shown again.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Its id (the public prefix), for revoking it later.
    pub fn id(&self) -> &str {
        &self.record.prefix
    }

    /// What the store keeps.
    pub fn record(&self) -> &ApiTokenRecord {
        &self.record
    }
}

impl ApiTokens {
    /// Tokens in `store`, timed by the system clock.
    pub fn new(store: Arc<dyn ApiTokenStore>) -> Self {
        Self {
            store,
            clock: Arc::new(SystemClock),
        }
    }

    /// Reads time from `clock` (tests pass a `ManualClock`).
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ApiTokenStore> {
        &self.store
    }

    /// Creates a token acting for `principal`, named `name`, that stops
    /// working after `expires_in` (never, with `None`).
    ///
    /// # Errors
    ///
    /// [`ApiTokenError`] when the principal is empty, randomness fails or
    /// the store fails.
    pub async fn create(
        &self,
        principal: &str,
        name: &str,
        expires_in: Option<Duration>,
    ) -> Result<NewApiToken, ApiTokenError> {
        if principal.is_empty() {
            return Err(ApiTokenError::EmptyPrincipal);
        }
        let generated = token::generate().map_err(ApiTokenError::Randomness)?;
        let now = self.clock.now_millis();
        let record = ApiTokenRecord {
            prefix: generated.prefix,
            token_hash: generated.hash.to_vec(),
            principal: principal.to_owned(),
            name: name.to_owned(),
            created_at_millis: now,
            expires_at_millis: expires_in
                .map(|ttl| now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))),
            last_used_at_millis: None,
            revoked_at_millis: None,
        };
        self.store.insert(&record).await?;
        Ok(NewApiToken {
            token: generated.token,
            record,
        })
    }

    /// Revokes the token whose id (prefix) is `id`: it stops working at
    /// once. `false` when there is no such token or it was revoked already.
    ///
    /// # Errors
    ///
    /// [`ApiTokenError::Store`] when the store fails.
    pub async fn revoke(&self, id: &str) -> Result<bool, ApiTokenError> {
        Ok(self.store.revoke(id, self.clock.now_millis()).await?)
    }

    /// Every token of `principal`, oldest first (hashes only).
    ///
    /// # Errors
    ///
    /// [`ApiTokenError::Store`] when the store fails.
    pub async fn list(&self, principal: &str) -> Result<Vec<ApiTokenRecord>, ApiTokenError> {
        Ok(self.store.list(principal).await?)
    }

    /// Who `presented` (the text after `Bearer `) acts for.
    ///
    /// Looks the token up by its prefix, then compares the hashes in
    /// constant time. Records the use at most once per
    /// [`LAST_USED_EVERY`]; a failure to record it is logged, not refused.
    ///
    /// # Errors
    ///
    /// [`ApiTokenRejection::Invalid`] for a malformed, unknown, expired or
    /// revoked token; [`ApiTokenRejection::StoreUnavailable`] when the store
    /// cannot be asked.
    pub async fn authenticate(&self, presented: &str) -> Result<ApiPrincipal, ApiTokenRejection> {
        let Some(prefix) = token::prefix_of(presented) else {
            return Err(ApiTokenRejection::Invalid);
        };
        let record = match self.store.find(prefix).await {
            Ok(Some(record)) => record,
            Ok(None) => return Err(ApiTokenRejection::Invalid),
            Err(error) => {
                tracing::warn!(api_token.id = prefix, %error, "could not look up an API token");
                return Err(ApiTokenRejection::StoreUnavailable);
            }
        };
        if !token::hashes_match(&record.token_hash, &token::hash(presented)) {
            return Err(ApiTokenRejection::Invalid);
        }
        let now = self.clock.now_millis();
        if record.revoked_at_millis.is_some()
            || record.expires_at_millis.is_some_and(|expiry| expiry <= now)
        {
            return Err(ApiTokenRejection::Invalid);
        }
        let every = u64::try_from(LAST_USED_EVERY.as_millis()).unwrap_or(u64::MAX);
        let stale_before = now.saturating_sub(every);
        if record
            .last_used_at_millis
            .is_none_or(|used| used <= stale_before)
            && let Err(error) = self.store.touch(prefix, now, stale_before).await
        {
            tracing::warn!(api_token.id = prefix, %error, "could not record an API token's use");
        }
        Ok(ApiPrincipal::new(
            record.principal,
            record.name,
            record.prefix,
        ))
    }
}
