//! Typed jobs: queued in the mutation's transaction or on their own, at
//! once, later or under a unique key; once per request however often it is
//! retried; run by the worker with their payload.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use autumn_core::jobs::{
    CommitHooks, CommitJob, CommitJobWorker, Job, JobError, Jobs, MutationContext,
};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::database::{DbConnection, DbPool};
use autumn_testkit::on_databases;
use diesel_async::AsyncConnection as _;
use scoped_futures::ScopedFutureExt as _;
use serde::{Deserialize, Serialize};

use super::{pool, rows};

/// What each test's jobs performed: (tag, user, attempt).
static PERFORMED: Mutex<Vec<(String, i64, u32)>> = Mutex::new(Vec::new());

#[derive(Serialize, Deserialize)]
struct Welcome {
    tag: String,
    user: i64,
}

impl Job for Welcome {
    const NAME: &'static str = "mail.welcome";

    async fn perform(self, run: CommitJob) -> Result<(), JobError> {
        PERFORMED
            .lock()
            .expect("performed")
            .push((self.tag, self.user, run.attempt()));
        Ok(())
    }
}

fn performed(tag: &str) -> Vec<(i64, u32)> {
    PERFORMED
        .lock()
        .expect("performed")
        .iter()
        .filter(|(t, ..)| t == tag)
        .map(|(_, user, attempt)| (*user, *attempt))
        .collect()
}

fn welcome(tag: &str, user: i64) -> Welcome {
    Welcome {
        tag: tag.to_owned(),
        user,
    }
}

/// Queues `jobs` in one transaction on `pool`; how many rows were written.
async fn in_transaction(pool: &DbPool, queue: &Jobs, jobs: Vec<Welcome>) -> usize {
    macro_rules! in_tx {
        ($conn:expr) => {{
            $conn
                .transaction(|conn| {
                    async move {
                        let mut written = 0;
                        for job in jobs {
                            if queue.enqueue_in(conn, job).await? {
                                written += 1;
                            }
                        }
                        Ok::<_, diesel::result::Error>(written)
                    }
                    .scope_boxed()
                })
                .await
                .expect("the transaction")
        }};
    }
    match pool.get().await.expect("a connection") {
        DbConnection::Postgres(mut conn) => in_tx!(&mut *conn),
        DbConnection::Sqlite(mut conn) => in_tx!(&mut *conn),
        _ => unreachable!("the tests build both backends"),
    }
}

fn worker(pool: &DbPool, clock: &ManualClock) -> CommitJobWorker {
    CommitJobWorker::new(
        pool.clone(),
        CommitHooks::new().job::<Welcome>(),
        Arc::new(clock.clone()),
    )
}

/// A request queues two welcome mails in its transaction; its retry (the
/// same key: the first attempt committed but was never answered) queues
/// them again and writes nothing. The worker sends each once.
async fn a_retried_request_queues_its_jobs_once(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let tag = format!("retried-{url}");
    let request = || {
        MutationContext::with_idempotency_key("v1:signup-request")
            .with_clock(Arc::new(clock.clone()))
    };
    let jobs = || vec![welcome(&tag, 1), welcome(&tag, 2)];
    let first = Jobs::new(pool.clone(), request());
    assert_eq!(in_transaction(&pool, &first, jobs()).await, 2);
    let retry = Jobs::new(pool.clone(), request());
    assert_eq!(
        in_transaction(&pool, &retry, jobs()).await,
        0,
        "the retry queues nothing"
    );
    // Another request is another job.
    let other = Jobs::new(
        pool.clone(),
        MutationContext::with_idempotency_key("v1:another-request"),
    );
    assert_eq!(
        in_transaction(&pool, &other, vec![welcome(&tag, 3)]).await,
        1
    );

    let run = worker(&pool, &clock).run_due().await.expect("run");
    assert_eq!(run.done, 3);
    let mut sent = performed(&tag);
    sent.sort_unstable();
    assert_eq!(sent, [(1, 1), (2, 1), (3, 1)]);
}

/// A job due later waits for its time; one under a unique key is queued
/// once, whoever queues it.
async fn later_and_unique_jobs(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let tag = format!("later-{url}");
    let detached = || {
        Jobs::new(
            pool.clone(),
            MutationContext::detached().with_clock(Arc::new(clock.clone())),
        )
    };
    let worker = worker(&pool, &clock);

    assert!(
        detached()
            .enqueue(welcome(&tag, 1).after(Duration::from_secs(60)))
            .await
            .expect("queued")
    );
    assert!(
        detached()
            .enqueue(welcome(&tag, 2).at(1_000_000 + 120_000))
            .await
            .expect("queued")
    );
    assert_eq!(worker.run_due().await.expect("run").ran(), 0, "not due yet");
    clock.advance(Duration::from_secs(60));
    assert_eq!(worker.run_due().await.expect("run").done, 1);
    clock.advance(Duration::from_secs(60));
    assert_eq!(worker.run_due().await.expect("run").done, 1);

    for _ in 0..3 {
        detached()
            .enqueue(welcome(&tag, 3).unique("welcome-user-3"))
            .await
            .expect("queued");
    }
    assert_eq!(worker.run_due().await.expect("run").done, 1);
    assert_eq!(performed(&tag), [(1, 1), (2, 1), (3, 1)]);
    assert_eq!(rows(&pool).await.len(), 3);
}

/// Outside a keyed request every job is its own.
async fn detached_jobs_are_each_their_own(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let tag = format!("detached-{url}");
    let jobs = Jobs::new(pool.clone(), MutationContext::detached());
    assert_eq!(
        in_transaction(&pool, &jobs, vec![welcome(&tag, 1), welcome(&tag, 1)]).await,
        2
    );
    assert_eq!(worker(&pool, &clock).run_due().await.expect("run").done, 2);
    assert_eq!(performed(&tag), [(1, 1), (1, 1)]);
}

on_databases!(
    a_retried_request_queues_its_jobs_once,
    later_and_unique_jobs,
    detached_jobs_are_each_their_own,
);
