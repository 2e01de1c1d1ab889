//! Counters the actuator reports under `idempotency`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Hit, miss and conflict counters, shared by every layer of one app.
#[derive(Debug, Default)]
pub struct IdempotencyMetrics {
    hits: AtomicU64,
    misses: AtomicU64,
    conflicts: AtomicU64,
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

    /// The counters as they are now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
        }
    }
}
