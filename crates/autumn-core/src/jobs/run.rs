//! What one run of a job is given and gives back: [`CommitJob`] (a queued
//! row, as the worker hands it over), [`JobError`], and [`CommitHook`], the
//! code a durable after-commit hook runs.

use std::future::Future;
use std::pin::Pin;

use autumn_base::database::DbPool;
use serde::de::DeserializeOwned;

/// One row of the commit-hook queue, as the worker hands it to its hook.
///
/// A job runs **at least once**: the worker may crash after the hook did its
/// work and before it marked the row done, and a hook that fails is run
/// again. Write hooks so that a second run changes nothing:
///
/// - key the side effect by [`record_id`](Self::record_id) and
///   [`hook`](Self::hook) (a unique index on the outbox row, `ON CONFLICT DO
///   NOTHING`), or
/// - pass [`idempotency_key`](Self::idempotency_key) to a downstream API
///   that de-duplicates by key (a payment provider, a mail service), and
/// - use [`attempt`](Self::attempt) (1 on the first run) to tell a first
///   run from a retry, say to look up whether the last attempt got through.
#[derive(Debug, Clone)]
pub struct CommitJob {
    pub(crate) id: i64,
    pub(crate) hook: String,
    pub(crate) record_id: String,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) payload: String,
    pub(crate) attempt: u32,
    pub(crate) pool: DbPool,
    pub(crate) request_id: Option<String>,
}

impl CommitJob {
    /// The id of the request that queued the job (its `x-request-id`), also
    /// on every line the job logs; `None` for a job queued outside a
    /// request (a schedule, a background task).
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The queue row's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The hook's name, as registered in [`CommitHooks`](super::CommitHooks).
    pub fn hook(&self) -> &str {
        &self.hook
    }

    /// The id of the record the mutation wrote, as text.
    pub fn record_id(&self) -> &str {
        &self.record_id
    }

    /// The framework-scoped idempotency key of the request that caused the
    /// mutation, if it was idempotent.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// Which run this is: 1 the first time, 2 on the first retry, and so on.
    /// A worker that crashed mid-run counts as a run.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The record as the mutation left it (for a delete: as it was), JSON.
    pub fn payload(&self) -> &str {
        &self.payload
    }

    /// The record, read back from [`payload`](Self::payload).
    ///
    /// # Errors
    ///
    /// [`JobError::Permanent`] when the payload is not a `T`: running the
    /// job again would not change that.
    pub fn record<T: DeserializeOwned>(&self) -> Result<T, JobError> {
        serde_json::from_str(&self.payload).map_err(|error| {
            JobError::permanent(format!(
                "the payload of job {} is not a {}: {error}",
                self.id,
                std::any::type_name::<T>()
            ))
        })
    }

    /// The app database, for the hook's own writes.
    pub fn pool(&self) -> &DbPool {
        &self.pool
    }
}

/// Why a job did not finish.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// Worth another try: retried after a backoff, until the attempts run
    /// out and the row is dead.
    #[error("{0}")]
    Retry(String),
    /// Another try would fail the same way: the row is dead at once.
    #[error("{0}")]
    Permanent(String),
}

impl JobError {
    /// A failure worth retrying.
    pub fn retry(message: impl std::fmt::Display) -> Self {
        Self::Retry(message.to_string())
    }

    /// A failure not worth retrying.
    pub fn permanent(message: impl std::fmt::Display) -> Self {
        Self::Permanent(message.to_string())
    }
}

/// Database errors are usually passing (a lost connection, a deadlock).
impl From<diesel::result::Error> for JobError {
    fn from(error: diesel::result::Error) -> Self {
        Self::retry(error)
    }
}

impl From<crate::AutumnError> for JobError {
    fn from(error: crate::AutumnError) -> Self {
        Self::retry(error)
    }
}

/// What a job's run returns.
pub type JobFuture = Pin<Box<dyn Future<Output = Result<(), JobError>> + Send>>;

/// The code a durable after-commit hook runs: implemented for every
/// `async fn(CommitJob) -> Result<(), JobError>`.
///
/// ```
/// use autumn_core::jobs::{CommitJob, CommitHooks, JobError};
///
/// async fn send_receipt(job: CommitJob) -> Result<(), JobError> {
///     // ... insert into the outbox, unique on the record id ...
///     let _ = (job.record_id(), job.attempt());
///     Ok(())
/// }
///
/// let hooks = CommitHooks::new().hook("orders.after_create_commit", send_receipt);
/// assert!(hooks.contains("orders.after_create_commit"));
/// ```
pub trait CommitHook: Send + Sync + 'static {
    /// Runs the job once.
    fn run(&self, job: CommitJob) -> JobFuture;
}

impl<F, Fut> CommitHook for F
where
    F: Fn(CommitJob) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    fn run(&self, job: CommitJob) -> JobFuture {
        Box::pin(self(job))
    }
}
