//! [`JobMetrics`]: what the worker did, per queue, for `/actuator/metrics`
//! and `/actuator/prometheus`: runs by outcome, time spent running, and the
//! pending jobs (looked up every few seconds).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The outcomes a run is counted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    Done,
    Retried,
    Dead,
    /// Taken over by another worker (its lease lapsed).
    Lost,
}

impl Counted {
    const ALL: [Self; 4] = [Self::Done, Self::Retried, Self::Dead, Self::Lost];

    fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Retried => "retried",
            Self::Dead => "dead",
            Self::Lost => "lost",
        }
    }
}

#[derive(Debug, Default)]
struct QueueCounts {
    outcomes: [AtomicU64; 4],
    /// Of them, runs stopped at their timeout.
    timed_out: AtomicU64,
    run_millis: AtomicU64,
    /// Jobs pending (due or not), as last looked up.
    pending: AtomicU64,
}

/// The worker's counts, per queue.
#[derive(Debug, Default)]
pub(crate) struct JobMetrics {
    queues: Vec<(String, QueueCounts)>,
}

impl JobMetrics {
    pub(crate) fn new(queues: impl IntoIterator<Item = String>) -> Self {
        Self {
            queues: queues
                .into_iter()
                .map(|queue| (queue, QueueCounts::default()))
                .collect(),
        }
    }

    fn queue(&self, queue: &str) -> Option<&QueueCounts> {
        self.queues
            .iter()
            .find(|(name, _)| name == queue)
            .map(|(_, counts)| counts)
    }

    /// Counts one run of `queue` that took `millis`.
    pub(crate) fn ran(&self, queue: &str, outcome: Counted, timed_out: bool, millis: u64) {
        let Some(counts) = self.queue(queue) else {
            return;
        };
        let index = Counted::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        counts.outcomes[index].fetch_add(1, Ordering::Relaxed);
        counts.run_millis.fetch_add(millis, Ordering::Relaxed);
        if timed_out {
            counts.timed_out.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sets the pending jobs of `queue`, as just looked up.
    pub(crate) fn set_pending(&self, queue: &str, pending: u64) {
        if let Some(counts) = self.queue(queue) {
            counts.pending.store(pending, Ordering::Relaxed);
        }
    }

    /// Per queue, for `/actuator/metrics`.
    pub(crate) fn json(&self) -> serde_json::Value {
        let queues: serde_json::Map<_, _> = self
            .queues
            .iter()
            .map(|(name, counts)| {
                let mut fields = serde_json::Map::new();
                for (outcome, count) in Counted::ALL.iter().zip(&counts.outcomes) {
                    fields.insert(
                        outcome.as_str().to_owned(),
                        count.load(Ordering::Relaxed).into(),
                    );
                }
                fields.insert(
                    "timed_out".to_owned(),
                    counts.timed_out.load(Ordering::Relaxed).into(),
                );
                fields.insert(
                    "run_millis".to_owned(),
                    counts.run_millis.load(Ordering::Relaxed).into(),
                );
                fields.insert(
                    "pending".to_owned(),
                    counts.pending.load(Ordering::Relaxed).into(),
                );
                (name.clone(), serde_json::Value::Object(fields))
            })
            .collect();
        serde_json::Value::Object(queues)
    }

    /// The counters in the Prometheus text format.
    pub(crate) fn prometheus(&self, out: &mut String) {
        const RUNS: &str = "autumn_job_runs_total";
        const TIMED_OUT: &str = "autumn_job_timeouts_total";
        const SECONDS: &str = "autumn_job_run_seconds_total";
        const PENDING: &str = "autumn_jobs_pending";
        let _ = writeln!(
            out,
            "# HELP {RUNS} Job runs by queue and outcome (done, retried, dead, lost: taken over by another worker).\n# TYPE {RUNS} counter"
        );
        for (name, counts) in &self.queues {
            for (outcome, count) in Counted::ALL.iter().zip(&counts.outcomes) {
                let _ = writeln!(
                    out,
                    "{RUNS}{{queue=\"{name}\",outcome=\"{}\"}} {}",
                    outcome.as_str(),
                    count.load(Ordering::Relaxed)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP {TIMED_OUT} Job runs stopped at their timeout, by queue.\n# TYPE {TIMED_OUT} counter"
        );
        for (name, counts) in &self.queues {
            let _ = writeln!(
                out,
                "{TIMED_OUT}{{queue=\"{name}\"}} {}",
                counts.timed_out.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP {SECONDS} Time spent running jobs, by queue.\n# TYPE {SECONDS} counter"
        );
        for (name, counts) in &self.queues {
            #[allow(clippy::cast_precision_loss)]
            let seconds = counts.run_millis.load(Ordering::Relaxed) as f64 / 1000.0;
            let _ = writeln!(out, "{SECONDS}{{queue=\"{name}\"}} {seconds}");
        }
        let _ = writeln!(
            out,
            "# HELP {PENDING} Jobs pending (due or not), by queue, as the worker last looked.\n# TYPE {PENDING} gauge"
        );
        for (name, counts) in &self.queues {
            let _ = writeln!(
                out,
                "{PENDING}{{queue=\"{name}\"}} {}",
                counts.pending.load(Ordering::Relaxed)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_counted_per_queue_and_rendered() {
        let metrics = JobMetrics::new(["default".to_owned(), "mail".to_owned()]);
        metrics.ran("mail", Counted::Done, false, 1_500);
        metrics.ran("mail", Counted::Retried, true, 30_000);
        metrics.ran("default", Counted::Dead, false, 5);
        metrics.ran("elsewhere", Counted::Done, false, 5);
        metrics.set_pending("mail", 12);
        let json = metrics.json();
        assert_eq!(json["mail"]["done"], 1);
        assert_eq!(json["mail"]["retried"], 1);
        assert_eq!(json["mail"]["timed_out"], 1);
        assert_eq!(json["mail"]["run_millis"], 31_500);
        assert_eq!(json["mail"]["pending"], 12);
        assert_eq!(json["default"]["dead"], 1);
        let mut text = String::new();
        metrics.prometheus(&mut text);
        assert!(
            text.contains("autumn_job_runs_total{queue=\"mail\",outcome=\"done\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("autumn_job_timeouts_total{queue=\"mail\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("autumn_job_run_seconds_total{queue=\"mail\"} 31.5"),
            "{text}"
        );
        assert!(
            text.contains("autumn_jobs_pending{queue=\"mail\"} 12"),
            "{text}"
        );
        assert_eq!(text.matches("# TYPE autumn_job_runs_total").count(), 1);
    }
}
