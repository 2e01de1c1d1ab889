//! A store that counts every call the layers make to it, in front of a real
//! one: the one wrapper for tests that hold a layer to a number of store
//! round trips.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use autumn_idempotency::{
    Claim, IdempotencyEntry, IdempotencyFuture, IdempotencyRecord, IdempotencyStore,
    MemoryIdempotencyStore, StoreSize,
};

/// Forwards every method to `inner`, counting each call.
pub struct CountingStore<S = MemoryIdempotencyStore> {
    inner: S,
    calls: AtomicUsize,
}

impl CountingStore {
    /// In front of a memory store whose records live ten minutes.
    pub fn memory() -> Self {
        Self::new(MemoryIdempotencyStore::new(Duration::from_secs(600)))
    }
}

impl<S> CountingStore<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            calls: AtomicUsize::new(0),
        }
    }

    /// Calls made so far, of every method.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

impl<S: IdempotencyStore> IdempotencyStore for CountingStore<S> {
    fn get<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<IdempotencyEntry>> {
        self.count();
        self.inner.get(key)
    }

    fn set<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        body_hash: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count();
        self.inner.set(key, owner, record, body_hash, ttl)
    }

    fn try_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count();
        self.inner.try_lock(key, owner, ttl)
    }

    fn unlock<'a>(&'a self, key: &'a str, owner: &'a str) -> IdempotencyFuture<'a, ()> {
        self.count();
        self.inner.unlock(key, owner)
    }

    fn renew_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count();
        self.inner.renew_lock(key, owner, ttl)
    }

    fn claim<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, Claim> {
        self.count();
        self.inner.claim(key, owner, ttl)
    }

    fn finish<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count();
        self.inner.finish(key, owner, record, fingerprint, ttl)
    }

    /// Not counted: a wait is a pause between claims (the memory store's
    /// wakes on a release, the default sleeps), not a call to the backend.
    fn wait_for_release<'a>(
        &'a self,
        key: &'a str,
        attempt: u32,
        limit: Duration,
    ) -> IdempotencyFuture<'a, ()> {
        self.inner.wait_for_release(key, attempt, limit)
    }

    fn inspect<'a>(
        &'a self,
        key: &'a str,
    ) -> IdempotencyFuture<'a, Option<autumn_idempotency::store::KeyState>> {
        self.count();
        self.inner.inspect(key)
    }

    fn evict<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, bool> {
        self.count();
        self.inner.evict(key)
    }

    /// Not a round trip: metrics read it, not the layers.
    fn size(&self) -> Option<StoreSize> {
        self.inner.size()
    }
}
