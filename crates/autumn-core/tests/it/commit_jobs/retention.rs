//! Finished rows are deleted once their retention is over (done and dead
//! each their own), and a row written under an idempotency key is kept
//! while a retry of its request could still run the handler again.

use std::sync::Arc;
use std::time::Duration;

use autumn_core::jobs::{CommitHooks, CommitJob, CommitJobWorker, JobError, MutationContext};
use autumn_idempotency::clock::ManualClock;
use autumn_testkit::on_databases;

use super::{pool, rows, write};

const HOUR: Duration = Duration::from_secs(3600);

fn records(rows: &[super::Row]) -> Vec<&str> {
    rows.iter().map(|row| row.record_id.as_str()).collect()
}

async fn finished_rows_go_after_their_retention(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    // Refused for good: the record "dead".
    let hook = |job: CommitJob| async move {
        match job.record_id() {
            "dead" => Err(JobError::permanent("no such customer")),
            _ => Ok(()),
        }
    };
    let hooks = CommitHooks::new()
        .hook(super::HOOK, hook)
        .retention(HOUR, 2 * HOUR);
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock.clone()));
    write(&pool, &MutationContext::detached(), "done", true).await;
    write(&pool, &MutationContext::detached(), "dead", true).await;
    // Under a key: kept at least the key's record TTL (24 h by default).
    let keyed = || {
        MutationContext::with_idempotency_key("v1:retried-order")
            .with_clock(Arc::new(clock.clone()))
    };
    write(&pool, &keyed(), "keyed", true).await;
    let run = worker.run_due().await.expect("run");
    assert_eq!((run.done, run.dead), (2, 1));

    assert_eq!(worker.sweep_finished().await.expect("sweep"), 0);
    clock.advance(HOUR - Duration::from_millis(1));
    assert_eq!(worker.sweep_finished().await.expect("sweep"), 0, "not yet");
    clock.advance(Duration::from_millis(1));
    assert_eq!(worker.sweep_finished().await.expect("sweep"), 1);
    assert_eq!(records(&rows(&pool).await), ["dead", "keyed"]);
    clock.advance(HOUR);
    assert_eq!(worker.sweep_finished().await.expect("sweep"), 1);
    assert_eq!(records(&rows(&pool).await), ["keyed"]);
    clock.advance(20 * HOUR);
    assert_eq!(
        worker.sweep_finished().await.expect("sweep"),
        0,
        "the keyed row outlives its retention while its key lives"
    );
    // A retry of the request within the key's TTL queues nothing.
    assert!(!write(&pool, &keyed(), "keyed", true).await);
    clock.advance(2 * HOUR);
    assert_eq!(worker.sweep_finished().await.expect("sweep"), 1);
    assert!(rows(&pool).await.is_empty());
}

/// A pending row is never swept, however old.
async fn pending_rows_are_never_swept(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let hooks = CommitHooks::new().retention(Duration::ZERO, Duration::ZERO);
    // A worker that knows no hook: the row stays pending.
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock.clone()));
    write(&pool, &MutationContext::detached(), "waiting", true).await;
    clock.advance(1_000 * HOUR);
    assert_eq!(worker.sweep_finished().await.expect("sweep"), 0);
    assert_eq!(records(&rows(&pool).await), ["waiting"]);
}

on_databases!(
    finished_rows_go_after_their_retention,
    pending_rows_are_never_swept,
);
