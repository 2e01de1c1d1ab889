//! The durable commit-hook queue on PostgreSQL (a schema per test) and
//! SQLite (a file per test): rows written in the mutation's transaction,
//! one row per (idempotency key, hook, record), and the worker's runs,
//! retries, backoff, dead letters and lease takeover. Time is a manual
//! clock: nothing sleeps for a backoff or a lease to pass.
#![cfg(all(feature = "postgres", feature = "sqlite"))]

use autumn_testkit::on_databases;

mod dead_jobs;
mod queues;
mod retention;
mod schedules;
mod typed;
mod watch;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use autumn_core::jobs::{
    CommitHooks, CommitJob, CommitJobWorker, JobError, MutationContext, enqueue,
};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::database::{DbConnection, DbPool};
use diesel::sql_types::{BigInt, Integer, Nullable, Text};
use diesel_async::{AsyncConnection as _, RunQueryDsl as _};
use scoped_futures::ScopedFutureExt as _;

const HOOK: &str = "invoices.after_create_commit";

fn pool(url: &str) -> DbPool {
    DbPool::new(url, 8, Duration::from_secs(5)).expect("pool")
}

/// Writes the row of `HOOK` for `record` in a transaction that commits when
/// `commit`, rolls back otherwise; whether a row was written.
async fn write(pool: &DbPool, context: &MutationContext, record: &str, commit: bool) -> bool {
    macro_rules! in_tx {
        ($conn:expr) => {{
            let conn = $conn;
            let result: Result<bool, diesel::result::Error> = conn
                .transaction(|conn| {
                    async move {
                        let written = enqueue(conn, context, HOOK, record, "{\"total\":3}").await?;
                        if commit {
                            Ok(written)
                        } else {
                            Err(diesel::result::Error::RollbackTransaction)
                        }
                    }
                    .scope_boxed()
                })
                .await;
            match result {
                Ok(written) => written,
                Err(diesel::result::Error::RollbackTransaction) => false,
                Err(error) => panic!("enqueue failed: {error}"),
            }
        }};
    }
    match pool.get().await.expect("a connection") {
        DbConnection::Postgres(mut conn) => in_tx!(&mut *conn),
        DbConnection::Sqlite(mut conn) => in_tx!(&mut *conn),
        _ => unreachable!("the tests build both backends"),
    }
}

#[derive(diesel::QueryableByName, Debug, PartialEq, Eq)]
struct Row {
    #[diesel(sql_type = Text)]
    record_id: String,
    #[diesel(sql_type = Nullable<Text>)]
    idempotency_key: Option<String>,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = Integer)]
    attempts: i32,
    #[diesel(sql_type = BigInt)]
    run_at: i64,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
}

async fn rows(pool: &DbPool) -> Vec<Row> {
    let sql = "SELECT record_id, idempotency_key, state, attempts, run_at, last_error \
               FROM autumn_commit_jobs ORDER BY id";
    match pool.get().await.expect("a connection") {
        DbConnection::Postgres(mut conn) => diesel::sql_query(sql).load(&mut *conn).await,
        DbConnection::Sqlite(mut conn) => diesel::sql_query(sql).load(&mut *conn).await,
        _ => unreachable!("the tests build both backends"),
    }
    .expect("read the queue")
}

/// The (record, attempt) of every run, in order.
type Runs = Arc<Mutex<Vec<(String, u32)>>>;

fn recorder(
    runs: &Runs,
    fail_until: u32,
) -> impl Fn(CommitJob) -> std::future::Ready<Result<(), JobError>> + Send + Sync + 'static {
    let runs = runs.clone();
    move |job: CommitJob| {
        runs.lock()
            .expect("runs")
            .push((job.record_id().to_owned(), job.attempt()));
        std::future::ready(if job.attempt() <= fail_until {
            Err(JobError::retry(format!(
                "mail server down (attempt {})",
                job.attempt()
            )))
        } else {
            Ok(())
        })
    }
}

fn runs_of(runs: &Runs) -> Vec<(String, u32)> {
    runs.lock().expect("runs").clone()
}

async fn duplicate_attempts_write_one_row(url: String) {
    let pool = pool(&url);
    let alice = MutationContext::with_idempotency_key("v1:alice-key-1");
    let bob = MutationContext::with_idempotency_key("v1:bob-key-1");
    assert!(write(&pool, &alice, "7", true).await);
    // The retry of the same request: the same key, hook and record.
    assert!(!write(&pool, &alice, "7", true).await);
    // Another caller's identical client key is another scoped key.
    assert!(write(&pool, &bob, "7", true).await);
    // Without a key every mutation is its own.
    assert!(write(&pool, &MutationContext::detached(), "8", true).await);
    assert!(write(&pool, &MutationContext::detached(), "8", true).await);
    // A rolled-back mutation leaves no row.
    assert!(
        !write(
            &pool,
            &MutationContext::with_idempotency_key("v1:gone"),
            "9",
            false
        )
        .await
    );
    let keys: Vec<(String, Option<String>)> = rows(&pool)
        .await
        .into_iter()
        .map(|row| (row.record_id, row.idempotency_key))
        .collect();
    assert_eq!(
        keys,
        vec![
            ("7".to_owned(), Some("v1:alice-key-1".to_owned())),
            ("7".to_owned(), Some("v1:bob-key-1".to_owned())),
            ("8".to_owned(), None),
            ("8".to_owned(), None),
        ]
    );
}

async fn a_committed_job_runs_once(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let runs = Runs::default();
    let worker = CommitJobWorker::new(
        pool.clone(),
        CommitHooks::new().hook(HOOK, recorder(&runs, 0)),
        Arc::new(clock.clone()),
    );
    assert!(
        write(
            &pool,
            &MutationContext::with_idempotency_key("v1:k"),
            "1",
            true
        )
        .await
    );
    let run = worker.run_due().await.expect("run");
    assert_eq!((run.done, run.ran()), (1, 1));
    clock.advance(Duration::from_secs(3600));
    assert_eq!(
        worker.run_due().await.expect("run").ran(),
        0,
        "a done job never runs again"
    );
    assert_eq!(runs_of(&runs), vec![("1".to_owned(), 1)]);
    let row = &rows(&pool).await[0];
    assert_eq!((row.state.as_str(), row.attempts), ("done", 1));
}

async fn failures_back_off_then_the_job_is_dead(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let runs = Runs::default();
    let hooks = CommitHooks::new()
        .hook(HOOK, recorder(&runs, u32::MAX))
        .max_attempts(3)
        .backoff(Duration::from_secs(1), Duration::from_secs(60));
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock.clone()));
    write(&pool, &MutationContext::detached(), "1", true).await;

    assert_eq!(worker.run_due().await.expect("run").retried, 1);
    assert_eq!(
        rows(&pool).await[0].run_at,
        1_001_000,
        "first retry after 1 s"
    );
    clock.advance(Duration::from_millis(999));
    assert_eq!(
        worker.run_due().await.expect("run").ran(),
        0,
        "not due before its backoff"
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(worker.run_due().await.expect("run").retried, 1);
    assert_eq!(
        rows(&pool).await[0].run_at,
        1_003_000,
        "the backoff doubled"
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(worker.run_due().await.expect("run").dead, 1);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(
        worker.run_due().await.expect("run").ran(),
        0,
        "a dead job stays dead"
    );

    assert_eq!(
        runs_of(&runs),
        vec![
            ("1".to_owned(), 1),
            ("1".to_owned(), 2),
            ("1".to_owned(), 3)
        ]
    );
    let row = &rows(&pool).await[0];
    assert_eq!((row.state.as_str(), row.attempts), ("dead", 3));
    assert_eq!(
        row.last_error.as_deref(),
        Some("mail server down (attempt 3)")
    );
}

async fn a_permanent_error_is_dead_at_once(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let hooks = CommitHooks::new().hook(HOOK, |job: CommitJob| async move {
        job.record::<Vec<u8>>().map(|_| ())
    });
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock.clone()));
    write(&pool, &MutationContext::detached(), "1", true).await;
    assert_eq!(worker.run_due().await.expect("run").dead, 1);
    let row = &rows(&pool).await[0];
    assert_eq!((row.state.as_str(), row.attempts), ("dead", 1));
    assert!(
        row.last_error
            .as_deref()
            .is_some_and(|e| e.contains("is not a")),
        "{:?}",
        row.last_error
    );
}

/// A worker that dies mid-run (its future dropped) leaves the job claimed;
/// once the lease is over another worker runs it again, told it is the
/// second attempt.
async fn a_run_cut_short_is_taken_over_after_its_lease(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let started = Arc::new(tokio::sync::Notify::new());
    let attempts = Runs::default();
    let hook = {
        let (started, attempts) = (started.clone(), attempts.clone());
        move |job: CommitJob| {
            let (started, attempts) = (started.clone(), attempts.clone());
            async move {
                attempts
                    .lock()
                    .expect("runs")
                    .push((job.record_id().to_owned(), job.attempt()));
                if job.attempt() == 1 {
                    started.notify_one();
                    std::future::pending::<()>().await;
                }
                Ok(())
            }
        }
    };
    let hooks = CommitHooks::new()
        .hook(HOOK, hook)
        .lease(Duration::from_secs(30));
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock.clone()));
    write(&pool, &MutationContext::detached(), "1", true).await;

    tokio::select! {
        _ = worker.run_due() => panic!("the first run never ends"),
        () = started.notified() => {} // the "crash": the run is dropped here
    }
    clock.advance(Duration::from_secs(29));
    assert_eq!(
        worker.run_due().await.expect("run").ran(),
        0,
        "still leased"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(worker.run_due().await.expect("run").done, 1);
    assert_eq!(
        runs_of(&attempts),
        vec![("1".to_owned(), 1), ("1".to_owned(), 2)]
    );
}

/// Workers polling at once (replicas) run each job exactly once.
async fn concurrent_workers_run_each_job_once(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let runs = Runs::default();
    for record in 0..40 {
        write(
            &pool,
            &MutationContext::detached(),
            &record.to_string(),
            true,
        )
        .await;
    }
    let workers: Vec<_> = (0..4)
        .map(|_| {
            CommitJobWorker::new(
                pool.clone(),
                CommitHooks::new().hook(HOOK, recorder(&runs, 0)),
                Arc::new(clock.clone()),
            )
        })
        .collect();
    let mut total = 0;
    // Batches of 32: two rounds drain 40 rows whichever worker wins.
    for _ in 0..2 {
        let results =
            futures_util::future::join_all(workers.iter().map(CommitJobWorker::run_due)).await;
        for run in results {
            total += run.expect("run").done;
        }
    }
    assert_eq!(total, 40);
    let mut records: Vec<String> = runs_of(&runs)
        .into_iter()
        .map(|(record, _)| record)
        .collect();
    records.sort();
    records.dedup();
    assert_eq!(records.len(), 40);
    assert_eq!(runs_of(&runs).len(), 40, "no job ran twice");
}

on_databases!(
    duplicate_attempts_write_one_row,
    a_committed_job_runs_once,
    failures_back_off_then_the_job_is_dead,
    a_permanent_error_is_dead_at_once,
    a_run_cut_short_is_taken_over_after_its_lease,
    concurrent_workers_run_each_job_once,
);
