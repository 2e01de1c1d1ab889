//! [`Histogram`]: durations counted into fixed buckets with one atomic
//! add each, and a running sum, as the Prometheus histogram type reports
//! them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A bucket's upper bound: in nanoseconds, and as its `le` label.
type Bound = (u64, &'static str);

/// Upper bounds of a histogram's buckets, ascending; a last bucket,
/// `+Inf`, takes everything above the highest.
#[derive(Debug)]
pub(crate) struct Buckets(&'static [Bound]);

/// Nanoseconds in a millisecond.
const MS: u64 = 1_000_000;

/// For requests: 5 ms to 10 s, the buckets Prometheus clients use by
/// default.
pub(crate) static REQUEST_BUCKETS: Buckets = Buckets(&[
    (5 * MS, "0.005"),
    (10 * MS, "0.01"),
    (25 * MS, "0.025"),
    (50 * MS, "0.05"),
    (100 * MS, "0.1"),
    (250 * MS, "0.25"),
    (500 * MS, "0.5"),
    (1_000 * MS, "1"),
    (2_500 * MS, "2.5"),
    (5_000 * MS, "5"),
    (10_000 * MS, "10"),
]);

/// For store round trips: 100 µs (a memory store, a Redis on the same
/// host) to 1 s (a store that is about to time out).
pub(crate) static STORE_BUCKETS: Buckets = Buckets(&[
    (MS / 10, "0.0001"),
    (MS / 4, "0.00025"),
    (MS / 2, "0.0005"),
    (MS, "0.001"),
    (5 * MS / 2, "0.0025"),
    (5 * MS, "0.005"),
    (10 * MS, "0.01"),
    (25 * MS, "0.025"),
    (50 * MS, "0.05"),
    (100 * MS, "0.1"),
    (250 * MS, "0.25"),
    (500 * MS, "0.5"),
    (1_000 * MS, "1"),
]);

/// Observations counted by bucket (each in the first bucket whose bound
/// is at least its value) and summed. Observing is two relaxed atomic adds,
/// no lock: readers may see an observation's bucket before its sum, which
/// a scrape tolerates.
#[derive(Debug)]
pub(crate) struct Histogram {
    buckets: &'static Buckets,
    /// One per bound, then `+Inf`; not cumulative (a snapshot adds them up).
    counts: Box<[AtomicU64]>,
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// Empty, over `buckets`.
    pub(crate) fn new(buckets: &'static Buckets) -> Self {
        Self {
            buckets,
            counts: (0..=buckets.0.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// Counts one observation of `elapsed`.
    pub(crate) fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = self.buckets.0.partition_point(|&(bound, _)| bound < nanos);
        if let Some(count) = self.counts.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The counts as they are now, cumulative as the exposition format
    /// wants them.
    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|count| {
                total += count.load(Ordering::Relaxed);
                total
            })
            .collect();
        HistogramSnapshot {
            buckets: self.buckets,
            cumulative,
            sum_nanos: self.sum_nanos.load(Ordering::Relaxed),
        }
    }
}

/// A point-in-time copy of a [`Histogram`].
#[derive(Debug)]
pub(crate) struct HistogramSnapshot {
    buckets: &'static Buckets,
    /// Observations at or below each bound, then all of them (`+Inf`).
    cumulative: Vec<u64>,
    sum_nanos: u64,
}

impl HistogramSnapshot {
    /// How many observations there were.
    pub(crate) fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    /// Their sum, in seconds.
    pub(crate) fn sum_seconds(&self) -> f64 {
        // Exact up to 2^53 ns (104 days) of summed time, close after.
        #[allow(clippy::cast_precision_loss)]
        let nanos = self.sum_nanos as f64;
        nanos / 1e9
    }

    /// Each bucket's `le` label with the observations at or below it,
    /// `+Inf` last.
    pub(crate) fn buckets(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.buckets
            .0
            .iter()
            .map(|&(_, label)| label)
            .chain(std::iter::once("+Inf"))
            .zip(self.cumulative.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn an_observation_lands_in_the_first_bucket_at_or_above_it_and_counts_in_every_later_one() {
        let histogram = Histogram::new(&REQUEST_BUCKETS);
        for elapsed in [ms(1), ms(5), ms(6), ms(700), ms(60_000)] {
            histogram.observe(elapsed);
        }
        let snapshot = histogram.snapshot();
        let buckets: Vec<_> = snapshot.buckets().collect();
        assert_eq!(buckets.len(), 12, "eleven bounds and +Inf");
        let at = |label| {
            buckets
                .iter()
                .find(|(le, _)| *le == label)
                .map(|&(_, count)| count)
        };
        // 5 ms is at or below 0.005: `le` means less than or equal.
        assert_eq!(at("0.005"), Some(2));
        assert_eq!(at("0.01"), Some(3));
        assert_eq!(at("0.5"), Some(3));
        assert_eq!(at("1"), Some(4));
        assert_eq!(at("10"), Some(4), "a minute is over the last bound");
        assert_eq!(at("+Inf"), Some(5));
        assert_eq!(snapshot.count(), 5);
        let sum = snapshot.sum_seconds();
        assert!((sum - 60.712).abs() < 1e-9, "{sum}");
        // Cumulative: never decreasing.
        assert!(buckets.windows(2).all(|pair| pair[0].1 <= pair[1].1));
    }

    #[test]
    fn an_empty_histogram_reports_zero_everywhere() {
        let snapshot = Histogram::new(&STORE_BUCKETS).snapshot();
        assert_eq!(snapshot.count(), 0);
        assert_eq!(snapshot.sum_seconds(), 0.0);
        assert!(snapshot.buckets().all(|(_, count)| count == 0));
        assert_eq!(snapshot.buckets().count(), 14);
    }

    #[test]
    fn bounds_ascend_and_their_labels_say_the_same_seconds() {
        for buckets in [&REQUEST_BUCKETS, &STORE_BUCKETS] {
            assert!(buckets.0.windows(2).all(|pair| pair[0].0 < pair[1].0));
            for &(nanos, label) in buckets.0 {
                let seconds: f64 = label.parse().expect("a number");
                #[allow(clippy::cast_precision_loss)]
                let from_nanos = nanos as f64 / 1e9;
                assert!(
                    (seconds - from_nanos).abs() < 1e-12,
                    "{label} vs {nanos} ns"
                );
            }
        }
    }
}
