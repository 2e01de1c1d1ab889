//! [`MemoryQuotaLedger`]: each caller's counts in this process's memory.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use autumn_base::clock::{SharedClock, SystemClock, deadline};

use super::{QuotaLedger, QuotaLimits, Taken};
use crate::store::{IdempotencyFuture, StoreError};

/// Shards: a decision locks one of them, briefly.
const SHARDS: usize = 16;

/// One caller's counts: each item's end (app clock, ms) and weight.
#[derive(Default)]
struct Usage {
    items: HashMap<Box<str>, Item>,
    bytes: u64,
}

#[derive(Clone, Copy)]
struct Item {
    until: u64,
    bytes: u64,
}

impl Usage {
    /// Forgets what ended by `now`.
    fn sweep(&mut self, now: u64) {
        let mut freed = 0;
        self.items.retain(|_, item| {
            let live = item.until > now;
            if !live {
                freed += item.bytes;
            }
            live
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }

    fn is_over(&self, limits: QuotaLimits) -> bool {
        self.items.len() as u64 >= limits.max_records || self.bytes >= limits.max_bytes
    }

    /// Until the oldest count ends.
    fn retry_after(&self, now: u64) -> Duration {
        let first = self.items.values().map(|item| item.until).min();
        Duration::from_millis(first.map_or(0, |until| until.saturating_sub(now)))
    }

    fn remove(&mut self, item: &str) {
        if let Some(gone) = self.items.remove(item) {
            self.bytes = self.bytes.saturating_sub(gone.bytes);
        }
    }
}

/// Each caller's counts in this process's memory: right for one process.
/// Replicas each count their own, so a caller could hold its quota once
/// per replica: give them a [`RedisQuotaLedger`](super::RedisQuotaLedger).
///
/// Bounded: at most `max_callers` callers are counted at once (callers
/// whose counts all ended are forgotten first); a new caller past that is
/// refused as by a full store (503).
pub struct MemoryQuotaLedger {
    shards: Vec<Mutex<HashMap<Box<str>, Usage>>>,
    hasher: std::collections::hash_map::RandomState,
    max_per_shard: usize,
    max_callers: usize,
    clock: SharedClock,
}

impl MemoryQuotaLedger {
    /// A ledger counting at most `max_callers` callers at once.
    pub fn new(max_callers: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            max_per_shard: max_callers.div_ceil(SHARDS).max(1),
            max_callers,
            clock: Arc::new(SystemClock),
        }
    }

    /// Decides by `clock` when counts end (a test's `ManualClock`).
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    fn shard(&self, subject: &str) -> &Mutex<HashMap<Box<str>, Usage>> {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "reduced modulo SHARDS first"
        )]
        let index = (self.hasher.hash_one(subject) % SHARDS as u64) as usize;
        &self.shards[index]
    }

    fn take_now(
        &self,
        subject: &str,
        item: &str,
        hold: Duration,
        limits: QuotaLimits,
    ) -> Result<Taken, StoreError> {
        let now = self.clock.now_millis();
        let mut shard = self
            .shard(subject)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !shard.contains_key(subject) && shard.len() >= self.max_per_shard {
            shard.retain(|_, usage| {
                usage.sweep(now);
                !usage.items.is_empty()
            });
            if shard.len() >= self.max_per_shard {
                return Err(StoreError::full(format!(
                    "the quota ledger counts {} callers already (`idempotency.quota.max_callers`)",
                    self.max_callers
                )));
            }
        }
        let usage = shard.entry(subject.into()).or_default();
        let until = deadline(now, hold);
        if let Some(counted) = usage.items.get_mut(item) {
            counted.until = counted.until.max(until);
            return Ok(Taken::Counted);
        }
        if usage.is_over(limits) {
            usage.sweep(now);
            if usage.is_over(limits) {
                return Ok(Taken::Over {
                    retry_after: usage.retry_after(now),
                });
            }
        }
        usage.items.insert(item.into(), Item { until, bytes: 0 });
        Ok(Taken::Counted)
    }

    fn settle_now(&self, subject: &str, item: &str, bytes: u64, hold: Duration) {
        let now = self.clock.now_millis();
        let mut shard = self
            .shard(subject)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Counted even when its count ended or the ledger was full: the
        // record exists now.
        let usage = shard.entry(subject.into()).or_default();
        let counted = usage.items.entry(item.into()).or_insert(Item {
            until: now,
            bytes: 0,
        });
        let before = counted.bytes;
        *counted = Item {
            until: deadline(now, hold),
            bytes,
        };
        usage.bytes = usage.bytes.saturating_sub(before).saturating_add(bytes);
    }

    fn give_back_now(&self, subject: &str, item: &str) {
        let mut shard = self
            .shard(subject)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(usage) = shard.get_mut(subject) {
            usage.remove(item);
            if usage.items.is_empty() {
                shard.remove(subject);
            }
        }
    }
}

impl std::fmt::Debug for MemoryQuotaLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryQuotaLedger")
            .field("max_callers", &self.max_callers)
            .finish_non_exhaustive()
    }
}

impl QuotaLedger for MemoryQuotaLedger {
    fn take<'a>(
        &'a self,
        subject: &'a str,
        item: &'a str,
        hold: Duration,
        limits: QuotaLimits,
    ) -> IdempotencyFuture<'a, Taken> {
        let taken = self.take_now(subject, item, hold, limits);
        Box::pin(std::future::ready(taken))
    }

    fn settle<'a>(
        &'a self,
        subject: &'a str,
        item: &'a str,
        bytes: u64,
        hold: Duration,
    ) -> IdempotencyFuture<'a, ()> {
        self.settle_now(subject, item, bytes, hold);
        Box::pin(std::future::ready(Ok(())))
    }

    fn give_back<'a>(&'a self, subject: &'a str, item: &'a str) -> IdempotencyFuture<'a, ()> {
        self.give_back_now(subject, item);
        Box::pin(std::future::ready(Ok(())))
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}
