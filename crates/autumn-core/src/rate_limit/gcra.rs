//! The decision: GCRA, the generic cell rate algorithm (the one `governor`
//! implements), on one number per bucket, the theoretical arrival time
//! (TAT). Written once here for the memory store; the Redis script does the
//! same arithmetic on the server.

/// A rule's rate, in the units the stores work in (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate {
    /// The time one request uses up: the window divided by the limit.
    pub(crate) interval_ms: u64,
    /// How far ahead of now the TAT may run: `(burst - 1)` intervals, so
    /// `burst` requests may come at once.
    pub(crate) tolerance_ms: u64,
    /// Requests per window, for the headers.
    pub(crate) limit: u32,
    /// The window, in seconds, for the headers.
    pub(crate) window_secs: u64,
    /// Requests that may come at once.
    pub(crate) burst: u32,
}

impl Rate {
    /// `limit` requests per `window_secs`, `burst` of them at once.
    pub(crate) fn new(limit: u32, window_secs: u64, burst: u32) -> Self {
        let limit = limit.max(1);
        let burst = burst.max(1);
        // At least a millisecond a request: a rate faster than that is no
        // limit anyone needs.
        let interval_ms = (window_secs.saturating_mul(1000) / u64::from(limit)).max(1);
        Self {
            interval_ms,
            tolerance_ms: interval_ms.saturating_mul(u64::from(burst - 1)),
            limit,
            window_secs,
            burst,
        }
    }
}

/// What a store decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Whether the request may go on.
    pub(crate) allowed: bool,
    /// Requests that may still come at once after this one.
    pub(crate) remaining: u32,
    /// Milliseconds until the next request would be allowed (0 when one
    /// would be now).
    pub(crate) retry_after_ms: u64,
    /// Milliseconds until the bucket is full again.
    pub(crate) reset_ms: u64,
}

/// Decides one request at `now` for a bucket whose TAT is `tat` (none for
/// a bucket never used or expired). Returns the decision and the TAT to
/// keep (unchanged when refused: a refused request uses nothing up).
pub(crate) fn decide(rate: Rate, tat: Option<u64>, now: u64) -> (Decision, u64) {
    let tat = tat.unwrap_or(now).max(now);
    let ahead = tat - now;
    if ahead > rate.tolerance_ms {
        let decision = Decision {
            allowed: false,
            remaining: 0,
            retry_after_ms: ahead - rate.tolerance_ms,
            reset_ms: ahead,
        };
        return (decision, tat);
    }
    let new_tat = tat + rate.interval_ms;
    let used = new_tat - now;
    let capacity = rate.tolerance_ms + rate.interval_ms;
    let decision = Decision {
        allowed: true,
        remaining: u32::try_from((capacity - used) / rate.interval_ms).unwrap_or(u32::MAX),
        retry_after_ms: used.saturating_sub(capacity),
        reset_ms: used,
    };
    (decision, new_tat)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `count` requests at `now` on one bucket; the allowed count.
    fn burst(rate: Rate, tat: &mut Option<u64>, now: u64, count: u32) -> u32 {
        let mut allowed = 0;
        for _ in 0..count {
            let (decision, next) = decide(rate, *tat, now);
            *tat = Some(next);
            allowed += u32::from(decision.allowed);
        }
        allowed
    }

    #[test]
    fn a_full_bucket_lets_the_burst_through_then_refuses() {
        let rate = Rate::new(5, 60, 5);
        let mut tat = None;
        assert_eq!(burst(rate, &mut tat, 1_000, 8), 5);
        let (refused, _) = decide(rate, tat, 1_000);
        assert!(!refused.allowed);
        // One request's interval: 12 s.
        assert_eq!(refused.retry_after_ms, 12_000);
        assert_eq!(refused.reset_ms, 60_000);
    }

    #[test]
    fn the_bucket_refills_one_request_per_interval() {
        let rate = Rate::new(5, 60, 5);
        let mut tat = None;
        burst(rate, &mut tat, 0, 5);
        assert_eq!(burst(rate, &mut tat, 11_999, 1), 0);
        assert_eq!(burst(rate, &mut tat, 12_000, 2), 1);
        // A window later, the whole burst again.
        assert_eq!(burst(rate, &mut tat, 72_000, 9), 5);
    }

    #[test]
    fn remaining_counts_down_and_a_refusal_uses_nothing() {
        let rate = Rate::new(3, 3, 3);
        let (first, tat) = decide(rate, None, 0);
        assert_eq!(
            (first.allowed, first.remaining, first.reset_ms),
            (true, 2, 1_000)
        );
        let (second, tat) = decide(rate, Some(tat), 0);
        assert_eq!(second.remaining, 1);
        let (third, tat) = decide(rate, Some(tat), 0);
        assert_eq!(third.remaining, 0);
        let (refused, kept) = decide(rate, Some(tat), 0);
        assert!(!refused.allowed);
        assert_eq!(kept, tat);
    }

    #[test]
    fn a_burst_of_one_spaces_requests_evenly() {
        let rate = Rate::new(10, 1, 1);
        let mut tat = None;
        assert_eq!(burst(rate, &mut tat, 0, 3), 1);
        assert_eq!(burst(rate, &mut tat, 99, 1), 0);
        assert_eq!(burst(rate, &mut tat, 100, 1), 1);
    }

    #[test]
    fn a_stale_tat_counts_as_a_full_bucket() {
        let rate = Rate::new(2, 10, 2);
        let (decision, _) = decide(rate, Some(5), 1_000_000);
        assert_eq!((decision.allowed, decision.remaining), (true, 1));
    }
}
