//! What the rules decided, counted per rule for `/actuator/metrics` and
//! Prometheus, and refusals summed into one log line per interval: a flood
//! of refused requests must not become a flood of log lines.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use autumn_base::clock::SharedClock;
use autumn_base::log_summary::LogSummary;

/// How a rule decided one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Counted and let through.
    Allowed,
    /// Refused with 429.
    Limited,
    /// Not counted (the count could not be read) and let through.
    Unchecked,
    /// Not counted and refused with 503.
    Unavailable,
}

impl Outcome {
    const ALL: [Self; 4] = [
        Self::Allowed,
        Self::Limited,
        Self::Unchecked,
        Self::Unavailable,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Limited => "limited",
            Self::Unchecked => "unchecked",
            Self::Unavailable => "unavailable",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One rule's counters.
#[derive(Debug, Default)]
pub(crate) struct RuleCounts {
    outcomes: [AtomicU64; 4],
}

/// Every rule's counters, and the refusals not logged yet.
pub(crate) struct RateLimitMetrics {
    rules: Vec<(Arc<str>, RuleCounts)>,
    clock: SharedClock,
    refusals: LogSummary,
}

impl std::fmt::Debug for RateLimitMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitMetrics")
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

/// Seconds between two summary lines of refusals.
pub(crate) const SUMMARY_INTERVAL_SECS: u64 = autumn_base::log_summary::DEFAULT_INTERVAL_SECS;

impl RateLimitMetrics {
    pub(crate) fn new(names: impl IntoIterator<Item = Arc<str>>, clock: SharedClock) -> Self {
        Self {
            rules: names
                .into_iter()
                .map(|name| (name, RuleCounts::default()))
                .collect(),
            clock,
            refusals: LogSummary::new(
                "rate limits refused requests",
                Duration::from_secs(SUMMARY_INTERVAL_SECS),
            ),
        }
    }

    /// Counts `outcome` under the rule `index`; a refusal is summed into
    /// the next summary line (the first refusal after a quiet interval is
    /// logged at once).
    pub(crate) fn count(&self, index: usize, outcome: Outcome) {
        let Some((name, counts)) = self.rules.get(index) else {
            return;
        };
        counts.outcomes[outcome.index()].fetch_add(1, Ordering::Relaxed);
        if matches!(outcome, Outcome::Limited | Outcome::Unavailable) {
            self.refusals
                .note(self.clock.now_millis(), name, &outcome.as_str());
        }
    }

    /// Counts by rule and outcome, for `/actuator/metrics`.
    pub(crate) fn json(&self) -> serde_json::Value {
        let rules: serde_json::Map<_, _> = self
            .rules
            .iter()
            .map(|(name, counts)| {
                let outcomes: serde_json::Map<_, _> = Outcome::ALL
                    .iter()
                    .map(|outcome| {
                        (
                            outcome.as_str().to_owned(),
                            serde_json::Value::from(
                                counts.outcomes[outcome.index()].load(Ordering::Relaxed),
                            ),
                        )
                    })
                    .collect();
                (name.to_string(), serde_json::Value::Object(outcomes))
            })
            .collect();
        serde_json::Value::Object(rules)
    }

    /// The counters in the Prometheus text format.
    pub(crate) fn prometheus(&self, out: &mut String) {
        const NAME: &str = "autumn_rate_limit_requests_total";
        let _ = writeln!(
            out,
            "# HELP {NAME} Requests a rate-limit rule decided, by rule and outcome (allowed, limited, unchecked: let through uncounted, unavailable: refused uncounted).\n# TYPE {NAME} counter"
        );
        for (name, counts) in &self.rules {
            for outcome in Outcome::ALL {
                let _ = writeln!(
                    out,
                    "{NAME}{{rule=\"{name}\",outcome=\"{}\"}} {}",
                    outcome.as_str(),
                    counts.outcomes[outcome.index()].load(Ordering::Relaxed)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use autumn_base::clock::ManualClock;
    use autumn_testkit::logs::capture;

    use super::*;

    #[test]
    fn a_flood_of_refusals_logs_one_line_per_interval() {
        let clock = Arc::new(ManualClock::starting_at(1_000));
        let metrics = RateLimitMetrics::new(["login".into(), "api".into()], clock.clone());
        let (guard, logs) = capture();
        for _ in 0..1_000 {
            metrics.count(0, Outcome::Limited);
        }
        metrics.count(1, Outcome::Unavailable);
        metrics.count(1, Outcome::Allowed);
        clock.advance(Duration::from_secs(SUMMARY_INTERVAL_SECS));
        metrics.count(0, Outcome::Limited);
        drop(guard);
        let summaries = logs.lines_with("rate limits refused");
        assert_eq!(summaries.len(), 2, "{}", logs.text());
        // The first refusal at once, then everything since, by rule.
        assert!(summaries[0].contains("count=1 "), "{}", summaries[0]);
        assert!(summaries[1].contains("count=1001"), "{}", summaries[1]);
        assert!(
            summaries[1].contains("by_reason=api=1 login=1000"),
            "{}",
            summaries[1]
        );
        let json = metrics.json();
        assert_eq!(json["login"]["limited"], 1_001);
        assert_eq!(json["api"]["unavailable"], 1);
        assert_eq!(json["api"]["allowed"], 1);
    }
}
