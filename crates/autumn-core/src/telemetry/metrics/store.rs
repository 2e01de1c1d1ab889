//! [`TimedStore`]: an idempotency store with each round trip timed, by
//! operation, into the [`StoreTimings`] of the layer that uses it.
//!
//! It answers exactly as the store it wraps: every method is passed on
//! (those the trait provides too, so a backend's one-round-trip `claim`
//! stays one), and [`as_any`](IdempotencyStore::as_any) is the wrapped
//! store's, so `IdempotencyTx` still finds a database store through it. A
//! timed call costs a clock read at each end and the boxed future around
//! the store's own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use autumn_idempotency::store::KeyState;
use autumn_idempotency::{
    Claim, IdempotencyEntry, IdempotencyFuture, IdempotencyRecord, IdempotencyStore, StoreSize,
};

use super::histogram::{Histogram, HistogramSnapshot, STORE_BUCKETS};

/// The operations timed, as their `op` label. `wait_for_release` is not
/// one: it waits for another request, not for the store.
const OPS: [&str; 9] = [
    "get",
    "set",
    "try_lock",
    "unlock",
    "renew_lock",
    "claim",
    "finish",
    "inspect",
    "evict",
];

/// An operation, as an index into [`OPS`].
#[derive(Debug, Clone, Copy)]
enum Op {
    Get,
    Set,
    TryLock,
    Unlock,
    RenewLock,
    Claim,
    Finish,
    Inspect,
    Evict,
}

/// How long one layer's store took, per operation.
#[derive(Debug)]
pub(crate) struct StoreTimings {
    /// The `store` label: which layer's store (`idempotency`,
    /// `submit_token`).
    pub(crate) store: &'static str,
    /// The `backend` label: `memory`, `redis`, `database`, or `custom` for
    /// a store given in code.
    pub(crate) backend: &'static str,
    ops: [Histogram; OPS.len()],
}

impl StoreTimings {
    /// Empty timings for `store` on `backend`.
    pub(crate) fn new(store: &'static str, backend: &'static str) -> Self {
        Self {
            store,
            backend,
            ops: std::array::from_fn(|_| Histogram::new(&STORE_BUCKETS)),
        }
    }

    fn observe(&self, op: Op, elapsed: Duration) {
        if let Some(histogram) = self.ops.get(op as usize) {
            histogram.observe(elapsed);
        }
    }

    /// Each operation that ran, by its `op` label, with its durations.
    pub(crate) fn snapshot(&self) -> impl Iterator<Item = (&'static str, HistogramSnapshot)> + '_ {
        OPS.iter()
            .zip(&self.ops)
            .map(|(&op, histogram)| (op, histogram.snapshot()))
            .filter(|(_, snapshot)| snapshot.count() > 0)
    }
}

/// `inner`, each call timed into `timings`.
pub(crate) struct TimedStore {
    inner: Arc<dyn IdempotencyStore>,
    timings: Arc<StoreTimings>,
}

impl TimedStore {
    /// Times `inner`'s calls into `timings`.
    pub(crate) fn new(inner: Arc<dyn IdempotencyStore>, timings: Arc<StoreTimings>) -> Self {
        Self { inner, timings }
    }

    /// `call` on the wrapped store, timed as `op`, failures included (a
    /// store timing out is what the histogram is for).
    fn timed<'a, T: 'a>(
        &'a self,
        op: Op,
        call: impl FnOnce(&'a dyn IdempotencyStore) -> IdempotencyFuture<'a, T>,
    ) -> IdempotencyFuture<'a, T> {
        let started = Instant::now();
        let future = call(&*self.inner);
        Box::pin(async move {
            let outcome = future.await;
            self.timings.observe(op, started.elapsed());
            outcome
        })
    }
}

impl IdempotencyStore for TimedStore {
    fn get<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<IdempotencyEntry>> {
        self.timed(Op::Get, |store| store.get(key))
    }

    fn set<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        body_hash: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.timed(Op::Set, |store| {
            store.set(key, owner, record, body_hash, ttl)
        })
    }

    fn try_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.timed(Op::TryLock, |store| store.try_lock(key, owner, ttl))
    }

    fn unlock<'a>(&'a self, key: &'a str, owner: &'a str) -> IdempotencyFuture<'a, ()> {
        self.timed(Op::Unlock, |store| store.unlock(key, owner))
    }

    fn renew_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.timed(Op::RenewLock, |store| store.renew_lock(key, owner, ttl))
    }

    fn claim<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        in_flight_ttl: Duration,
    ) -> IdempotencyFuture<'a, Claim> {
        self.timed(Op::Claim, |store| store.claim(key, owner, in_flight_ttl))
    }

    fn finish<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.timed(Op::Finish, |store| {
            store.finish(key, owner, record, fingerprint, ttl)
        })
    }

    fn wait_for_release<'a>(
        &'a self,
        key: &'a str,
        attempt: u32,
        limit: Duration,
    ) -> IdempotencyFuture<'a, ()> {
        self.inner.wait_for_release(key, attempt, limit)
    }

    fn inspect<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<KeyState>> {
        self.timed(Op::Inspect, |store| store.inspect(key))
    }

    fn evict<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, bool> {
        self.timed(Op::Evict, |store| store.evict(key))
    }

    fn size(&self) -> Option<StoreSize> {
        self.inner.size()
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.inner.as_any()
    }
}

#[cfg(test)]
mod tests {
    use autumn_idempotency::MemoryIdempotencyStore;

    use super::*;

    #[tokio::test]
    async fn each_call_is_timed_under_its_operation_and_answered_as_the_store_answers() {
        let timings = Arc::new(StoreTimings::new("idempotency", "memory"));
        let store = TimedStore::new(
            Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(60))),
            Arc::clone(&timings),
        );
        let ttl = Duration::from_secs(60);
        assert_eq!(
            store.claim("k", "owner", ttl).await.ok(),
            Some(Claim::Acquired)
        );
        assert_eq!(
            store.claim("k", "other", ttl).await.ok(),
            Some(Claim::InFlight)
        );
        assert_eq!(store.unlock("k", "owner").await.ok(), Some(()));
        store.wait_for_release("k", 0, Duration::ZERO).await.ok();
        let counts: Vec<_> = timings
            .snapshot()
            .map(|(op, snapshot)| (op, snapshot.count()))
            .collect();
        // The store's own `get` and `try_lock` inside `claim` are not timed
        // again, and waiting is not a round trip.
        assert_eq!(counts, [("unlock", 1), ("claim", 2)]);
        assert!(store.size().is_some(), "the memory store's size passes");
    }
}
