//! The clock that decides when locks and records expire.
//!
//! Stores read the time through [`Clock`] rather than from the system directly,
//! so tests can move time forward instead of sleeping through a TTL, and so
//! every replica of an app compares expiry against the same kind of time.

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
/// Clones share the same time.
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
