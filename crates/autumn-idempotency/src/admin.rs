//! Key administration: what an operator sees of one storage key, and
//! removing a record or a stuck lock, on any store.
//!
//! Both the actuator's `/actuator/idempotency/{storage_key}` and the
//! `idempotency inspect|evict` command of an app's binary go through here,
//! so they answer alike and every eviction leaves the same audit line.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use autumn_idempotency::admin::{self, KeyLookup};
//! use autumn_idempotency::{IdempotencyStore, MemoryIdempotencyStore};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store: Arc<dyn IdempotencyStore> =
//!     Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(60)));
//! let storage_key = KeyLookup::new("POST", "/orders", "order-1").storage_key();
//! let report = admin::inspect(&*store, &storage_key, false).await?;
//! assert_eq!(report.state, admin::State::Absent);
//! assert!(!admin::evict(&*store, &storage_key, "ops@example.com").await?);
//! # Ok::<_, autumn_idempotency::StoreError>(())
//! # }).unwrap();
//! ```

use serde::Serialize;

use crate::IdempotencyScope;
use crate::key::{LogDigest, storage_key};
use crate::record::IdempotencyRecord;
use crate::store::{IdempotencyStore, StoreError};
use autumn_base::clock::{Clock as _, SystemClock};

pub use crate::store::KeyState;

/// The state of a key, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum State {
    /// Nothing live: a request with this key would run.
    Absent,
    /// A request holds the lock; nothing recorded yet.
    Locked,
    /// A response is recorded and replayed (or, with
    /// [`KeyReport::not_recorded`], the request ran but its response was not
    /// kept: a retry gets 409).
    Recorded,
    /// Both: a record and a lock (a run re-took the key, or a record
    /// written in a handler's transaction while its run goes on).
    LockedAndRecorded,
}

/// What [`inspect`] reports: never the response body unless asked for.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct KeyReport {
    /// The storage key looked up.
    pub storage_key: String,
    /// Absent, locked, recorded, or both.
    pub state: State,
    /// When the lock expires (the store's clock, ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_expires_at: Option<u64>,
    /// When the lock was taken (the store's clock, ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_taken_at: Option<u64>,
    /// How long the lock's owner has held it, in ms: the store's clock at
    /// the look-up minus [`lock_taken_at`](Self::lock_taken_at). A lock
    /// whose owner age keeps growing past the route's usual run time, while
    /// its expiry keeps moving (renewals), belongs to a run that is stuck
    /// but alive; one whose expiry stays put belongs to a run that stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_age_ms: Option<u64>,
    /// The recorded response's status code (with
    /// [`not_recorded`](Self::not_recorded), the status of the response
    /// that was not kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Whether the record is a marker: the request ran, but its response was
    /// too large to keep, so a retry is answered 409 rather than replayed or
    /// run again. A marker has no body.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub not_recorded: bool,
    /// When the record expires (the store's clock, ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_expires_at: Option<u64>,
    /// The recorded body's length in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_bytes: Option<usize>,
    /// Whether the recorded body is sealed (`[security]
    /// encrypt_recorded_bodies`): then it is never shown.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub body_sealed: bool,
    /// The recorded body, as text (lossy), only when asked for and not
    /// sealed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// Looks `storage_key` up; `with_body` adds the recorded body.
///
/// # Errors
///
/// The store's, when it cannot be asked.
pub async fn inspect(
    store: &dyn IdempotencyStore,
    storage_key: &str,
    with_body: bool,
) -> Result<KeyReport, StoreError> {
    let found = store.inspect(storage_key).await?.unwrap_or_default();
    let state = match (found.locked, found.record.is_some()) {
        (false, false) => State::Absent,
        (true, false) => State::Locked,
        (false, true) => State::Recorded,
        (true, true) => State::LockedAndRecorded,
    };
    let record = found.record.as_ref();
    Ok(KeyReport {
        storage_key: storage_key.to_owned(),
        state,
        lock_expires_at: found.lock_expires_at,
        lock_taken_at: found.lock_taken_at,
        owner_age_ms: found.lock_taken_at.map(|taken| {
            // On the store's clock when it says when it looked.
            let now = found
                .observed_at
                .unwrap_or_else(|| SystemClock.now_millis());
            now.saturating_sub(taken)
        }),
        status: record.map(|r| r.status().as_u16()),
        not_recorded: record.is_some_and(IdempotencyRecord::is_not_recorded),
        record_expires_at: found.record_expires_at,
        // A marker kept no body: nothing to count or show.
        body_bytes: record
            .filter(|r| !r.is_not_recorded())
            .map(|r| r.body().len()),
        body_sealed: record.is_some_and(IdempotencyRecord::body_sealed),
        body: record
            .filter(|r| with_body && !r.body_sealed() && !r.is_not_recorded())
            .map(|r| String::from_utf8_lossy(r.body()).into_owned()),
    })
}

/// Removes the record and the lock under `storage_key`, logging who asked
/// (`by`) on the `autumn::audit` target. `true` when something was there.
///
/// A request still running under an evicted lock goes on; its record is
/// then written (its owner no longer holds the lock, so nothing is) or not,
/// and a retry meanwhile runs the handler again: evict a lock only when its
/// run is known to be gone.
///
/// # Errors
///
/// The store's, when it cannot be asked or cannot evict.
pub async fn evict(
    store: &dyn IdempotencyStore,
    storage_key: &str,
    by: &str,
) -> Result<bool, StoreError> {
    let evicted = store.evict(storage_key).await;
    match &evicted {
        Ok(removed) => tracing::warn!(
            target: "autumn::audit",
            evicted = *removed,
            by = %by,
            storage_key_hash = %LogDigest(storage_key.as_bytes()),
            "idempotency key evicted by an operator"
        ),
        Err(error) => tracing::warn!(
            target: "autumn::audit",
            error = %error,
            by = %by,
            storage_key_hash = %LogDigest(storage_key.as_bytes()),
            "eviction of an idempotency key failed"
        ),
    }
    evicted
}

/// The parts of a request an operator knows, to find its storage key:
/// method, path and query, the `Idempotency-Key`, and the caller's scope.
#[derive(Debug, Clone)]
pub struct KeyLookup {
    method: String,
    path: String,
    key: String,
    scope: IdempotencyScope,
}

impl KeyLookup {
    /// The request `method path` sent with `Idempotency-Key: key`, by a
    /// caller with no scope (no session, tenant or credential).
    pub fn new(method: &str, path: &str, key: &str) -> Self {
        Self {
            method: method.to_ascii_uppercase(),
            path: path.to_owned(),
            key: key.to_owned(),
            scope: IdempotencyScope::default(),
        }
    }

    /// Adds a part of the caller's scope, as the app's layers name them
    /// (`tenant`, `principal`, `session`, `authorization`).
    #[must_use]
    pub fn with_scope(mut self, part: &str, value: &str) -> Self {
        self.scope = self.scope.with_part(part, value.as_bytes());
        self
    }

    /// The storage key the idempotency layer keeps this request under.
    pub fn storage_key(&self) -> String {
        storage_key(&self.method, &self.path, self.scope.as_bytes(), &self.key)
    }
}
