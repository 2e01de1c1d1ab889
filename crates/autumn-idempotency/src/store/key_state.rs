//! [`KeyState`]: what a store holds under one storage key, for key
//! administration (`crate::admin`) to read.

use crate::record::IdempotencyRecord;

/// What a store holds under one storage key, as
/// [`IdempotencyStore::inspect`](super::IdempotencyStore::inspect) reports it.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct KeyState {
    /// When the live lock expires (the store's clock, ms since the epoch); `None`
    /// when no lock is held. A lock whose run is alive is renewed before it
    /// expires, so a deadline in the past is never shown, and one that stays
    /// put across two looks belongs to a run that stopped.
    pub lock_expires_at: Option<u64>,
    /// When the live lock was taken (the store's clock, ms since the epoch); `None`
    /// when no lock is held, or when the store cannot say (a custom store,
    /// or a lock written before stores kept it). A renewal keeps it: it is
    /// when the run that holds the lock claimed the key.
    pub lock_taken_at: Option<u64>,
    /// Whether a lock is held, for a store that cannot say until when.
    pub locked: bool,
    /// The recorded response, when one is live.
    pub record: Option<IdempotencyRecord>,
    /// When the record expires (the store's clock, ms); `None` without a record or
    /// when the store cannot say.
    pub record_expires_at: Option<u64>,
    /// When the store looked (its clock, ms since the epoch): what the
    /// lock's owner age is measured against. `None` when the store does
    /// not say; the system clock is used then.
    pub observed_at: Option<u64>,
}

impl KeyState {
    /// An empty state, as the store saw it at `now` (its clock, ms).
    pub fn observed(now: u64) -> Self {
        Self {
            observed_at: Some(now),
            ..Self::default()
        }
    }

    /// A state with a live lock until `expires_at` (when known).
    pub fn locked_until(mut self, expires_at: Option<u64>) -> Self {
        self.locked = true;
        self.lock_expires_at = expires_at;
        self
    }

    /// The same state, saying when its lock was taken (when known).
    #[must_use]
    pub fn lock_taken(mut self, taken_at: Option<u64>) -> Self {
        self.lock_taken_at = taken_at;
        self
    }

    /// A state with a live record, expiring at `expires_at` (when known).
    pub fn recorded(mut self, record: IdempotencyRecord, expires_at: Option<u64>) -> Self {
        self.record = Some(record);
        self.record_expires_at = expires_at;
        self
    }
}
