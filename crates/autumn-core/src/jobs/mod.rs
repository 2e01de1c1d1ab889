//! Jobs and durable after-commit hooks: work a mutation asks for, written to
//! the `autumn_commit_jobs` table in the mutation's own transaction and run
//! by a worker once it committed, with retries, backoff, a timeout per run,
//! a lease renewed while a run lives, and a dead-letter state (see the jobs
//! guide, `docs/jobs.md`).
//!
//! - [`Job`] / [`Jobs`]: typed jobs, queued with the [`Jobs`] extractor in
//!   the mutation's transaction or on their own, at once, later or under a
//!   unique key, once per request however often it is retried.
//! - [`Cron`] and [`CommitHooks::schedule`]: jobs queued on a schedule,
//!   once per tick across every replica, given in code or in
//!   `[jobs.schedule.NAME]` ([`CommitHooks::configured`]).
//! - [`MutationContext`]: the framework-scoped idempotency key of the
//!   request (when it was idempotent), so duplicate attempts of one request
//!   write one queue row: the table is unique on (key, hook, record).
//! - [`enqueue`]: writes a row in the caller's transaction. Generated
//!   repositories (`#[repository]`) call it for their `after_*_commit` hooks.
//! - [`CommitHook`] / [`CommitHooks`]: the code each named hook runs, given
//!   to the app with [`AppBuilder::with_commit_hooks`](crate::AppBuilder::with_commit_hooks),
//!   which starts the [`CommitJobWorker`].
//! - [`CommitJob`]: one run of a hook, with its attempt number. A job runs
//!   at least once: see its docs for how a hook stays idempotent.
//!
//! Dead jobs are listed, run again or discarded with the app binary's
//! `jobs` command, or on the actuator with `[jobs.admin] token`.
//!
//! The table comes from the framework migrations, which launch runs.

mod actuator;
pub(crate) mod admin;
mod configured;
mod context;
mod hook;
mod launch;
pub(crate) mod metrics;
mod queue;
mod run;
mod typed;
mod watch;
mod worker;

pub use crate::cron::{Cron, CronError};
pub use context::MutationContext;
pub use hook::CommitHooks;
pub use queue::enqueue;
pub use run::{CommitHook, CommitJob, JobError, JobFuture};
pub use typed::{Job, Jobs, Queued};
pub use worker::{CommitJobWorker, WorkerRun};

pub(crate) use actuator::routes as dead_job_routes;
pub(crate) use context::CommitQueue;
pub(crate) use worker::install;
