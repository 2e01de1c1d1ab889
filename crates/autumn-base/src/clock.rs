//! The clock that decides when locks and records expire.
//!
//! Stores read the time through [`Clock`] rather than from the system directly,
//! so tests can move time forward instead of sleeping through a TTL.
//!
//! A store shared by replicas (Redis, a database) decides expiry by its own
//! time, not by any replica's: a replica whose clock runs ahead would
//! otherwise see a live lock as expired and run its request a second time.
//! Only a clock that [overrides the store's time](Clock::overrides_store_time)
//! (a [`ManualClock`], in tests) decides there instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time, in milliseconds since the Unix epoch.
///
/// Wall-clock (not monotonic) time, because a record written by one replica is
/// read by another: both must agree on what "expired" means.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> u64;

    /// Whether a shared store (Redis, a database) decides expiry by this
    /// clock instead of by its own time. `false` unless overridden: a host's
    /// clock can run ahead of the others', and a store that followed it
    /// would end a live lock early. [`ManualClock`] says `true`, since a
    /// clock that moves only when a test moves it must drive expiry itself.
    ///
    /// ```
    /// use autumn_base::clock::{Clock, ManualClock, SystemClock};
    ///
    /// assert!(!SystemClock.overrides_store_time());
    /// assert!(ManualClock::new().overrides_store_time());
    /// ```
    fn overrides_store_time(&self) -> bool {
        false
    }
}

/// The time a shared store decides expiry by, given the `clock` it was
/// built with: `Some(now)` of a clock that
/// [overrides the store's time](Clock::overrides_store_time), `None` (the
/// store's own time) for any other.
///
/// ```
/// use autumn_base::clock::{ManualClock, SystemClock, store_time_override};
///
/// assert_eq!(store_time_override(&SystemClock), None);
/// let clock = ManualClock::starting_at(1_000);
/// assert_eq!(store_time_override(&clock), Some(1_000));
/// ```
pub fn store_time_override(clock: &dyn Clock) -> Option<u64> {
    clock.overrides_store_time().then(|| clock.now_millis())
}

/// The system's wall clock; the default everywhere outside tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that only moves when told to: tests use it to expire locks and
/// records without sleeping.
///
/// Clones share the same time. Shared stores built with it decide expiry by
/// it rather than by their own time (see [`Clock::overrides_store_time`]).
///
/// ```
/// use std::time::Duration;
/// use autumn_base::clock::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let before = clock.now_millis();
/// clock.advance(Duration::from_secs(61));
/// assert_eq!(clock.now_millis() - before, 61_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    millis: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that starts at the current system time.
    pub fn new() -> Self {
        Self::starting_at(SystemClock.now_millis())
    }

    /// A clock that starts at `millis` since the Unix epoch.
    pub fn starting_at(millis: u64) -> Self {
        Self {
            millis: Arc::new(AtomicU64::new(millis)),
        }
    }

    /// Moves time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.millis.fetch_add(by, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.millis.load(Ordering::SeqCst)
    }

    fn overrides_store_time(&self) -> bool {
        true
    }
}

/// A shared, type-erased clock.
pub type SharedClock = Arc<dyn Clock>;

/// `now + ttl` in milliseconds, saturating instead of overflowing.
///
/// ```
/// use std::time::Duration;
/// use autumn_base::clock::deadline;
///
/// assert_eq!(deadline(1_000, Duration::from_secs(2)), 3_000);
/// assert_eq!(deadline(u64::MAX, Duration::from_secs(1)), u64::MAX);
/// ```
pub fn deadline(now: u64, ttl: Duration) -> u64 {
    now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
}
