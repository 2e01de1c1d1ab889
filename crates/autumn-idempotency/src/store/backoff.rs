//! How long a waiting duplicate pauses between two claims on a store that
//! does not announce a lock's release.

use std::time::Duration;

/// The first pause of a waiting duplicate.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between two claims of a waiting duplicate: it bounds
/// how late a waiter learns of a release the store does not announce.
const LONGEST_PAUSE: Duration = Duration::from_millis(250);

/// The pause before claim number `attempt + 1` of a waiting duplicate:
/// 10 ms, doubling each time, at most 250 ms. A waiter for a run that takes
/// `t` makes about `log2(t / 10 ms) + t / 250 ms` claims: 4 for a 100 ms
/// run, 8 for one second, 24 for five.
///
/// ```
/// use std::time::Duration;
/// use autumn_idempotency::store::backoff;
///
/// assert_eq!(backoff(0), Duration::from_millis(10));
/// assert_eq!(backoff(2), Duration::from_millis(40));
/// assert_eq!(backoff(30), Duration::from_millis(250));
/// ```
pub fn backoff(attempt: u32) -> Duration {
    FIRST_PAUSE
        .saturating_mul(1u32.checked_shl(attempt).unwrap_or(u32::MAX))
        .min(LONGEST_PAUSE)
}
