//! [`CommitJobWorker`]: drains `autumn_commit_jobs` after commit, with
//! retries, backoff and a dead-letter state.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use autumn_base::clock::SharedClock;
use autumn_base::database::{DbError, DbPool};
use futures_util::FutureExt as _;
use tokio::sync::Notify;

use super::context::CommitQueue;
use super::hook::{CommitHook, CommitHooks, CommitJob, JobError};
use super::queue::{self, Claimed, Outcome};

/// What one [`CommitJobWorker::run_due`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerRun {
    /// Jobs that finished.
    pub done: usize,
    /// Jobs that failed and will run again after their backoff.
    pub retried: usize,
    /// Jobs that failed for good (out of attempts, or a permanent error).
    pub dead: usize,
    /// Jobs whose run ended after another worker took them over: their
    /// outcome was not written.
    pub lost: usize,
}

impl WorkerRun {
    /// How many jobs ran.
    pub fn ran(&self) -> usize {
        self.done + self.retried + self.dead + self.lost
    }
}

/// Runs the due jobs of `autumn_commit_jobs` with the app's [`CommitHooks`].
///
/// The app builder starts one per process
/// ([`AppBuilder::with_commit_hooks`](crate::AppBuilder::with_commit_hooks));
/// replicas on one database share the work (PostgreSQL hands each due row to
/// one of them). Build one yourself to drain the queue in a process of its
/// own, or to run it step by step in a test with a manual clock.
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use autumn_core::jobs::{CommitHooks, CommitJob, CommitJobWorker, JobError};
/// use autumn_base::clock::SystemClock;
/// use autumn_base::database::DbPool;
///
/// async fn notify(_job: CommitJob) -> Result<(), JobError> { Ok(()) }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = DbPool::new("postgres://postgres@127.0.0.1/app", 4, Duration::from_secs(5))?;
/// autumn_base::database::FRAMEWORK_MIGRATIONS.run(&pool).await?;
/// let hooks = CommitHooks::new().hook("orders.after_create_commit", notify);
/// let worker = CommitJobWorker::new(pool, hooks, Arc::new(SystemClock));
/// let run = worker.run_due().await?;
/// println!("{} jobs ran", run.ran());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct CommitJobWorker {
    pool: DbPool,
    hooks: Arc<CommitHooks>,
    clock: SharedClock,
}

impl std::fmt::Debug for CommitJobWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitJobWorker")
            .field("pool", &self.pool)
            .field("hooks", &self.hooks)
            .finish_non_exhaustive()
    }
}

impl CommitJobWorker {
    /// A worker on `pool` running `hooks`, timing retries and leases by
    /// `clock`.
    pub fn new(pool: DbPool, hooks: CommitHooks, clock: SharedClock) -> Self {
        Self {
            pool,
            hooks: Arc::new(hooks),
            clock,
        }
    }

    /// Claims every job due now (by the clock), up to a batch per hook, runs
    /// them concurrently, and writes how each ended.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the queue cannot be read or written; a job whose
    /// outcome could not be written runs again when its lease is over.
    pub async fn run_due(&self) -> Result<WorkerRun, DbError> {
        let settings = self.hooks.settings;
        let mut run = WorkerRun::default();
        for (name, hook) in &self.hooks.hooks {
            let now = self.clock.now_millis();
            let lease_end = now.saturating_add(millis(settings.lease));
            let claimed = queue::claim(
                &self.pool,
                name,
                now,
                lease_end,
                settings.batch,
                settings.max_attempts,
            )
            .await?;
            let runs = claimed
                .into_iter()
                .map(|row| self.run_one(name, hook.as_ref(), row));
            for outcome in futures_util::future::join_all(runs).await {
                match outcome? {
                    Ran::Done => run.done += 1,
                    Ran::Retried => run.retried += 1,
                    Ran::Dead => run.dead += 1,
                    Ran::Lost => run.lost += 1,
                }
            }
        }
        Ok(run)
    }

    async fn run_one(
        &self,
        name: &str,
        hook: &dyn CommitHook,
        row: Claimed,
    ) -> Result<Ran, DbError> {
        let settings = self.hooks.settings;
        let attempt = u32::try_from(row.attempts).unwrap_or(u32::MAX);
        let job = CommitJob {
            id: row.id,
            hook: name.to_owned(),
            record_id: row.record_id,
            idempotency_key: row.idempotency_key,
            payload: row.payload,
            attempt,
            pool: self.pool.clone(),
        };
        // A panicking hook is a failed attempt, not a dead worker.
        let result = match AssertUnwindSafe(hook.run(job)).catch_unwind().await {
            Ok(result) => result,
            Err(_) => Err(JobError::retry("the hook panicked")),
        };
        let now = self.clock.now_millis();
        let (outcome, ran) = match &result {
            Ok(()) => (Outcome::Done, Ran::Done),
            Err(JobError::Retry(error)) if attempt < settings.max_attempts => {
                let at = now.saturating_add(millis(settings.backoff_after(attempt)));
                (Outcome::Retry { at, error }, Ran::Retried)
            }
            Err(JobError::Retry(error) | JobError::Permanent(error)) => {
                (Outcome::Dead { error }, Ran::Dead)
            }
        };
        match &result {
            Ok(()) => tracing::debug!(job = row.id, hook = name, attempt, "commit hook done"),
            Err(error) => match ran {
                Ran::Dead => {
                    tracing::error!(job = row.id, hook = name, attempt, %error, "commit hook failed for good: the job is dead")
                }
                _ => {
                    tracing::warn!(job = row.id, hook = name, attempt, %error, "commit hook failed; it will run again")
                }
            },
        }
        if queue::finish(&self.pool, row.id, row.attempts, now, outcome).await? {
            Ok(ran)
        } else {
            tracing::warn!(
                job = row.id,
                hook = name,
                attempt,
                "commit hook finished after its lease: another worker runs it again"
            );
            Ok(Ran::Lost)
        }
    }

    /// Runs the worker on a background task for as long as the runtime
    /// lives: it runs what is due, then waits for a wake-up (a commit in
    /// this process) or the poll interval. Call it from within a tokio
    /// runtime.
    /// [`spawn`](Self::spawn) once the startup checks have passed (the
    /// queue table exists, and the migrations are not racing it); never,
    /// when they fail.
    fn spawn_when_checked(
        self,
        wake: Arc<Notify>,
        mut checked: tokio::sync::watch::Receiver<bool>,
    ) {
        tokio::spawn(async move {
            if checked.wait_for(|passed| *passed).await.is_ok() {
                let _running = self.spawn(wake);
            }
        });
    }

    pub(crate) fn spawn(self, wake: Arc<Notify>) -> tokio::task::JoinHandle<()> {
        let every = self.hooks.settings.poll_every;
        let batch = usize::try_from(self.hooks.settings.batch).unwrap_or(usize::MAX);
        tokio::spawn(async move {
            loop {
                match self.run_due().await {
                    // A full batch: more may be due at once.
                    Ok(run) if run.ran() >= batch => continue,
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(%error, "the commit-hook worker could not read its queue")
                    }
                }
                tokio::select! {
                    () = wake.notified() => {}
                    () = tokio::time::sleep(every) => {}
                }
            }
        })
    }
}

enum Ran {
    Done,
    Retried,
    Dead,
    Lost,
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Puts the commit queue in the request extensions of an app on `pool`,
/// and starts the worker when the app registered hooks (unless paused).
pub(crate) fn install(
    pool: &DbPool,
    clock: &SharedClock,
    hooks: Option<CommitHooks>,
    checked: tokio::sync::watch::Receiver<bool>,
) -> axum::Extension<CommitQueue> {
    let queue = CommitQueue {
        clock: clock.clone(),
        wake: Arc::new(Notify::new()),
    };
    if let Some(hooks) = hooks.filter(|hooks| !hooks.hooks.is_empty()) {
        if hooks.settings.paused {
            tracing::info!("commit hooks paused: this process writes queue rows and runs none");
        } else if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let _guard = runtime.enter();
            let names: Vec<&String> = hooks.hooks.keys().collect();
            tracing::info!(hooks = ?names, "commit-hook worker started");
            CommitJobWorker::new(pool.clone(), hooks, clock.clone())
                .spawn_when_checked(queue.wake.clone(), checked);
        }
    }
    axum::Extension(queue)
}
