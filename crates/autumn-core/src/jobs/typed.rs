//! Typed jobs: a [`Job`] is a serializable value with a stable name and the
//! code that performs it, queued with [`Jobs`] inside the mutation's
//! transaction or on its own, at once or later, once per request however
//! often the request is retried.
//!
//! Jobs share the commit-hook queue (`autumn_commit_jobs`) and its worker:
//! [`CommitHooks::job`](super::CommitHooks::job) registers one, and it runs
//! with the same retries, backoff, timeout, lease and retention.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use autumn_base::database::DbPool;
use autumn_idempotency::database::IdempotencyConnection;
use axum::extract::FromRequestParts;
use http::request::Parts;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::context::MutationContext;
use super::queue::{self, NewRow};
use super::run::{CommitJob, JobError, JobFuture};
use crate::AutumnError;

/// Work a mutation asks for, performed later by the worker: a value that
/// serializes to the queue row's payload, with a stable name.
///
/// ```
/// use autumn_core::jobs::{CommitJob, Job, JobError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendWelcome {
///     user_id: i64,
/// }
///
/// impl Job for SendWelcome {
///     const NAME: &'static str = "mail.welcome";
///
///     async fn perform(self, run: CommitJob) -> Result<(), JobError> {
///         // Sent once per job; `run.attempt()` tells a retry from a first run.
///         let _ = (self.user_id, run.attempt());
///         Ok(())
///     }
/// }
/// ```
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The name the queue rows store and the worker runs it by: keep it
    /// stable across releases.
    const NAME: &'static str;

    /// How long one run may take, instead of the worker's default
    /// ([`CommitHooks::timeout`](super::CommitHooks::timeout)).
    const TIMEOUT: Option<Duration> = None;

    /// The queue it runs in (`"default"` unless named): each queue has its
    /// own slots per process ([`CommitHooks::queue`](super::CommitHooks::queue)).
    const QUEUE: &'static str = "default";

    /// Its priority within its queue: the higher runs first among due
    /// jobs. [`Queued::priority`] overrides it for one job.
    const PRIORITY: i32 = 0;

    /// Performs the job. It runs at least once: make a second run change
    /// nothing (see the jobs guide).
    fn perform(self, run: CommitJob) -> impl Future<Output = Result<(), JobError>> + Send;

    /// This job, due `delay` after it is queued.
    fn after(self, delay: Duration) -> Queued<Self> {
        Queued::from(self).after(delay)
    }

    /// This job, due at `millis` since the Unix epoch (by the app's clock).
    fn at(self, millis: u64) -> Queued<Self> {
        Queued::from(self).at(millis)
    }

    /// This job, queued at most once under `key` (per job name): a second
    /// job with the same key is not queued while the first's row lives.
    fn unique(self, key: impl Into<String>) -> Queued<Self> {
        Queued::from(self).unique(key)
    }
}

/// A [`Job`] and how it is queued: when it is due and what makes it unique.
#[derive(Debug, Clone)]
pub struct Queued<J> {
    job: J,
    due: Due,
    unique: Option<String>,
    priority: Option<i32>,
}

#[derive(Debug, Clone, Copy)]
enum Due {
    Now,
    After(Duration),
    At(u64),
}

impl<J: Job> From<J> for Queued<J> {
    fn from(job: J) -> Self {
        Self {
            job,
            due: Due::Now,
            unique: None,
            priority: None,
        }
    }
}

impl<J: Job> Queued<J> {
    /// Due `delay` after it is queued.
    #[must_use]
    pub fn after(mut self, delay: Duration) -> Self {
        self.due = Due::After(delay);
        self
    }

    /// Due at `millis` since the Unix epoch, by the app's clock.
    #[must_use]
    pub fn at(mut self, millis: u64) -> Self {
        self.due = Due::At(millis);
        self
    }

    /// Queued at most once under `key` for this job's name.
    #[must_use]
    pub fn unique(mut self, key: impl Into<String>) -> Self {
        self.unique = Some(key.into());
        self
    }

    /// Run before the due jobs of its queue with a lower priority (instead
    /// of `J::PRIORITY`).
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }
}

/// Queues [`Job`]s: in the mutation's transaction with
/// [`enqueue_in`](Self::enqueue_in), or on their own with
/// [`enqueue`](Self::enqueue).
///
/// As an extractor it carries the request's idempotency key: each job the
/// request queues is unique by that key, the job's name and its place
/// among the request's jobs of that name, so a retried request (one whose
/// first attempt committed but was never answered) queues nothing new.
/// Outside a keyed request every queued job is its own, unless
/// [`unique`](Job::unique) names a key.
#[derive(Clone)]
pub struct Jobs {
    pool: DbPool,
    context: MutationContext,
    /// How many jobs of each name this request queued, for the next one's
    /// place.
    places: Arc<std::sync::Mutex<std::collections::HashMap<&'static str, u32>>>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

/// The scope of a job made unique by [`Job::unique`], in the row's key
/// column: kept apart from request keys, which are storage keys (`v1:...`).
const UNIQUE_SCOPE: &str = "unique";

impl Jobs {
    /// Jobs on `pool`, for the work `context` describes (a request, or
    /// [`MutationContext::detached`] for work outside one).
    pub fn new(pool: DbPool, context: MutationContext) -> Self {
        Self {
            pool,
            context,
            places: Arc::default(),
        }
    }

    /// Queues `job` in the transaction `conn` is in: it commits with the
    /// mutation or not at all. Returns whether a row was written (`false`:
    /// this request, or the job's unique key, queued it already). The
    /// worker learns of it at its next poll, or at once after
    /// [`committed`](Self::committed).
    ///
    /// # Errors
    ///
    /// The database's error, or a payload that cannot be serialized.
    pub async fn enqueue_in<C, J>(
        &self,
        conn: &mut C,
        job: impl Into<Queued<J>>,
    ) -> Result<bool, diesel::result::Error>
    where
        C: IdempotencyConnection + ?Sized,
        J: Job,
    {
        let row = self.row(job.into())?;
        queue::insert(conn, &row).await
    }

    /// Queues `job` on a connection of its own, committed at once, and
    /// wakes this process's worker. For work that belongs to no
    /// transaction (or comes after one).
    ///
    /// # Errors
    ///
    /// [`AutumnError`]: 503 when no database connection can be had, 500
    /// when the row cannot be written.
    pub async fn enqueue<J: Job>(&self, job: impl Into<Queued<J>>) -> Result<bool, AutumnError> {
        let row = self.row(job.into()).map_err(AutumnError::internal)?;
        let written = queue::insert_on(&self.pool, &row)
            .await
            .map_err(AutumnError::internal)?;
        self.committed();
        Ok(written)
    }

    /// Wakes this process's worker: call after the transaction that queued
    /// jobs with [`enqueue_in`](Self::enqueue_in) committed.
    pub fn committed(&self) {
        self.context.committed();
    }

    fn row<J: Job>(&self, queued: Queued<J>) -> Result<NewRow<'static>, diesel::result::Error> {
        let payload = serde_json::to_string(&queued.job)
            .map_err(|error| diesel::result::Error::SerializationError(Box::new(error)))?;
        Ok(self.new_row(
            J::NAME,
            payload,
            queued.due,
            queued.unique,
            queued.priority.unwrap_or(J::PRIORITY),
        ))
    }

    /// The row of a job named `hook` with `payload`, unique by `unique`, by
    /// the request's key and the job's place among the request's, or not
    /// at all.
    fn new_row(
        &self,
        hook: &'static str,
        payload: String,
        due: Due,
        unique: Option<String>,
        priority: i32,
    ) -> NewRow<'static> {
        let now = self.context.clock().now_millis();
        let run_at = match due {
            // Due at once, whatever the clock of the worker that reads it.
            Due::Now => 0,
            Due::After(delay) => now.saturating_add(super::watch::millis(delay)),
            Due::At(millis) => millis,
        };
        let (scope, record) = match (unique, self.context.idempotency_key()) {
            (Some(key), _) => (Some(UNIQUE_SCOPE.to_owned()), key),
            (None, Some(request)) => (Some(request.to_owned()), format!("#{}", self.place(hook))),
            (None, None) => (None, String::new()),
        };
        NewRow {
            hook,
            record_id: record,
            idempotency_key: scope,
            payload,
            run_at,
            now,
            priority,
            request_id: self.context.request_id().map(str::to_owned),
            trace_context: crate::telemetry::trace::current_traceparent(),
        }
    }

    /// Queues a row for the hook `hook` (a job the framework runs itself,
    /// as mail), due at once and unique by `unique`, in `conn`'s
    /// transaction.
    #[cfg(feature = "mail")]
    pub(crate) async fn enqueue_hook_in<C>(
        &self,
        conn: &mut C,
        hook: &'static str,
        payload: String,
        unique: String,
    ) -> Result<bool, diesel::result::Error>
    where
        C: IdempotencyConnection + ?Sized,
    {
        let row = self.new_row(hook, payload, Due::Now, Some(unique), 0);
        queue::insert(conn, &row).await
    }

    /// As [`enqueue_hook_in`](Self::enqueue_hook_in), committed on a
    /// connection of its own.
    #[cfg(feature = "mail")]
    pub(crate) async fn enqueue_hook(
        &self,
        hook: &'static str,
        payload: String,
        unique: String,
    ) -> Result<bool, autumn_base::database::DbError> {
        let row = self.new_row(hook, payload, Due::Now, Some(unique), 0);
        let written = queue::insert_on(&self.pool, &row).await?;
        self.committed();
        Ok(written)
    }

    /// The mutation's context.
    #[cfg(feature = "mail")]
    pub(crate) fn context(&self) -> &MutationContext {
        &self.context
    }

    /// The place of the next job named `name` among this request's.
    pub(crate) fn place(&self, name: &'static str) -> u32 {
        let mut places = self
            .places
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let place = places.entry(name).or_default();
        let this = *place;
        *place += 1;
        this
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Jobs {
    type Rejection = AutumnError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Some(pool) = parts.extensions.get::<DbPool>().cloned() else {
            return Err(AutumnError::internal(
                "Jobs needs the app database, where the queue lives: set database.url",
            ));
        };
        let context = match MutationContext::from_request_parts(parts, state).await {
            Ok(context) => context,
            Err(never) => match never {},
        };
        Ok(Self::new(pool, context))
    }
}

/// The hook that runs a [`Job`] of type `J` from its row.
pub(crate) fn hook<J: Job>() -> impl Fn(CommitJob) -> JobFuture + Send + Sync + 'static {
    |run: CommitJob| -> JobFuture {
        Box::pin(async move {
            let job: J = run.record()?;
            job.perform(run).await
        })
    }
}
