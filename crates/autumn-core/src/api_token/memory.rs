//! [`MemoryApiTokenStore`]: API tokens in this process's memory.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::store::{ApiTokenFuture, ApiTokenRecord, ApiTokenStore, ApiTokenStoreError};

/// API tokens kept in this process: for development and tests. They are
/// gone when the process stops, and every replica has its own; use
/// [`DbApiTokenStore`](super::DbApiTokenStore) for tokens that last.
///
/// ```
/// use std::sync::Arc;
/// use autumn_core::api_token::{ApiTokens, MemoryApiTokenStore};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let tokens = ApiTokens::new(Arc::new(MemoryApiTokenStore::new()));
/// let created = tokens.create("agent-7", "nightly sync", None).await.unwrap();
/// let principal = tokens.authenticate(created.token()).await.unwrap();
/// assert_eq!(principal.id(), "agent-7");
/// # });
/// ```
#[derive(Debug, Default)]
pub struct MemoryApiTokenStore {
    records: Mutex<HashMap<String, ApiTokenRecord>>,
}

impl MemoryApiTokenStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn records(
        &self,
    ) -> Result<MutexGuard<'_, HashMap<String, ApiTokenRecord>>, ApiTokenStoreError> {
        self.records.lock().map_err(|_| {
            ApiTokenStoreError::Backend("the memory API-token store was poisoned by a panic".into())
        })
    }
}

impl ApiTokenStore for MemoryApiTokenStore {
    fn insert<'a>(&'a self, record: &'a ApiTokenRecord) -> ApiTokenFuture<'a, ()> {
        Box::pin(async move {
            let mut records = self.records()?;
            if records.contains_key(&record.prefix) {
                return Err(ApiTokenStoreError::Duplicate(record.prefix.clone()));
            }
            records.insert(record.prefix.clone(), record.clone());
            Ok(())
        })
    }

    fn find<'a>(&'a self, prefix: &'a str) -> ApiTokenFuture<'a, Option<ApiTokenRecord>> {
        Box::pin(async move { Ok(self.records()?.get(prefix).cloned()) })
    }

    fn revoke<'a>(&'a self, prefix: &'a str, now_millis: u64) -> ApiTokenFuture<'a, bool> {
        Box::pin(async move {
            Ok(match self.records()?.get_mut(prefix) {
                Some(record) if record.revoked_at_millis.is_none() => {
                    record.revoked_at_millis = Some(now_millis);
                    true
                }
                _ => false,
            })
        })
    }

    fn touch<'a>(
        &'a self,
        prefix: &'a str,
        now_millis: u64,
        stale_before_millis: u64,
    ) -> ApiTokenFuture<'a, bool> {
        Box::pin(async move {
            Ok(match self.records()?.get_mut(prefix) {
                Some(record)
                    if record
                        .last_used_at_millis
                        .is_none_or(|used| used <= stale_before_millis) =>
                {
                    record.last_used_at_millis = Some(now_millis);
                    true
                }
                _ => false,
            })
        })
    }

    fn list<'a>(&'a self, principal: &'a str) -> ApiTokenFuture<'a, Vec<ApiTokenRecord>> {
        Box::pin(async move {
            let mut found: Vec<ApiTokenRecord> = self
                .records()?
                .values()
                .filter(|record| record.principal == principal)
                .cloned()
                .collect();
            found.sort_by(|a, b| {
                (a.created_at_millis, &a.prefix).cmp(&(b.created_at_millis, &b.prefix))
            });
            Ok(found)
        })
    }
}
