//! Claiming a key, and waiting while another request holds it: the one
//! in-flight wait both guards use (`in_flight_wait` on a submit token,
//! `in_flight_wait_ms` on an idempotency key).
//!
//! A duplicate that finds the key locked asks the store to wait for the
//! lock's release ([`IdempotencyStore::wait_for_release`]) and claims
//! again, until it gets the record (a replay), the lock (the first run
//! failed and released it, so this one runs), or its wait runs out (409).
//! How long each wait lasts is the store's business: the memory store wakes
//! its waiters when a lock goes, shared stores back off exponentially (see
//! [`backoff`](crate::store::backoff)), so a waiter costs a handful of claims, not a poll every few
//! milliseconds.

use std::sync::Arc;
use std::time::Duration;

use crate::detach::PendingClaim;
use crate::store::{Claim, IdempotencyStore, StoreError, backoff};
use autumn_base::clock::{SharedClock, deadline};

/// How a key's claim came out after any wait.
pub(crate) struct Claimed {
    pub(crate) claim: Claim,
    /// When (app clock, ms) the claim that decided it was sent: the lock's
    /// age counts from there.
    pub(crate) sent_at: u64,
    /// Whether the request waited for another one first.
    pub(crate) waited: bool,
}

/// Claims `storage_key` for `owner`; while another request holds it, waits
/// up to `wait` (on `clock`) for it to finish. `Claim::InFlight` comes back
/// only once the wait is over (at once when `wait` is zero).
///
/// A claim that fails, or whose future is dropped mid-way, releases the lock
/// it may have taken (see [`PendingClaim`]).
pub(crate) async fn claim_or_wait(
    store: &Arc<dyn IdempotencyStore>,
    storage_key: &str,
    owner: &str,
    in_flight_ttl: Duration,
    clock: &SharedClock,
    wait: Duration,
) -> Result<Claimed, StoreError> {
    let until = deadline(clock.now_millis(), wait);
    let mut attempt = 0u32;
    loop {
        let sent_at = clock.now_millis();
        let pending = PendingClaim::new(store, storage_key, owner);
        let claim = store.claim(storage_key, owner, in_flight_ttl).await;
        let claim = match claim {
            Ok(claim) => {
                pending.settled();
                claim
            }
            Err(error) => {
                drop(pending);
                return Err(error);
            }
        };
        let now = clock.now_millis();
        if !matches!(claim, Claim::InFlight) || now >= until {
            return Ok(Claimed {
                claim,
                sent_at,
                waited: attempt > 0,
            });
        }
        if attempt == 0 {
            tracing::debug!(
                idempotency.waiting = true,
                "a duplicate waits for the request holding its key to finish"
            );
        }
        let left = Duration::from_millis(until - now);
        if let Err(error) = store.wait_for_release(storage_key, attempt, left).await {
            // Not knowing when to look again is no reason to look at once.
            tracing::debug!(%error, "waiting for a release failed; backing off instead");
            tokio::time::sleep(backoff(attempt).min(left)).await;
        }
        attempt = attempt.saturating_add(1);
    }
}
