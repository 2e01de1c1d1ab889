//! Quotas: how many live records (and submit tokens) one caller may hold,
//! and how many bytes of recorded responses, so one caller creating keys
//! as fast as it can fills its own quota, not the store everyone shares.
//!
//! Both guards count a new key (or a submitted token) against the request's
//! [`QuotaSubject`] once they hold its lock, before the handler runs: a
//! caller over its quota gets 429 (`idempotency_quota_exceeded`,
//! `submit_token_quota_exceeded`) and nothing runs. A retry that finds its
//! record is replayed before any quota is asked, so a caller over quota
//! still gets its own answers back. The recorded bytes are added once the
//! response is recorded, and a run that records nothing (a 4xx, a panic)
//! gives its count back.
//!
//! The counts live in a [`QuotaLedger`]: [`MemoryQuotaLedger`] for one
//! process, [`RedisQuotaLedger`] (feature `redis`) for replicas sharing a
//! Redis. A count lasts as long as what it counts (the lock's TTL, then the
//! record's), so nothing needs to tell the ledger when a record expires.

mod memory;
#[cfg(feature = "redis")]
mod redis_ledger;

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

pub use memory::MemoryQuotaLedger;
#[cfg(feature = "redis")]
pub use redis_ledger::RedisQuotaLedger;

use crate::store::IdempotencyFuture;

/// Who pays for the records a request makes: a digest of the caller, never
/// the caller itself (a session id in a ledger would be a usable cookie).
///
/// Request extension. Autumn's scope layer inserts one on every request a
/// guard may act on: the principal when a layer named one, else the
/// session the store knows, else the client address (an IPv6 client by its
/// /64), each with the tenant when there is one. A request without one is
/// counted against no quota.
///
/// ```
/// use autumn_idempotency::quota::QuotaSubject;
///
/// let alice = QuotaSubject::new("principal", "alice");
/// assert_eq!(alice, QuotaSubject::new("principal", "alice"));
/// assert_ne!(alice, QuotaSubject::new("session", "alice"));
/// assert!(!alice.as_str().contains("alice"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct QuotaSubject(Arc<str>);

impl QuotaSubject {
    /// The subject of a caller of `kind` (`"principal"`, `"session"`,
    /// `"address"`, ...) known as `id`.
    pub fn new(kind: &str, id: impl AsRef<[u8]>) -> Self {
        Self::of_parts(&[kind.as_bytes(), id.as_ref()])
    }

    /// The same caller within `tenant`: each tenant's records count apart.
    #[must_use]
    pub fn in_tenant(&self, tenant: impl AsRef<[u8]>) -> Self {
        Self::of_parts(&[b"tenant", tenant.as_ref(), self.0.as_bytes()])
    }

    fn of_parts(parts: &[&[u8]]) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            // Length-prefixed, so no two lists of parts hash the same.
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        Self(hex::encode(&hasher.finalize()[..16]).into())
    }

    /// The digest the ledger counts under.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for QuotaSubject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("QuotaSubject").field(&&*self.0).finish()
    }
}

/// What one caller may hold: `max_records` live records, submitted tokens
/// and in-flight keys together, and `max_bytes` of recorded responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Live records, tokens and in-flight keys.
    pub max_records: u64,
    /// Bytes of recorded responses (status, headers, body, fingerprint).
    pub max_bytes: u64,
}

/// What [`QuotaLedger::take`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Taken {
    /// Counted: the caller may go on.
    Counted,
    /// The caller holds its whole quota already; nothing was counted.
    /// `retry_after` is when its oldest count ends.
    Over {
        /// Until the caller's oldest count ends.
        retry_after: Duration,
    },
}

/// Where each caller's counts live.
///
/// Every method is one decision on one caller, safe to call concurrently
/// from many requests (and, for a shared ledger, many processes). Items are
/// storage keys: counting one twice counts it once.
pub trait QuotaLedger: Send + Sync + 'static {
    /// Counts `item` against `subject` for `hold`, unless the subject holds
    /// `limits` already.
    fn take<'a>(
        &'a self,
        subject: &'a str,
        item: &'a str,
        hold: Duration,
        limits: QuotaLimits,
    ) -> IdempotencyFuture<'a, Taken>;

    /// `item`'s record was written: it weighs `bytes` and is counted for
    /// `hold` (the record's TTL) from now.
    fn settle<'a>(
        &'a self,
        subject: &'a str,
        item: &'a str,
        bytes: u64,
        hold: Duration,
    ) -> IdempotencyFuture<'a, ()>;

    /// Nothing was recorded under `item`: it no longer counts.
    fn give_back<'a>(&'a self, subject: &'a str, item: &'a str) -> IdempotencyFuture<'a, ()>;

    /// `"memory"` or `"redis"`, for the startup report.
    fn backend(&self) -> &'static str;
}

/// A ledger and the limits it holds callers to: what a guard is given with
/// `with_quota`.
///
/// ```
/// use std::sync::Arc;
/// use autumn_idempotency::quota::{MemoryQuotaLedger, Quota, QuotaLimits};
///
/// let quota = Quota::new(
///     Arc::new(MemoryQuotaLedger::new(100_000)),
///     QuotaLimits { max_records: 1_000, max_bytes: 16 << 20 },
/// );
/// assert_eq!(quota.limits().max_records, 1_000);
/// ```
#[derive(Clone)]
pub struct Quota {
    ledger: Arc<dyn QuotaLedger>,
    limits: QuotaLimits,
}

impl Quota {
    /// `limits` per caller, counted in `ledger`.
    pub fn new(ledger: Arc<dyn QuotaLedger>, limits: QuotaLimits) -> Self {
        Self { ledger, limits }
    }

    /// The limits each caller is held to.
    pub fn limits(&self) -> QuotaLimits {
        self.limits
    }

    /// The ledger the counts live in.
    pub fn ledger(&self) -> &Arc<dyn QuotaLedger> {
        &self.ledger
    }
}

impl std::fmt::Debug for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quota")
            .field("backend", &self.ledger.backend())
            .field("limits", &self.limits)
            .finish()
    }
}

/// A count a running request holds: settled with its record's size once
/// recorded, given back when nothing is.
pub(crate) struct Charge {
    pub(crate) ledger: Arc<dyn QuotaLedger>,
    pub(crate) subject: QuotaSubject,
}

impl Charge {
    /// Counts `bytes` for `ttl`; a failure leaves the count as taken (it
    /// ends with the lock's TTL), which undercounts the caller's bytes.
    pub(crate) async fn settle(&self, item: &str, bytes: u64, ttl: Duration) {
        if let Err(error) = self
            .ledger
            .settle(self.subject.as_str(), item, bytes, ttl)
            .await
        {
            tracing::debug!(%error, "could not count a record's bytes against its caller's quota");
        }
    }

    /// Gives the count back; a failure leaves it to end with the lock's TTL.
    pub(crate) async fn give_back(&self, item: &str) {
        if let Err(error) = self.ledger.give_back(self.subject.as_str(), item).await {
            tracing::debug!(%error, "could not give back a quota count; it ends with the lock's TTL");
        }
    }
}

/// Why a claimed key was not charged; its lock is released already, and
/// the refusal counted.
pub(crate) enum Refused {
    /// The caller is over its quota; room comes back in this many seconds.
    Over(u32),
    /// The ledger could not be asked.
    Failed(crate::StoreError),
}

/// A key a guard just claimed, to count against its caller's quota.
pub(crate) struct NewKey<'a> {
    pub(crate) quota: Option<&'a Quota>,
    pub(crate) extensions: &'a http::Extensions,
    pub(crate) store: &'a Arc<dyn crate::IdempotencyStore>,
    pub(crate) storage_key: &'a str,
    /// Who holds its lock.
    pub(crate) owner: &'a str,
    pub(crate) in_flight_ttl: Duration,
    /// `idempotency` or `submit_token`, for the metrics and the log.
    pub(crate) layer: &'static str,
}

/// Counts the key a request just claimed against the request's subject
/// (in its extensions) for the lock's TTL. `None`: no quota, or no
/// subject. Refused, the refusal is counted in `metrics` (at `now_millis`)
/// and the lock released before this returns; dropped meanwhile (the client
/// went away), the lock is released on its own task.
pub(crate) async fn charge_claimed(
    new_key: NewKey<'_>,
    metrics: &crate::IdempotencyMetrics,
    now_millis: u64,
) -> Result<Option<Charge>, Refused> {
    let (Some(quota), Some(subject)) = (new_key.quota, new_key.extensions.get::<QuotaSubject>())
    else {
        return Ok(None);
    };
    let (store, key, owner) = (new_key.store, new_key.storage_key, new_key.owner);
    let pending = crate::detach::PendingClaim::new(store, key, owner);
    let taken = quota
        .ledger
        .take(subject.as_str(), key, new_key.in_flight_ttl, quota.limits)
        .await;
    pending.settled();
    let refused = match taken {
        Ok(Taken::Counted) => {
            return Ok(Some(Charge {
                ledger: Arc::clone(&quota.ledger),
                subject: subject.clone(),
            }));
        }
        Ok(Taken::Over { retry_after }) => {
            metrics.quota_refused(now_millis, new_key.layer);
            Refused::Over(retry_after_secs(retry_after))
        }
        Err(error) => {
            metrics.store_failed(now_millis, new_key.layer, &error);
            Refused::Failed(error)
        }
    };
    if let Err(error) = store.unlock(key, owner).await {
        tracing::warn!(%error, "could not release a key refused by its caller's quota; it lapses after its in-flight TTL");
    }
    Err(refused)
}

/// Whole seconds for `Retry-After`, at least one.
fn retry_after_secs(wait: Duration) -> u32 {
    u32::try_from(wait.as_millis().div_ceil(1000))
        .unwrap_or(u32::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_in_a_tenant_is_another_subject() {
        let alice = QuotaSubject::new("principal", "alice");
        assert_ne!(alice.in_tenant("acme"), alice);
        assert_ne!(alice.in_tenant("acme"), alice.in_tenant("globex"));
        assert_eq!(alice.in_tenant("acme"), alice.in_tenant("acme"));
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(90)), 90);
    }
}
