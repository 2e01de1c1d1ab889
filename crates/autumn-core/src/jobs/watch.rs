//! One job's run, watched: its lease renewed while it runs (so a slow job
//! is never taken over by another worker while it is still alive), and cut
//! off at its timeout (so a job that hangs holds nothing for longer).
//!
//! Both are decided by the worker's clock, looked at every
//! [`poll_every`](super::CommitHooks::poll_every): a test moves a manual
//! clock and the next look acts on it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::time::Duration;

use autumn_base::clock::SharedClock;
use autumn_base::database::{DbError, DbPool};
use futures_util::FutureExt as _;

use super::queue;
use super::run::{JobError, JobFuture};

/// How a watched run ended.
pub(crate) enum Watched {
    /// The job returned (a panic is a retryable error).
    Returned(Result<(), JobError>),
    /// The job ran past its timeout and was dropped.
    TimedOut(Duration),
    /// Renewing the lease found the row another worker's: this run was
    /// dropped, and the other worker's counts.
    Lost,
}

/// What a watch needs to know of the run.
pub(crate) struct Watch<'a> {
    pub(crate) pool: &'a DbPool,
    pub(crate) clock: &'a SharedClock,
    /// The row and the attempt this run is, which every renewal is fenced
    /// on.
    pub(crate) id: i64,
    pub(crate) attempt: i32,
    pub(crate) lease: Duration,
    pub(crate) timeout: Duration,
    /// How often the clock is looked at.
    pub(crate) every: Duration,
}

type Renewal<'a> = Pin<Box<dyn Future<Output = Result<bool, DbError>> + Send + 'a>>;

impl Watch<'_> {
    /// Runs `job` to its end, its timeout, or the loss of its lease.
    pub(crate) async fn run(self, job: JobFuture) -> Watched {
        let started = self.clock.now_millis();
        let deadline = started.saturating_add(millis(self.timeout));
        // Renewed every third of the lease, as the key guard renews its
        // lock: two renewals may fail before another worker can take over.
        let renew_every = millis(self.lease / 3).max(1);
        let mut renewed_at = started;
        let mut renewal: Option<Renewal<'_>> = None;
        let mut job = AssertUnwindSafe(job).catch_unwind();
        let mut look =
            tokio::time::interval_at(tokio::time::Instant::now() + self.every, self.every);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                // The job first: one that is done is never reported late.
                biased;
                returned = &mut job => {
                    return Watched::Returned(
                        returned.unwrap_or_else(|_| Err(JobError::retry("the job panicked"))),
                    );
                }
                renewed = poll_renewal(&mut renewal), if renewal.is_some() => {
                    renewal = None;
                    match renewed {
                        Ok(true) => {}
                        Ok(false) => return Watched::Lost,
                        // The row may well still be ours: the next look
                        // tries again.
                        Err(error) => tracing::warn!(
                            job = self.id,
                            attempt = self.attempt,
                            %error,
                            "could not renew a running job's lease"
                        ),
                    }
                }
                _ = look.tick() => {
                    let now = self.clock.now_millis();
                    if now >= deadline {
                        return Watched::TimedOut(self.timeout);
                    }
                    if renewal.is_none() && now >= renewed_at.saturating_add(renew_every) {
                        renewed_at = now;
                        let lease_end = now.saturating_add(millis(self.lease));
                        renewal = Some(Box::pin(queue::renew(
                            self.pool,
                            self.id,
                            self.attempt,
                            lease_end,
                        )));
                    }
                }
            }
        }
    }
}

async fn poll_renewal(renewal: &mut Option<Renewal<'_>>) -> Result<bool, DbError> {
    match renewal {
        Some(renewing) => renewing.await,
        // Not polled without one (the branch is disabled).
        None => std::future::pending().await,
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
