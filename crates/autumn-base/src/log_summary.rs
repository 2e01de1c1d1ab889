//! [`LogSummary`]: one warning per interval for what can happen on every
//! request under attack (a refusal, a store that is full or down), with a
//! count per reason, so that a flood of requests never becomes a flood of
//! log lines.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Events counted per reason and logged together, at most once per
/// interval: the first event after a quiet interval at once, the rest with
/// the next event after the interval has passed.
///
/// ```
/// use std::time::Duration;
/// use autumn_base::log_summary::LogSummary;
///
/// let failures = LogSummary::new("idempotency store failed; not running the handler", Duration::from_secs(10));
/// // Logged: the first one.
/// assert_eq!(failures.note(1_000, "unreachable", &"connection refused"), Some(1));
/// // Counted, logged with the next event from 11_000 on.
/// assert_eq!(failures.note(2_000, "unreachable", &"connection refused"), None);
/// assert_eq!(failures.pending(), 1);
/// assert_eq!(failures.note(11_000, "full", &"the store is full"), Some(2));
/// ```
#[derive(Debug)]
pub struct LogSummary {
    message: &'static str,
    interval_ms: u64,
    /// Milliseconds of the last line; 0: none yet.
    logged_at: AtomicU64,
    /// Events since the last line, by reason.
    counts: Mutex<BTreeMap<String, u64>>,
}

/// Seconds between two lines of a [`LogSummary`] made by `default()`.
pub const DEFAULT_INTERVAL_SECS: u64 = 10;

impl Default for LogSummary {
    /// Guards' store failures, at most one line every
    /// [`DEFAULT_INTERVAL_SECS`].
    fn default() -> Self {
        Self::new(
            "a guard's store failed, or a caller was over its quota; the handler was not run",
            Duration::from_secs(DEFAULT_INTERVAL_SECS),
        )
    }
}

impl LogSummary {
    /// A summary logged as `message`, at most once per `interval`.
    #[must_use]
    pub fn new(message: &'static str, interval: Duration) -> Self {
        Self {
            message,
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            logged_at: AtomicU64::new(0),
            counts: Mutex::default(),
        }
    }

    /// Counts one event under `reason` at `now_millis` (the app clock's),
    /// and logs every event since the last line, at warn, when the
    /// interval has passed; `detail` (this event's error, say) goes with
    /// that line as `last`. Concurrent callers never log the same events
    /// twice. Returns how many events the line it logged counted, if it
    /// logged one.
    pub fn note(&self, now_millis: u64, reason: &str, detail: &dyn Display) -> Option<u64> {
        {
            let mut counts = self.lock();
            *counts.entry(reason.to_owned()).or_default() += 1;
        }
        let now = now_millis.max(1);
        let last = self.logged_at.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < self.interval_ms {
            return None;
        }
        if self
            .logged_at
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let counts = std::mem::take(&mut *self.lock());
        let total: u64 = counts.values().sum();
        if total == 0 {
            return None;
        }
        let by_reason = counts
            .iter()
            .map(|(reason, count)| format!("{reason}={count}"))
            .collect::<Vec<_>>()
            .join(" ");
        tracing::warn!(
            count = total,
            by_reason = %by_reason,
            last = %detail,
            interval_secs = self.interval_ms / 1000,
            "{} (one line per interval at most)",
            self.message
        );
        Some(total)
    }

    /// Events counted and not logged yet.
    pub fn pending(&self) -> u64 {
        self.lock().values().sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_one_line_per_interval_counting_every_event() {
        let summary = LogSummary::new("store failed", Duration::from_secs(10));
        let logged: Vec<(u64, Option<u64>)> = (0..1_000)
            .map(|at| (at, summary.note(1_000 + at, "full", &"the store is full")))
            .filter(|(_, logged)| logged.is_some())
            .collect();
        assert_eq!(logged, [(0, Some(1))]);
        assert_eq!(summary.note(5_000, "unreachable", &"refused"), None);
        assert_eq!(summary.pending(), 1_000);
        // Ten seconds after the last line: everything since, in one.
        assert_eq!(
            summary.note(11_000, "full", &"the store is full"),
            Some(1_001)
        );
        assert_eq!(summary.pending(), 0);
        assert_eq!(summary.note(12_000, "full", &"the store is full"), None);
    }
}
