//! A running job watched: cut off at its timeout, its lease renewed while
//! it lives, stopped when another worker took it over, and one slow job
//! never holding the others back. The clock is a manual one; the worker
//! looks at it every 10 ms.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use autumn_core::jobs::{
    CommitHooks, CommitJob, CommitJobWorker, JobError, MutationContext, WorkerRun,
};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::database::{DbConnection, DbPool};
use autumn_testkit::{eventually_async, on_databases};
use tokio::sync::Notify;

use super::{HOOK, Row, pool, rows, write};

const LOOK: Duration = Duration::from_millis(10);
const WITHIN: Duration = Duration::from_secs(10);

/// The row of `record`, once `check` holds for it.
async fn row_when(pool: &DbPool, record: &str, what: &str, check: impl Fn(&Row) -> bool) -> Row {
    eventually_async(what, WITHIN, || async {
        let rows = rows(pool).await;
        match rows.into_iter().find(|row| row.record_id == record) {
            Some(row) if check(&row) => Ok(row),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await
}

/// Waits until `started` counts `runs` runs of the slow record.
async fn runs_started(started: &AtomicUsize, runs: usize) {
    eventually_async("the slow record's run to start", WITHIN, || async {
        started.load(Ordering::SeqCst) == runs
    })
    .await;
}

/// What the worker's `run_due` on `task` did, once it ended (`what`, within
/// 10 s).
async fn ended(
    task: tokio::task::JoinHandle<Result<WorkerRun, autumn_idempotency::database::DbError>>,
    what: &str,
) -> WorkerRun {
    tokio::time::timeout(WITHIN, task)
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .expect("the task")
        .expect("the run")
}

/// A hook that waits on `release` for the record "slow" (counting its
/// runs in `started`) and returns at once for any other.
fn slow_hook(
    release: &Arc<Notify>,
    started: &Arc<AtomicUsize>,
) -> impl Fn(CommitJob) -> std::pin::Pin<Box<dyn Future<Output = Result<(), JobError>> + Send>>
+ Send
+ Sync
+ 'static {
    let (release, started) = (release.clone(), started.clone());
    move |job: CommitJob| {
        let (release, started) = (release.clone(), started.clone());
        Box::pin(async move {
            if job.record_id() == "slow" {
                started.fetch_add(1, Ordering::SeqCst);
                release.notified().await;
            }
            Ok(())
        })
    }
}

/// A hook that never returns is cut off at its timeout, counted as a
/// failed attempt, and runs again after its backoff; the jobs beside it in
/// the batch are written done without waiting for it.
async fn a_job_that_hangs_is_cut_off_at_its_timeout(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let release = Arc::new(Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let hooks = CommitHooks::new()
        .hook(HOOK, slow_hook(&release, &started))
        .timeout_for(HOOK, Duration::from_secs(30))
        .backoff(Duration::from_secs(1), Duration::from_secs(1))
        .poll_every(LOOK);
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock.clone()));
    for record in ["slow", "a", "b"] {
        write(&pool, &MutationContext::detached(), record, true).await;
    }
    let batch = tokio::spawn({
        let worker = worker.clone();
        async move { worker.run_due().await }
    });
    for record in ["a", "b"] {
        row_when(&pool, record, "the quick jobs done", |row| {
            row.state == "done"
        })
        .await;
    }
    assert!(!batch.is_finished(), "the hung job still runs");
    clock.advance(Duration::from_secs(29));
    tokio::time::sleep(LOOK * 5).await;
    assert!(!batch.is_finished(), "not before its timeout");
    clock.advance(Duration::from_secs(1));
    let run = ended(batch, "the batch ends at the timeout").await;
    assert_eq!((run.done, run.retried), (2, 1));
    let hung = row_when(&pool, "slow", "the hung job's row", |_| true).await;
    assert_eq!(hung.state, "pending");
    assert!(
        hung.last_error
            .as_deref()
            .is_some_and(|error| error.contains("timeout of 30000 ms")),
        "{hung:?}"
    );
    // Its second run is not cut off (it is released at once).
    clock.advance(Duration::from_secs(1));
    let second = tokio::spawn({
        let worker = worker.clone();
        async move { worker.run_due().await }
    });
    runs_started(&started, 2).await;
    release.notify_one();
    let run = second.await.expect("the task").expect("the run");
    assert_eq!(run.done, 1);
    assert_eq!(started.load(Ordering::SeqCst), 2);
}

/// A job that runs three times as long as its lease keeps it: the worker
/// running it renews the lease, so a second worker never takes it over,
/// and it runs once.
async fn a_slow_job_keeps_its_lease_and_runs_once(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let release = Arc::new(Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let hooks = || {
        CommitHooks::new()
            .hook(HOOK, slow_hook(&release, &started))
            .lease(Duration::from_secs(30))
            .poll_every(LOOK)
    };
    let running = CommitJobWorker::new(pool.clone(), hooks(), Arc::new(clock.clone()));
    let other = CommitJobWorker::new(pool.clone(), hooks(), Arc::new(clock.clone()));
    write(&pool, &MutationContext::detached(), "slow", true).await;
    let first = tokio::spawn(async move { running.run_due().await });
    runs_started(&started, 1).await;
    let mut lease_end = 1_030_000;
    for _ in 0..9 {
        // A third of the lease on: the running worker renews it.
        clock.advance(Duration::from_secs(10));
        let renewed = row_when(&pool, "slow", "the lease renewed", |row| {
            row.run_at > lease_end
        })
        .await;
        lease_end = renewed.run_at;
        assert_eq!(
            other.run_due().await.expect("the other worker").ran(),
            0,
            "the other worker takes nothing while the run lives"
        );
    }
    release.notify_one();
    let run = first.await.expect("the task").expect("the run");
    assert_eq!(run.done, 1);
    assert_eq!(started.load(Ordering::SeqCst), 1, "it ran once");
    let row = row_when(&pool, "slow", "the job done", |row| row.state == "done").await;
    assert_eq!(row.attempts, 1);
}

/// A run whose row was taken over (its attempt moved on, as when its lease
/// lapsed while its worker was cut off from the database) stops at its
/// next renewal: two workers never run one job on.
async fn a_run_whose_job_was_taken_over_stops(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let release = Arc::new(Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let hooks = CommitHooks::new()
        .hook(HOOK, slow_hook(&release, &started))
        .lease(Duration::from_secs(30))
        .poll_every(LOOK);
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock.clone()));
    write(&pool, &MutationContext::detached(), "slow", true).await;
    let run = tokio::spawn(async move { worker.run_due().await });
    runs_started(&started, 1).await;
    take_over(&pool).await;
    clock.advance(Duration::from_secs(10));
    let run = ended(run, "the run stops at its renewal").await;
    assert_eq!((run.lost, run.done), (1, 0));
    let row = row_when(&pool, "slow", "the row", |_| true).await;
    assert_eq!((row.state.as_str(), row.attempts), ("pending", 2));
}

/// Another worker's claim of every row, as the database would see it.
async fn take_over(pool: &DbPool) {
    use diesel_async::RunQueryDsl as _;
    let takeover = "UPDATE autumn_commit_jobs SET attempts = attempts + 1";
    match pool.get().await.expect("a connection") {
        DbConnection::Postgres(mut conn) => diesel::sql_query(takeover).execute(&mut *conn).await,
        DbConnection::Sqlite(mut conn) => diesel::sql_query(takeover).execute(&mut *conn).await,
        _ => unreachable!("the tests build both backends"),
    }
    .expect("the takeover");
}

/// The worker's own loop: a slow job holds one of its slots; jobs queued
/// while it runs are run and written done all the same.
async fn a_slow_job_holds_no_other_back(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let release = Arc::new(Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let hooks = CommitHooks::new()
        .hook(HOOK, slow_hook(&release, &started))
        .concurrency(2)
        .poll_every(LOOK);
    write(&pool, &MutationContext::detached(), "slow", true).await;
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock.clone())).start();
    runs_started(&started, 1).await;
    for record in 0..6 {
        write(
            &pool,
            &MutationContext::detached(),
            &record.to_string(),
            true,
        )
        .await;
    }
    for record in 0..6 {
        row_when(&pool, &record.to_string(), "a quick job done", |row| {
            row.state == "done"
        })
        .await;
    }
    let slow = row_when(&pool, "slow", "the slow row", |_| true).await;
    assert_eq!(slow.state, "pending", "the slow job still runs");
    release.notify_one();
    row_when(&pool, "slow", "the slow job done", |row| {
        row.state == "done"
    })
    .await;
    worker.abort();
}

on_databases!(
    a_job_that_hangs_is_cut_off_at_its_timeout,
    a_slow_job_keeps_its_lease_and_runs_once,
    a_run_whose_job_was_taken_over_stops,
    a_slow_job_holds_no_other_back,
);
