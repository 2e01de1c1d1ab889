//! Counters the actuator reports under `idempotency`, and the size a store
//! reports with them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Hit, miss and conflict counters, failed lock renewals and responses too
/// large to record, shared by every layer of one app.
#[derive(Debug, Default)]
pub struct IdempotencyMetrics {
    hits: AtomicU64,
    misses: AtomicU64,
    conflicts: AtomicU64,
    lock_renewal_failures: AtomicU64,
    unrecorded_too_large: AtomicU64,
    quota_refusals: AtomicU64,
    store_full_refusals: AtomicU64,
    /// Store failures that refused a request, logged once per interval.
    store_failures: autumn_base::log_summary::LogSummary,
}

/// A point-in-time copy of [`IdempotencyMetrics`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetricsSnapshot {
    /// Requests answered from a record (replayed).
    pub hits: u64,
    /// First-time requests: the handler ran.
    pub misses: u64,
    /// Requests answered 409 (in flight, or a replay that must fail closed).
    pub conflicts: u64,
    /// Lock renewals that failed while the handler ran (the lock lost to its
    /// TTL, or the store failed; a run whose store keeps failing counts once
    /// a beat). The response is still recorded (owner-checked) unless
    /// another request took the key meanwhile.
    pub lock_renewal_failures: u64,
    /// Successful responses larger than the record limit: sent to the
    /// client but not recorded.
    pub unrecorded_too_large: u64,
    /// New keys and tokens refused with 429 because their caller holds its
    /// whole quota (`[idempotency.quota]`).
    pub quota_refusals: u64,
    /// New keys and tokens refused with 503 because the store (or the quota
    /// ledger) holds as much as it may: the last line past the quotas.
    pub store_full_refusals: u64,
}

impl IdempotencyMetrics {
    /// Fresh counters at zero.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn lock_renewal_failed(&self) {
        self.lock_renewal_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn too_large_to_record(&self) {
        self.unrecorded_too_large.fetch_add(1, Ordering::Relaxed);
    }

    /// A new key or token of the `layer` guard refused over its caller's
    /// quota: counted, and summed into the same warning per interval as
    /// store failures.
    pub(crate) fn quota_refused(&self, now_millis: u64, layer: &str) {
        self.quota_refusals.fetch_add(1, Ordering::Relaxed);
        self.store_failures.note(
            now_millis,
            &format!("{layer}:quota"),
            &"a caller holds its whole quota of records ([idempotency.quota])",
        );
    }

    /// A store failure that refused a request of the `layer` guard
    /// (`idempotency`, `submit_token`): summed into one warning per
    /// interval, since under a flood (a full store) it happens on every
    /// request.
    pub(crate) fn store_failed(&self, now_millis: u64, layer: &str, error: &crate::StoreError) {
        let kind = match error.kind() {
            crate::StoreErrorKind::Full => {
                self.store_full_refusals.fetch_add(1, Ordering::Relaxed);
                "full"
            }
            _ => "unavailable",
        };
        self.store_failures
            .note(now_millis, &format!("{layer}:{kind}"), error);
    }

    /// The counters as they are now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            lock_renewal_failures: self.lock_renewal_failures.load(Ordering::Relaxed),
            unrecorded_too_large: self.unrecorded_too_large.load(Ordering::Relaxed),
            quota_refusals: self.quota_refusals.load(Ordering::Relaxed),
            store_full_refusals: self.store_full_refusals.load(Ordering::Relaxed),
        }
    }
}

/// How much a store holds, for `/actuator/metrics`: see
/// [`IdempotencyStore::size`](crate::IdempotencyStore::size).
///
/// ```
/// use autumn_idempotency::StoreSize;
///
/// let size = StoreSize { entries: 2, bytes: 310, max_entries: Some(100), max_bytes: None };
/// assert_eq!(serde_json::to_value(size).unwrap()["entries"], 2);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreSize {
    /// Storage keys held (a lock, a record, or both), counting expired ones
    /// not yet swept.
    pub entries: u64,
    /// Bytes of recorded responses held (status, headers, body and
    /// fingerprint), counting expired ones not yet swept.
    pub bytes: u64,
    /// The most entries the store takes, when it has a limit.
    pub max_entries: Option<u64>,
    /// The most record bytes the store takes new keys up to, when it has a
    /// limit.
    pub max_bytes: Option<u64>,
}
