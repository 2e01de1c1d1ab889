//! Two stores for the app-level tests, on autumn-idempotency's trait: one
//! that counts the calls the guards make, one that is down. (The store tests
//! in autumn-idempotency have fuller versions of both next to them; a test
//! kit cannot hold them, as it would depend on the crate under test.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use autumn_web::idempotency::{
    Claim, IdempotencyEntry, IdempotencyFuture, IdempotencyRecord, IdempotencyStore,
    MemoryIdempotencyStore, StoreError,
};

/// A memory store that counts every call made to it (waits excepted).
pub struct CountingStore {
    inner: MemoryIdempotencyStore,
    calls: AtomicUsize,
}

impl CountingStore {
    /// In front of a memory store whose records live ten minutes.
    pub fn memory() -> Self {
        Self {
            inner: MemoryIdempotencyStore::new(Duration::from_secs(600)),
            calls: AtomicUsize::new(0),
        }
    }

    /// Calls made so far, of every method.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn count(&self) -> &MemoryIdempotencyStore {
        self.calls.fetch_add(1, Ordering::SeqCst);
        &self.inner
    }
}

impl IdempotencyStore for CountingStore {
    fn get<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<IdempotencyEntry>> {
        self.count().get(key)
    }

    fn set<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        body_hash: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count().set(key, owner, record, body_hash, ttl)
    }

    fn try_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count().try_lock(key, owner, ttl)
    }

    fn unlock<'a>(&'a self, key: &'a str, owner: &'a str) -> IdempotencyFuture<'a, ()> {
        self.count().unlock(key, owner)
    }

    fn renew_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count().renew_lock(key, owner, ttl)
    }

    fn claim<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, Claim> {
        self.count().claim(key, owner, ttl)
    }

    fn finish<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count().finish(key, owner, record, fingerprint, ttl)
    }

    /// Not counted: a wait is a pause between claims.
    fn wait_for_release<'a>(
        &'a self,
        key: &'a str,
        attempt: u32,
        limit: Duration,
    ) -> IdempotencyFuture<'a, ()> {
        self.inner.wait_for_release(key, attempt, limit)
    }
}

/// A store that is down: every call fails, as a lost connection would.
pub struct DownStore;

fn down<'a, T: Send + 'a>(what: &'static str) -> IdempotencyFuture<'a, T> {
    Box::pin(async move { Err(StoreError::new(format!("injected {what} failure"))) })
}

impl IdempotencyStore for DownStore {
    fn get<'a>(&'a self, _key: &'a str) -> IdempotencyFuture<'a, Option<IdempotencyEntry>> {
        down("get")
    }

    fn set<'a>(
        &'a self,
        _key: &'a str,
        _owner: &'a str,
        _record: IdempotencyRecord,
        _body_hash: Vec<u8>,
        _ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        down("set")
    }

    fn try_lock<'a>(
        &'a self,
        _key: &'a str,
        _owner: &'a str,
        _ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        down("try_lock")
    }

    fn unlock<'a>(&'a self, _key: &'a str, _owner: &'a str) -> IdempotencyFuture<'a, ()> {
        down("unlock")
    }

    fn renew_lock<'a>(
        &'a self,
        _key: &'a str,
        _owner: &'a str,
        _ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        down("renew_lock")
    }
}
