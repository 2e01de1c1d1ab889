//! Fault injection: a real memory store whose chosen operations fail, to
//! prove the layer fails closed. (The shared stores' outage tests run against
//! a stopped Redis; this covers the layer's own logic.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use autumn_idempotency::{
    IdempotencyEntry, IdempotencyFuture, IdempotencyRecord, IdempotencyStore,
    MemoryIdempotencyStore, StoreError,
};

#[derive(Default)]
pub struct Faults {
    pub get: AtomicBool,
    pub set: AtomicBool,
    pub try_lock: AtomicBool,
    pub renew: AtomicBool,
    /// `try_lock` takes the lock, then answers an error (a reply lost after
    /// the store acted, as a Redis response timeout).
    pub lock_then_fail: AtomicBool,
    /// `try_lock` takes the lock, then waits at `lock_gate`.
    pub lock_then_wait: AtomicBool,
    pub lock_gate: Gate,
}

pub struct FaultyStore {
    pub inner: Arc<MemoryIdempotencyStore>,
    pub faults: Arc<Faults>,
    /// Called inside every `try_lock`, e.g. to move a clock forward.
    pub on_lock: Box<dyn Fn() + Send + Sync>,
    /// When set, every `renew_lock` waits at this gate.
    pub renew_gate: Option<Arc<Gate>>,
}

/// Where an operation stops until the test lets it go on.
#[derive(Default)]
pub struct Gate {
    /// Notified when an operation reaches the gate.
    pub entered: Notify,
    /// Lets one waiting operation through.
    pub open: Notify,
}

fn fail<'a, T: Send + 'a>(what: &'static str) -> IdempotencyFuture<'a, T> {
    Box::pin(async move { Err(StoreError::new(format!("injected {what} failure"))) })
}

impl IdempotencyStore for FaultyStore {
    fn get<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<IdempotencyEntry>> {
        if self.faults.get.load(Ordering::SeqCst) {
            return fail("get");
        }
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
        if self.faults.set.load(Ordering::SeqCst) {
            return fail("set");
        }
        self.inner.set(key, owner, record, body_hash, ttl)
    }

    fn try_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        (self.on_lock)();
        if self.faults.try_lock.load(Ordering::SeqCst) {
            return fail("try_lock");
        }
        let then_fail = self.faults.lock_then_fail.load(Ordering::SeqCst);
        let then_wait = self.faults.lock_then_wait.load(Ordering::SeqCst);
        if !(then_fail || then_wait) {
            return self.inner.try_lock(key, owner, ttl);
        }
        Box::pin(async move {
            let locked = self.inner.try_lock(key, owner, ttl).await?;
            if then_wait {
                self.faults.lock_gate.entered.notify_one();
                self.faults.lock_gate.open.notified().await;
            }
            if then_fail {
                return Err(StoreError::new("injected reply lost after try_lock"));
            }
            Ok(locked)
        })
    }

    fn unlock<'a>(&'a self, key: &'a str, owner: &'a str) -> IdempotencyFuture<'a, ()> {
        self.inner.unlock(key, owner)
    }

    fn renew_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        if self.faults.renew.load(Ordering::SeqCst) {
            return fail("renew_lock");
        }
        match &self.renew_gate {
            None => self.inner.renew_lock(key, owner, ttl),
            Some(gate) => Box::pin(async move {
                gate.entered.notify_one();
                gate.open.notified().await;
                self.inner.renew_lock(key, owner, ttl).await
            }),
        }
    }
    // `claim` and `finish` keep their provided bodies, so this store also
    // proves the trait's defaults.
}
