//! The storage contract every backend implements, and the in-memory store.
//!
//! A store keeps, per storage key, at most one lock (held by an owner until it
//! expires or is released) and at most one record. The five required methods
//! are the whole contract; [`IdempotencyStore::claim`] and
//! [`IdempotencyStore::finish`] are provided on top of them so that a backend
//! which can do better (one round trip instead of two) overrides them.

mod backoff;
mod key_state;
mod memory;
#[cfg(feature = "redis")]
mod redis_store;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Deprecated: moved to `autumn_base::redis`.
#[cfg(feature = "redis")]
#[deprecated(note = "moved to autumn_base::redis")]
#[doc(no_inline)]
pub use autumn_base::redis::{RedisConnection, RedisLink};
pub use backoff::backoff;
pub use memory::MemoryIdempotencyStore;
#[cfg(feature = "redis")]
pub use redis_store::RedisIdempotencyStore;

use crate::metrics::StoreSize;
use crate::record::{IdempotencyEntry, IdempotencyRecord};
pub use key_state::KeyState;

/// The boxed future every store method returns.
pub type IdempotencyFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A backend that keeps idempotency locks and records.
///
/// Implementations must be safe to call concurrently from many requests (and,
/// for shared backends, from many processes), must not block the runtime
/// thread, and should return backend failures as [`StoreError`]s: the
/// middleware fails closed on them (503 for `get`/`set`, 409 for
/// `try_lock`/`renew_lock`), so a broken store never runs a handler twice.
pub trait IdempotencyStore: Send + Sync + 'static {
    /// The lock and record under `key`, if either is live.
    fn get<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<IdempotencyEntry>>;

    /// Records `record` (with the request fingerprint `body_hash`) under `key`
    /// for `ttl`. The parameter keeps the name the store contract was
    /// published with; it is the fingerprint of the whole request, not only
    /// its body. Writes nothing while another owner holds a live lock on
    /// `key`, or has stored an unexpired response for it. `true` = stored.
    fn set<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        body_hash: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool>;

    /// Takes the lock on `key` for `owner` for `ttl`, unless a live lock or a
    /// live record exists. `true` = lock acquired by `owner`.
    fn try_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool>;

    /// Releases the lock on `key`, only when `owner` holds it.
    fn unlock<'a>(&'a self, key: &'a str, owner: &'a str) -> IdempotencyFuture<'a, ()>;

    /// Runs `owner`'s lock for `ttl` from now, only while `owner` holds it.
    /// `true` = renewed. Optional: the default renews nothing, so a request
    /// that needs a renewal gets 409 rather than running on a lapsed lock.
    fn renew_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        let _ = (key, owner, ttl);
        Box::pin(async { Ok(false) })
    }

    /// Looks `key` up and, when nothing is there, locks it for `owner`: the
    /// first step of every request that carries a key.
    ///
    /// The default calls [`get`](Self::get) then [`try_lock`](Self::try_lock)
    /// (two round trips); shared backends override it with one.
    fn claim<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        in_flight_ttl: Duration,
    ) -> IdempotencyFuture<'a, Claim> {
        Box::pin(async move {
            let entry = self
                .get(key)
                .await
                .map_err(|e| e.during(StoreOperation::Get))?;
            if let Some(entry) = entry {
                return Ok(Claim::from_entry(entry));
            }
            let locked = self
                .try_lock(key, owner, in_flight_ttl)
                .await
                .map_err(|e| e.during(StoreOperation::TryLock))?;
            Ok(if locked {
                Claim::Acquired
            } else {
                // Someone took it between our two calls: they are in flight.
                Claim::InFlight
            })
        })
    }

    /// Records the response and releases `owner`'s lock: the last step of a
    /// first-time request. `true` = recorded.
    ///
    /// The default calls [`set`](Self::set) then [`unlock`](Self::unlock);
    /// shared backends override it with one round trip. When the record could
    /// not be written the lock is kept, so a retry gets 409 until the lock's
    /// TTL runs out rather than a second run of the handler right away.
    fn finish<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        Box::pin(async move {
            let stored = self
                .set(key, owner, record, fingerprint, ttl)
                .await
                .map_err(|e| e.during(StoreOperation::Set))?;
            if stored {
                self.unlock(key, owner)
                    .await
                    .map_err(|e| e.during(StoreOperation::Unlock))?;
            }
            Ok(stored)
        })
    }

    /// Waits until the lock on `key` may have been released, at most
    /// `limit`: a duplicate that found the key in flight calls this between
    /// two claims while it waits for the first run's outcome. `attempt`
    /// counts the waits so far (0 the first time).
    ///
    /// Returning early is always safe (the caller claims again); returning
    /// late only delays the duplicate. The default sleeps
    /// [`backoff(attempt)`](backoff) (10 ms doubling to 250 ms), so a waiter
    /// costs a few claims instead of a steady poll; the memory store wakes its
    /// waiters as soon as a lock goes. A store that can be told of a release
    /// (a notification) may override it.
    fn wait_for_release<'a>(
        &'a self,
        key: &'a str,
        attempt: u32,
        limit: Duration,
    ) -> IdempotencyFuture<'a, ()> {
        let _ = key;
        Box::pin(async move {
            tokio::time::sleep(backoff(attempt).min(limit)).await;
            Ok(())
        })
    }

    /// What is held under `key`, for an operator: the lock's and the
    /// record's deadlines where the store keeps them. `None` when nothing
    /// live is there. The default reads [`get`](Self::get), which knows no
    /// deadlines.
    fn inspect<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<KeyState>> {
        Box::pin(async move {
            let Some(entry) = self.get(key).await? else {
                return Ok(None);
            };
            let mut state = KeyState::default();
            if entry.is_locked() {
                state = state.locked_until(None);
            }
            if let Some((record, _)) = entry.into_record() {
                state = state.recorded(record, None);
            }
            Ok(Some(state))
        })
    }

    /// Removes the record and the lock under `key`, whoever holds them: an
    /// operator's tool for a stuck lock or a record that must not be
    /// replayed. `true` when something was there. The default refuses: a
    /// store must say how it removes a key.
    fn evict<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, bool> {
        let _ = key;
        Box::pin(async {
            Err(StoreError::new(
                "this idempotency store does not implement evict",
            ))
        })
    }

    /// How much the store holds, for `/actuator/metrics`; `None` (the
    /// default) when the backend keeps its own accounts, as Redis and
    /// databases do.
    fn size(&self) -> Option<StoreSize> {
        None
    }

    /// The store as [`Any`](std::any::Any), for code that works with one
    /// backend in particular and finds it by its type: `IdempotencyTx`
    /// writes its record in the app's transaction only when this is a
    /// `DbIdempotencyStore`. `None` (the default), so a store wrapping
    /// another is not mistaken for it.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// What [`IdempotencyStore::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// Nothing was there; the caller now holds the lock.
    Acquired,
    /// Another request holds the lock.
    InFlight,
    /// A final record, with the fingerprint of the request that made it.
    Completed {
        /// The recorded response.
        record: IdempotencyRecord,
        /// The fingerprint of the request that produced it (formerly
        /// `body_hash`).
        fingerprint: Vec<u8>,
    },
}

impl Claim {
    /// The claim a looked-up entry amounts to (a locked entry is in flight).
    pub fn from_entry(entry: IdempotencyEntry) -> Self {
        if entry.is_locked() {
            return Self::InFlight;
        }
        match entry.into_record() {
            Some((record, fingerprint)) => Self::Completed {
                record,
                fingerprint,
            },
            None => Self::InFlight,
        }
    }
}

/// The store operation a [`StoreError`] happened in; it decides the status
/// the client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreOperation {
    /// `get`, or a `claim` that failed looking up.
    Get,
    /// `set`, or a `finish` that failed recording.
    Set,
    /// `try_lock`.
    TryLock,
    /// `unlock`.
    Unlock,
    /// `renew_lock`.
    RenewLock,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What kind of failure a [`StoreError`] is; it decides, with the
/// operation, what the client is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The backend could not answer: unreachable, timed out, or it
    /// answered something unreadable.
    Unavailable,
    /// The backend is at its configured size limit and took nothing new;
    /// nothing was written. The middleware answers 503 with `Retry-After`.
    Full,
}

/// A backend failure: the store could not answer.
#[derive(Debug, thiserror::Error)]
#[error("idempotency store {}{}: {source}", match kind { StoreErrorKind::Full => "full", _ => "failed" }, operation.map(|op| format!(" during {op:?}")).unwrap_or_default())]
pub struct StoreError {
    kind: StoreErrorKind,
    operation: Option<StoreOperation>,
    #[source]
    source: BoxError,
}

impl StoreError {
    /// Wraps a backend's error.
    pub fn new(source: impl Into<BoxError>) -> Self {
        Self {
            kind: StoreErrorKind::Unavailable,
            operation: None,
            source: source.into(),
        }
    }

    /// The store is at its size limit and refused to take a new key.
    ///
    /// ```
    /// use autumn_idempotency::{StoreError, StoreErrorKind};
    ///
    /// let error = StoreError::full("100000 entries held, the configured maximum");
    /// assert_eq!(error.kind(), StoreErrorKind::Full);
    /// ```
    pub fn full(source: impl Into<BoxError>) -> Self {
        Self {
            kind: StoreErrorKind::Full,
            operation: None,
            source: source.into(),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Tags the error with the operation it happened in, unless already tagged.
    #[must_use]
    pub fn during(mut self, operation: StoreOperation) -> Self {
        self.operation.get_or_insert(operation);
        self
    }

    /// The operation the error happened in, when known.
    pub fn operation(&self) -> Option<StoreOperation> {
        self.operation
    }
}

/// A TTL under one millisecond: stores keep time in milliseconds, so such a
/// lock or record would be expired as soon as it was written, and a duplicate
/// could run at once.
#[derive(Debug, thiserror::Error)]
#[error("a TTL of {0:?} expires at once and would let a duplicate run; use at least 1 ms")]
struct ZeroTtl(Duration);

/// The Redis connection's failures (an invalid URL, no answer to the launch
/// or health check) as a store's: the message is the connection's, under
/// the store's `idempotency store failed: ` prefix.
#[cfg(feature = "redis")]
impl From<autumn_base::redis::RedisError> for StoreError {
    fn from(error: autumn_base::redis::RedisError) -> Self {
        Self::new(error)
    }
}

/// Rejects a TTL that would expire at once; every store checks the TTL of a
/// lock or a record before writing it.
pub(crate) fn check_ttl(ttl: Duration, operation: StoreOperation) -> Result<(), StoreError> {
    if ttl < Duration::from_millis(1) {
        return Err(StoreError::new(ZeroTtl(ttl)).during(operation));
    }
    Ok(())
}
