//! [`CommitHooks`]: the hooks and jobs an app's worker runs, by name, and
//! how it runs them (attempts, backoff, timeouts, lease, queues,
//! retention, schedules).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::run::CommitHook;

/// The hooks an app's worker runs, by name, and how it runs them.
///
/// The name is what the queue rows store: keep it stable across releases
/// (generated repositories name theirs `TABLE.after_create_commit` and so
/// on). Rows of a hook this app does not know stay pending, for a replica
/// that does (a rolling deploy that adds a hook).
#[derive(Clone)]
pub struct CommitHooks {
    pub(crate) hooks: BTreeMap<String, Arc<dyn CommitHook>>,
    /// Timeouts of hooks that do not take the default.
    pub(crate) timeouts: BTreeMap<String, Duration>,
    /// Jobs queued on a schedule.
    pub(crate) schedules: Vec<Scheduled>,
    /// The queue of each hook that is not in `default`.
    pub(crate) hook_queues: BTreeMap<String, String>,
    /// Runs at once per process of the queues that say.
    pub(crate) queue_concurrency: BTreeMap<String, u32>,
    /// The priority of each job type that is not 0.
    pub(crate) priorities: BTreeMap<String, i32>,
    /// Per job type, whether a payload reads back into it: a schedule's
    /// payload from the configuration is checked at launch, not refused
    /// at its first tick.
    pub(crate) payload_checks: BTreeMap<String, PayloadCheck>,
    pub(crate) settings: WorkerSettings,
}

/// Whether a payload reads back into one job type; why not when it does not.
pub(crate) type PayloadCheck = fn(&str) -> Result<(), String>;

fn payload_check<J: super::Job>(payload: &str) -> Result<(), String> {
    serde_json::from_str::<J>(payload)
        .map(drop)
        .map_err(|error| error.to_string())
}

impl std::fmt::Debug for CommitHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitHooks")
            .field("hooks", &self.hooks.keys().collect::<Vec<_>>())
            .field("timeouts", &self.timeouts)
            .field("schedules", &self.schedules)
            .field("hook_queues", &self.hook_queues)
            .field("queue_concurrency", &self.queue_concurrency)
            .field("priorities", &self.priorities)
            .field("settings", &self.settings)
            .finish()
    }
}

impl Default for CommitHooks {
    fn default() -> Self {
        Self::new()
    }
}

/// The queue of every hook and job that names none.
pub(crate) const DEFAULT_QUEUE: &str = "default";

/// A job queued at every tick of a schedule.
#[derive(Debug, Clone)]
pub(crate) struct Scheduled {
    pub(crate) name: String,
    pub(crate) cron: super::Cron,
    /// The job's name: a [`Job`](super::Job)'s `NAME`, or a name from
    /// `[jobs.schedule.NAME] job`.
    pub(crate) hook: String,
    pub(crate) payload: String,
    pub(crate) priority: i32,
}

/// How the worker polls, retries and gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkerSettings {
    pub(crate) max_attempts: u32,
    pub(crate) backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) lease: Duration,
    /// How long one run may take, unless its hook has a timeout of its own.
    pub(crate) timeout: Duration,
    pub(crate) poll_every: Duration,
    pub(crate) batch: u32,
    /// Jobs one process runs at once.
    pub(crate) concurrency: u32,
    pub(crate) retention: Retention,
    pub(crate) paused: bool,
}

/// How long finished rows are kept (see [`CommitHooks::retention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retention {
    pub(crate) done: Duration,
    pub(crate) dead: Duration,
    /// How long a row written under an idempotency key outlives its
    /// creation at least: the key's record TTL, set by the app from
    /// `[idempotency] ttl_secs`.
    pub(crate) keyed_hold: Duration,
    /// How often the sweep runs.
    pub(crate) sweep_every: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            done: Duration::from_secs(7 * 24 * 3600),
            dead: Duration::from_secs(30 * 24 * 3600),
            keyed_hold: Duration::from_secs(24 * 3600),
            sweep_every: Duration::from_secs(60),
        }
    }
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            lease: Duration::from_secs(60),
            timeout: Duration::from_secs(300),
            poll_every: Duration::from_secs(1),
            batch: 32,
            concurrency: 32,
            retention: Retention::default(),
            paused: false,
        }
    }
}

impl WorkerSettings {
    /// The wait before run `attempt + 1` after run `attempt` failed:
    /// `backoff` doubled per failed attempt, at most `max_backoff`.
    pub(crate) fn backoff_after(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.backoff
            .saturating_mul(1u32 << doublings)
            .min(self.max_backoff)
    }
}

impl CommitHooks {
    /// No hooks, and the default settings: 8 attempts, a backoff from 1 s
    /// doubling up to 5 min, a lease of 1 min renewed while a run lasts, a
    /// timeout of 5 min per run, 32 runs at once, a poll every second, done
    /// rows kept 7 days and dead ones 30.
    pub fn new() -> Self {
        Self {
            hooks: BTreeMap::new(),
            timeouts: BTreeMap::new(),
            schedules: Vec::new(),
            hook_queues: BTreeMap::new(),
            queue_concurrency: BTreeMap::new(),
            priorities: BTreeMap::new(),
            payload_checks: BTreeMap::new(),
            settings: WorkerSettings::default(),
        }
    }

    /// Every queue with its hooks, by name: the hooks of no named queue
    /// are in `default`.
    pub(crate) fn queues(&self) -> Vec<(String, Vec<String>)> {
        let mut queues: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for name in self.hooks.keys() {
            let queue = self
                .hook_queues
                .get(name)
                .map_or(DEFAULT_QUEUE, String::as_str);
            queues.entry(queue).or_default().push(name.clone());
        }
        queues
            .into_iter()
            .map(|(queue, hooks)| (queue.to_owned(), hooks))
            .collect()
    }

    /// The queue of hook `name`.
    pub(crate) fn queue_of(&self, name: &str) -> &str {
        self.hook_queues
            .get(name)
            .map_or(DEFAULT_QUEUE, String::as_str)
    }

    /// How many runs of `queue` one process runs at once.
    pub(crate) fn concurrency_of(&self, queue: &str) -> u32 {
        self.queue_concurrency
            .get(queue)
            .copied()
            .unwrap_or(self.settings.concurrency)
    }

    /// How long run of hook `name` may take (see [`timeout`](Self::timeout)).
    pub(crate) fn timeout_of(&self, name: &str) -> Duration {
        self.timeouts
            .get(name)
            .copied()
            .unwrap_or(self.settings.timeout)
    }

    /// Runs `hook` for the queue rows named `name`.
    pub fn hook(mut self, name: impl Into<String>, hook: impl CommitHook) -> Self {
        self.hooks.insert(name.into(), Arc::new(hook));
        self
    }

    /// Runs the [`Job`](super::Job) `J`: its rows (named `J::NAME`) are
    /// read back into a `J` and performed, with `J::TIMEOUT` when it names
    /// one.
    pub fn job<J: super::Job>(mut self) -> Self {
        self.hooks
            .insert(J::NAME.to_owned(), Arc::new(super::typed::hook::<J>()));
        if J::QUEUE != DEFAULT_QUEUE {
            self.hook_queues
                .insert(J::NAME.to_owned(), J::QUEUE.to_owned());
        }
        if let Some(timeout) = J::TIMEOUT {
            self.timeouts.insert(J::NAME.to_owned(), timeout);
        }
        if J::PRIORITY != 0 {
            self.priorities.insert(J::NAME.to_owned(), J::PRIORITY);
        }
        self.payload_checks
            .insert(J::NAME.to_owned(), payload_check::<J>);
        self
    }

    /// Queues `job` at every tick of `cron` (UTC), as a [`Job`](super::Job)
    /// registered like [`job`](Self::job), under the schedule's `name`.
    ///
    /// Every replica's worker looks at the schedule, and each tick is
    /// queued once among them: its row is unique by the schedule's name
    /// and the tick, so the first replica to write it wins and the others
    /// write nothing (no leader to elect). A process that was down queues
    /// only the latest tick it missed, once, and only when that tick is
    /// within the done [`retention`](Self::retention) (7 days), since an
    /// older tick's row may be gone.
    ///
    /// A `[jobs.schedule.NAME]` table of the same name in `autumn.toml`
    /// changes it at launch (its `cron`, or `enabled = false` to switch it
    /// off): see [`configured`](Self::configured).
    ///
    /// ```
    /// use autumn_core::jobs::{CommitHooks, CommitJob, Cron, Job, JobError};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct NightlyReport {}
    ///
    /// impl Job for NightlyReport {
    ///     const NAME: &'static str = "reports.nightly";
    ///     async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let nightly: Cron = "30 3 * * *".parse().expect("a valid expression");
    /// let hooks = CommitHooks::new().schedule("nightly-report", nightly, NightlyReport {});
    /// # let _ = hooks;
    /// ```
    pub fn schedule<J: super::Job>(
        self,
        name: impl Into<String>,
        cron: super::Cron,
        job: J,
    ) -> Self {
        let name = name.into();
        let payload = match serde_json::to_string(&job) {
            Ok(payload) => payload,
            Err(error) => {
                // A job that cannot be serialized cannot be queued at all;
                // said at once, not at every tick.
                tracing::error!(schedule = %name, %error, "a scheduled job cannot be serialized: the schedule is not kept");
                return self.job::<J>();
            }
        };
        let mut hooks = self.job::<J>();
        hooks.schedules.push(Scheduled {
            name,
            cron,
            hook: J::NAME.to_owned(),
            payload,
            priority: J::PRIORITY,
        });
        hooks
    }

    /// Adds every hook of `other`, with their own timeouts and schedules
    /// (its other settings are ignored).
    pub fn merge(mut self, other: CommitHooks) -> Self {
        self.hooks.extend(other.hooks);
        self.timeouts.extend(other.timeouts);
        self.schedules.extend(other.schedules);
        self.hook_queues.extend(other.hook_queues);
        self.queue_concurrency.extend(other.queue_concurrency);
        self.priorities.extend(other.priorities);
        self.payload_checks.extend(other.payload_checks);
        self
    }

    /// Whether a hook named `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.hooks.contains_key(name)
    }

    /// How many runs a job gets before its row is dead (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.settings.max_attempts = attempts.max(1);
        self
    }

    /// The wait after a first failed run, doubled after each further one,
    /// at most `max`.
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.settings.backoff = first;
        self.settings.max_backoff = max.max(first);
        self
    }

    /// How long a job stays claimed by a worker that stopped renewing it
    /// (after a crash): past it, another worker takes the job over. A live
    /// run renews its lease every third of it, however long it runs, so
    /// the lease bounds the wait after a crash, not the length of a run.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.settings.lease = lease.max(Duration::from_millis(3));
        self
    }

    /// How long one run may take (every hook without a timeout of its own;
    /// 5 min by default). A run past it is dropped and counts as a failed
    /// attempt (retried after the backoff, or dead when it was the last),
    /// so a hook that hangs (a call to a server that never answers) holds
    /// no other job back and is not run on by another worker.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// How long one run of hook `name` may take, instead of
    /// [`timeout`](Self::timeout).
    pub fn timeout_for(mut self, name: impl Into<String>, timeout: Duration) -> Self {
        self.timeouts.insert(name.into(), timeout);
        self
    }

    /// How many jobs of one queue a process runs at once (32 by default,
    /// at least 1), for every queue without its own
    /// ([`queue`](Self::queue)): a slow job holds one of them, never the
    /// others.
    pub fn concurrency(mut self, jobs: u32) -> Self {
        self.settings.concurrency = jobs.max(1);
        self
    }

    /// How many jobs of `queue` a process runs at once (at least 1). Each
    /// queue has its own slots, so a flood of one kind of job (a bulk
    /// import) never holds back another (mail); within a queue, the higher
    /// priority runs first. A [`Job`](super::Job) names its queue
    /// (`QUEUE`); a hook is in `default` unless [`in_queue`](Self::in_queue)
    /// says otherwise.
    pub fn queue(mut self, queue: impl Into<String>, jobs: u32) -> Self {
        self.queue_concurrency.insert(queue.into(), jobs.max(1));
        self
    }

    /// Puts the hook `name` in `queue`.
    pub fn in_queue(mut self, name: impl Into<String>, queue: impl Into<String>) -> Self {
        self.hook_queues.insert(name.into(), queue.into());
        self
    }

    /// How long finished rows are kept before the sweep deletes them:
    /// `done` ones 7 days and `dead` ones 30 by default. Their payloads
    /// may hold personal data, so nothing is kept for ever. A row written
    /// under an idempotency key is kept at least as long as that key's
    /// record (`[idempotency] ttl_secs`), since the row is what stops a
    /// retried request from queuing the job again. A row's time is set
    /// when it finishes.
    pub fn retention(mut self, done: Duration, dead: Duration) -> Self {
        self.settings.retention.done = done;
        self.settings.retention.dead = dead;
        self
    }

    /// How long a keyed row is kept at least (see
    /// [`retention`](Self::retention)); the app sets it from its
    /// idempotency TTL.
    pub(crate) fn keyed_hold(mut self, hold: Duration) -> Self {
        self.settings.retention.keyed_hold = hold;
        self
    }

    /// How often the worker looks for due jobs when nothing woke it (a
    /// retry coming due, a row another replica wrote), and at the clock
    /// while a job runs (to renew its lease, or cut it off at its timeout).
    pub fn poll_every(mut self, every: Duration) -> Self {
        self.settings.poll_every = every.max(Duration::from_millis(10));
        self
    }

    /// With `true`, the app writes queue rows but starts no worker: another
    /// process drains them, or a later start of this one.
    pub fn paused(mut self, paused: bool) -> Self {
        self.settings.paused = paused;
        self
    }
}
