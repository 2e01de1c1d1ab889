//! [`CommitJobWorker`]: drains `autumn_commit_jobs` after commit, with
//! retries, backoff and a dead-letter state.

use std::sync::Arc;

use autumn_base::clock::SharedClock;
use autumn_base::database::{DbError, DbPool};
use tokio::sync::Notify;

use super::context::CommitQueue;
use super::hook::CommitHooks;
use super::metrics::{Counted, JobMetrics};
use super::queue::{self, Claimed, Outcome};
use super::run::{CommitJob, JobError};
use super::watch::{Watch, Watched, millis};

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

    fn count(&mut self, ran: Ran) {
        match ran {
            Ran::Done => self.done += 1,
            Ran::Retried => self.retried += 1,
            Ran::Dead => self.dead += 1,
            Ran::Lost => self.lost += 1,
        }
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
    /// Per schedule, the tick after the one this worker queued (or found
    /// queued): until then a look costs a comparison, not a walk through
    /// the calendar or a round trip to the database.
    ticks: Arc<std::sync::Mutex<std::collections::HashMap<String, u64>>>,
    metrics: Arc<JobMetrics>,
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
        let metrics = Arc::new(JobMetrics::new(
            hooks.queues().into_iter().map(|(queue, _)| queue),
        ));
        Self {
            pool,
            hooks: Arc::new(hooks),
            clock,
            ticks: Arc::default(),
            metrics,
        }
    }

    /// This worker counting into `metrics` (the app's, for the actuator).
    pub(crate) fn with_metrics(mut self, metrics: Arc<JobMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Queues the latest due tick of each schedule (see
    /// [`CommitHooks::schedule`]) that is not queued yet; returns how many
    /// rows this worker wrote (a tick another replica queued first writes
    /// none). The worker's loop calls it at every look.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the queue cannot be written; the tick is tried
    /// again at the next call.
    pub async fn schedule_due(&self) -> Result<usize, DbError> {
        let now = self.clock.now_millis();
        // An older tick's row may be swept already: not caught up.
        let since = now.saturating_sub(millis(self.hooks.settings.retention.done));
        let mut written = 0;
        for schedule in &self.hooks.schedules {
            if self
                .next_tick(&schedule.name)
                .is_some_and(|next| now < next)
            {
                continue;
            }
            let Some(tick) = schedule.cron.latest_at_or_before(now, since) else {
                continue;
            };
            let row = queue::NewRow {
                hook: &schedule.hook,
                record_id: tick.to_string(),
                idempotency_key: Some(format!("schedule:{}", schedule.name)),
                payload: schedule.payload.clone(),
                run_at: 0,
                now,
                priority: schedule.priority,
                request_id: None,
                // A tick belongs to no request's trace.
                trace_context: None,
            };
            if queue::insert_on(&self.pool, &row).await? {
                written += 1;
                tracing::debug!(schedule = %schedule.name, tick, "scheduled job queued");
            }
            self.ticks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(
                    schedule.name.clone(),
                    schedule.cron.next_after(tick).unwrap_or(u64::MAX),
                );
        }
        Ok(written)
    }

    fn next_tick(&self, name: &str) -> Option<u64> {
        self.ticks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .copied()
    }

    /// Claims every job due now (by the clock), up to a batch per hook, runs
    /// them concurrently, and writes how each ended. Each run is watched:
    /// its lease is renewed while it runs, and it is cut off at its
    /// [`timeout`](CommitHooks::timeout), so the batch waits on no job for
    /// longer than that.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the queue cannot be read or written; a job whose
    /// outcome could not be written runs again when its lease is over.
    pub async fn run_due(&self) -> Result<WorkerRun, DbError> {
        self.bury_exhausted().await?;
        let mut claimed = Vec::new();
        for (_, hooks) in self.hooks.queues() {
            claimed.extend(self.claim(&hooks, self.hooks.settings.batch).await?);
        }
        let mut run = WorkerRun::default();
        let runs = claimed.into_iter().map(|claim| self.run_one(claim));
        for ran in futures_util::future::join_all(runs).await {
            run.count(ran?);
        }
        Ok(run)
    }

    /// Deletes the finished rows whose retention is over (see
    /// [`CommitHooks::retention`]), in batches; returns how many went. On
    /// PostgreSQL one replica sweeps at a time: the others find it sweeping
    /// and return 0. The app's worker runs it every minute.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the database fails.
    pub async fn sweep_finished(&self) -> Result<u64, DbError> {
        queue::FINISHED
            .sweep(
                &self.pool,
                self.clock.now_millis(),
                autumn_base::database::ExpiringTable::SWEEP_BATCH,
            )
            .await
    }

    /// Claims up to `limit` due jobs of `hooks` (one queue's), the highest
    /// priority first.
    async fn claim(&self, hooks: &[String], limit: u32) -> Result<Vec<Claimed>, DbError> {
        let settings = &self.hooks.settings;
        let now = self.clock.now_millis();
        queue::claim(
            &self.pool,
            hooks,
            now,
            now.saturating_add(millis(settings.lease)),
            limit,
            settings.max_attempts,
        )
        .await
    }

    /// Marks dead the jobs whose last attempt never finished (see
    /// [`queue::bury_exhausted`]). It reads every due row of a hook, so the
    /// loop runs it every few seconds, not before each claim.
    async fn bury_exhausted(&self) -> Result<(), DbError> {
        let settings = &self.hooks.settings;
        let now = self.clock.now_millis();
        for name in self.hooks.hooks.keys() {
            queue::bury_exhausted(
                &self.pool,
                name,
                now,
                settings.max_attempts,
                self.expiry(now, settings.retention.dead),
            )
            .await?;
        }
        Ok(())
    }

    fn expiry(&self, now: u64, retention: std::time::Duration) -> queue::Expiry {
        queue::Expiry {
            at: now.saturating_add(millis(retention)),
            keyed_hold: millis(self.hooks.settings.retention.keyed_hold),
        }
    }

    /// Runs one claimed job in a span of its own: every line the job (and
    /// the worker about it) logs names the request that queued it, as the
    /// request's own lines do.
    ///
    /// While traces are exported the span starts a trace of its own, linked
    /// to the span that queued the job (its row's `trace_context`) rather
    /// than its child: a job runs after the request has answered, maybe
    /// hours later and more than once, and OpenTelemetry links queued work
    /// to its producer so that the request's trace ends when it did.
    async fn run_one(&self, row: Claimed) -> Result<Ran, DbError> {
        let span = tracing::info_span!(
            parent: None,
            "job",
            job = row.id,
            hook = %row.hook,
            attempt = row.attempts,
            request_id = row.request_id.as_deref().unwrap_or(""),
            otel.name = %row.hook,
            otel.kind = "consumer",
        );
        crate::telemetry::trace::link_to(&span, row.trace_context.as_deref());
        tracing::Instrument::instrument(self.run_claimed(row), span).await
    }

    async fn run_claimed(&self, row: Claimed) -> Result<Ran, DbError> {
        let name = row.hook.clone();
        let Some(hook) = self.hooks.hooks.get(&name) else {
            // Claimed by name from this worker's own hooks: always there.
            return Ok(Ran::Lost);
        };
        let settings = self.hooks.settings;
        let attempt = u32::try_from(row.attempts).unwrap_or(u32::MAX);
        let job = CommitJob {
            id: row.id,
            hook: name.clone(),
            record_id: row.record_id,
            idempotency_key: row.idempotency_key,
            payload: row.payload,
            attempt,
            pool: self.pool.clone(),
            request_id: row.request_id.clone(),
        };
        let started = std::time::Instant::now();
        let in_queue = self.hooks.queue_of(&name);
        let watched = Watch {
            pool: &self.pool,
            clock: &self.clock,
            id: row.id,
            attempt: row.attempts,
            lease: settings.lease,
            timeout: self.hooks.timeout_of(&name),
            every: settings.poll_every,
        }
        .run(hook.run(job))
        .await;
        let run_millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let timed_out = matches!(watched, Watched::TimedOut(_));
        let result = match watched {
            Watched::Returned(result) => result,
            Watched::TimedOut(timeout) => Err(JobError::retry(format!(
                "the job ran longer than its timeout of {} ms and was stopped",
                timeout.as_millis()
            ))),
            Watched::Lost => {
                tracing::warn!(
                    job = row.id,
                    hook = name,
                    attempt,
                    "a running job's lease was taken over by another worker: this run was stopped"
                );
                self.metrics.ran(in_queue, Counted::Lost, false, run_millis);
                return Ok(Ran::Lost);
            }
        };
        let now = self.clock.now_millis();
        let (outcome, ran) = match &result {
            Ok(()) => (
                Outcome::Done {
                    expiry: self.expiry(now, settings.retention.done),
                },
                Ran::Done,
            ),
            Err(JobError::Retry(error)) if attempt < settings.max_attempts => {
                let at = now.saturating_add(millis(settings.backoff_after(attempt)));
                (Outcome::Retry { at, error }, Ran::Retried)
            }
            Err(JobError::Retry(error) | JobError::Permanent(error)) => (
                Outcome::Dead {
                    error,
                    expiry: self.expiry(now, settings.retention.dead),
                },
                Ran::Dead,
            ),
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
        let counted = match ran {
            Ran::Done => Counted::Done,
            Ran::Retried => Counted::Retried,
            Ran::Dead => Counted::Dead,
            Ran::Lost => Counted::Lost,
        };
        if queue::finish(&self.pool, row.id, row.attempts, now, outcome).await? {
            self.metrics.ran(in_queue, counted, timed_out, run_millis);
            Ok(ran)
        } else {
            self.metrics
                .ran(in_queue, Counted::Lost, timed_out, run_millis);
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

    /// Runs the worker on a background task until the task is aborted or
    /// the runtime ends: due jobs as they come (see
    /// [`concurrency`](CommitHooks::concurrency)), a look at the queue every
    /// [`poll_every`](CommitHooks::poll_every), and the retention sweep.
    /// For draining the queue in a process of its own; an app started with
    /// [`AppBuilder::with_commit_hooks`](crate::AppBuilder::with_commit_hooks)
    /// runs one already. Call it from within a tokio runtime.
    pub fn start(self) -> tokio::task::JoinHandle<()> {
        self.spawn(Arc::new(Notify::new()))
    }

    /// The worker's loop: up to [`concurrency`](CommitHooks::concurrency)
    /// jobs at once, each its own task, so a slow job holds one slot and
    /// delays no other; a finished job frees its slot for the next due one
    /// at once. Between runs it waits for a wake-up (a commit in this
    /// process) or the poll interval. Finished rows are swept beside it.
    pub(crate) fn spawn(self, wake: Arc<Notify>) -> tokio::task::JoinHandle<()> {
        let settings = self.hooks.settings;
        let sweeper = {
            let worker = self.clone();
            autumn_base::database::spawn_sweeper(
                settings.retention.sweep_every,
                "finished commit jobs",
                move || {
                    let worker = worker.clone();
                    async move { worker.sweep_finished().await }
                },
            )
        };
        tokio::spawn(async move {
            // The sweep ends with the worker.
            let _sweeper = AbortOnDrop(sweeper);
            let queues = self.hooks.queues();
            // Each queue's runs in flight, by its place in `queues`, and
            // the place of each running task.
            let mut busy = vec![0_u32; queues.len()];
            let mut places = std::collections::HashMap::new();
            let mut running = tokio::task::JoinSet::new();
            // Which queue is asked first turns, so that none waits on the
            // others' database round trips every time.
            let mut first = 0;
            let mut housekept: Option<tokio::time::Instant> = None;
            loop {
                if housekept.is_none_or(|at| at.elapsed() >= HOUSEKEEPING_EVERY) {
                    housekept = Some(tokio::time::Instant::now());
                    if let Err(error) = self.bury_exhausted().await {
                        tracing::warn!(%error, "the commit-hook worker could not mark crashed runs dead");
                    }
                    for (name, hooks) in &queues {
                        match queue::pending(&self.pool, hooks).await {
                            Ok(pending) => self.metrics.set_pending(name, pending),
                            Err(error) => {
                                tracing::debug!(%error, "could not count the pending jobs")
                            }
                        }
                    }
                }
                if let Err(error) = self.schedule_due().await {
                    tracing::warn!(%error, "the commit-hook worker could not queue a scheduled job");
                }
                for offset in 0..queues.len() {
                    let place = (first + offset) % queues.len();
                    let (queue, hooks) = &queues[place];
                    let slots = self.hooks.concurrency_of(queue);
                    let free = slots.saturating_sub(busy[place]);
                    // A claim is a round trip: while the queue is busy, wait
                    // for a quarter of its slots to free up and claim them
                    // together, rather than one by one.
                    if free == 0 || (busy[place] > 0 && free < (slots / 4).max(1)) {
                        continue;
                    }
                    match self.claim(hooks, free.min(settings.batch)).await {
                        Ok(claimed) => {
                            busy[place] += as_u32(claimed.len());
                            for row in claimed {
                                let worker = self.clone();
                                let task = running.spawn(async move { worker.run_one(row).await });
                                places.insert(task.id(), place);
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, queue = %queue, "the commit-hook worker could not read its queue");
                        }
                    }
                }
                first = first.wrapping_add(1);
                tokio::select! {
                    Some(ended) = running.join_next_with_id(), if !running.is_empty() => {
                        let (task, outcome) = match ended {
                            Ok((task, outcome)) => (task, outcome.map(|_| ())),
                            // Panics in a hook are caught: this is one
                            // outside it, its job due again after its lease.
                            Err(error) => (error.id(), Ok(())),
                        };
                        if let Some(place) = places.remove(&task) {
                            busy[place] = busy[place].saturating_sub(1);
                        }
                        if let Err(error) = outcome {
                            tracing::warn!(%error, "a commit hook's outcome could not be written; it runs again after its lease");
                        }
                    }
                    () = wake.notified() => {}
                    () = tokio::time::sleep(settings.poll_every) => {}
                }
            }
        })
    }
}

/// How often the worker counts the pending jobs of each queue and marks
/// dead the runs that crashed on their last attempt.
const HOUSEKEEPING_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn as_u32(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

enum Ran {
    Done,
    Retried,
    Dead,
    Lost,
}

/// Puts the commit queue in the request extensions of an app on `pool`,
/// and starts the worker when the app registered hooks (unless paused),
/// counting into `metrics`.
pub(crate) fn install(
    pool: &DbPool,
    clock: &SharedClock,
    hooks: Option<CommitHooks>,
    checked: tokio::sync::watch::Receiver<bool>,
    metrics: Option<Arc<JobMetrics>>,
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
            let worker = CommitJobWorker::new(pool.clone(), hooks, clock.clone());
            let worker = match metrics {
                Some(metrics) => worker.with_metrics(metrics),
                None => worker,
            };
            worker.spawn_when_checked(queue.wake.clone(), checked);
        }
    }
    axum::Extension(queue)
}
