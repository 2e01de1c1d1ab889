//! [`MemorySessionStore`]: sessions in this process's memory.

use std::collections::HashMap;
use std::sync::Mutex;

use super::id::SessionId;
use super::store::{SaveOutcome, SessionFuture, SessionRecord, SessionStore, SessionStoreError};

/// Sessions kept in this process: for development, tests and single-instance
/// apps. Every replica has its own, so a visitor who reaches another replica
/// is signed out there; a production profile refuses it unless
/// `[session] allow_memory_in_production = true`.
///
/// Bounded by `max_entries`: when a new session does not fit after expired
/// ones are dropped, saving it fails (the request answers 503) rather than
/// evicting someone's live session.
///
/// ```
/// use autumn_core::session::{MemorySessionStore, SessionId, SessionRecord, SessionStore};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = MemorySessionStore::new(10_000);
/// let id = SessionId::generate();
/// store.save(&id, &SessionRecord::new(Default::default(), 2_000), 1_000).await.unwrap();
/// assert!(store.load(&id, 1_500).await.unwrap().is_some());
/// assert!(store.load(&id, 2_000).await.unwrap().is_none(), "expired");
/// # });
/// ```
#[derive(Debug)]
pub struct MemorySessionStore {
    records: Mutex<HashMap<String, SessionRecord>>,
    max_entries: usize,
}

impl MemorySessionStore {
    /// A store holding at most `max_entries` sessions.
    #[must_use]
    pub fn new(max_entries: usize) -> Self {
        Self {
            records: Mutex::new(HashMap::new()),
            max_entries,
        }
    }

    fn records(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, HashMap<String, SessionRecord>>, SessionStoreError> {
        self.records
            .lock()
            .map_err(|_| SessionStoreError::new("the memory session store was poisoned by a panic"))
    }

    /// Puts `record` under `key`, making room among expired records for a
    /// new one; refuses a new one that does not fit.
    fn put(
        &self,
        records: &mut HashMap<String, SessionRecord>,
        key: String,
        record: &SessionRecord,
        now_millis: u64,
    ) -> Result<(), SessionStoreError> {
        if !records.contains_key(&key) && records.len() >= self.max_entries {
            records.retain(|_, record| record.expires_at_millis > now_millis);
            if records.len() >= self.max_entries {
                return Err(SessionStoreError::full(format!(
                    "the memory session store holds its maximum of {} sessions",
                    self.max_entries
                )));
            }
        }
        records.insert(key, record.clone());
        Ok(())
    }
}

impl SessionStore for MemorySessionStore {
    fn load<'a>(
        &'a self,
        id: &'a SessionId,
        now_millis: u64,
    ) -> SessionFuture<'a, Option<SessionRecord>> {
        let found = self.records().map(|records| {
            records
                .get(&id.storage_key())
                .filter(|record| record.expires_at_millis > now_millis)
                .cloned()
        });
        Box::pin(std::future::ready(found))
    }

    fn save<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, ()> {
        let saved = self
            .records()
            .and_then(|mut records| self.put(&mut records, id.storage_key(), record, now_millis));
        Box::pin(std::future::ready(saved))
    }

    /// The check and the write under one hold of the lock: no other save
    /// comes between them.
    fn save_unless_retired<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, SaveOutcome> {
        let saved = self.records().and_then(|mut records| {
            let key = id.storage_key();
            if records.get(&key).is_some_and(|stored| stored.retired) {
                return Ok(SaveOutcome::Retired);
            }
            self.put(&mut records, key, record, now_millis)?;
            Ok(SaveOutcome::Written)
        });
        Box::pin(std::future::ready(saved))
    }

    fn delete<'a>(&'a self, id: &'a SessionId) -> SessionFuture<'a, ()> {
        let deleted = self.records().map(|mut records| {
            records.remove(&id.storage_key());
        });
        Box::pin(std::future::ready(deleted))
    }

    fn delete_expired(&self, now_millis: u64, limit: u64) -> SessionFuture<'_, u64> {
        let deleted = self.records().map(|mut records| {
            let expired: Vec<String> = records
                .iter()
                .filter(|(_, record)| record.expires_at_millis <= now_millis)
                .map(|(key, _)| key.clone())
                .take(usize::try_from(limit).unwrap_or(usize::MAX))
                .collect();
            for key in &expired {
                records.remove(key);
            }
            expired.len() as u64
        });
        Box::pin(std::future::ready(deleted))
    }

    /// Looks through every record under the lock: the store is bounded and
    /// in memory, so no separate index is kept.
    fn end_sessions_of<'a>(
        &'a self,
        principal: &'a str,
        except: Option<&'a SessionId>,
        now_millis: u64,
    ) -> SessionFuture<'a, u64> {
        let kept = except.map(SessionId::storage_key);
        let ended = self.records().map(|mut records| {
            let mut ended = 0;
            for (key, record) in records.iter_mut() {
                if !record.retired
                    && record.expires_at_millis > now_millis
                    && record.principal.as_deref() == Some(principal)
                    && kept.as_ref() != Some(key)
                {
                    *record = SessionRecord::retired(record.expires_at_millis);
                    ended += 1;
                }
            }
            ended
        });
        Box::pin(std::future::ready(ended))
    }

    fn len(&self) -> Option<u64> {
        self.records().ok().map(|records| records.len() as u64)
    }
}
