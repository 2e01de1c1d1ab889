//! Two replicas that share only a PostgreSQL database: a duplicate landing on
//! the other replica still replays, and a burst split over both runs once.
#![cfg(feature = "postgres")]

use std::sync::Arc;
use std::time::Duration;

use crate::support::app::{Fixture, LOCK_TTL};
use crate::support::database;
use autumn_idempotency::clock::ManualClock;
use http::StatusCode;

/// Two replicas on one fresh schema, each with its own pool and router;
/// the schema goes when the test drops the last value.
fn replicas() -> (Fixture, Fixture, ManualClock, database::PgSchema) {
    let url = database::fresh_postgres_schema();
    let clock = ManualClock::new();
    let a = Fixture::with_store(
        Arc::new(database::store(&url, clock.clone())),
        clock.clone(),
        |l| l,
    );
    let b = Fixture::with_store(
        Arc::new(database::store(&url, clock.clone())),
        clock.clone(),
        |l| l,
    );
    (a, b, clock, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_the_other_replica_replays() {
    let (a, b, _, _schema) = replicas();
    let first = a.post("/orders").key("k").body("x").send().await;
    assert_eq!(first.status, StatusCode::CREATED);
    let retry = b.post("/orders").key("k").body("x").send().await;
    assert!(retry.replayed(), "{}", retry.text());
    assert_eq!(retry.body, first.body);
    assert_eq!(retry.header("set-cookie"), first.header("set-cookie"));
    assert_eq!(a.runs() + b.runs(), 1);
    let other_body = b.post("/orders").key("k").body("y").send().await;
    assert_eq!(other_body.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_duplicates_over_two_replicas_run_once() {
    let (a, b, _, _schema) = replicas();
    crate::support::app::burst(&[&a, &b], 200).await;
}

#[test]
fn a_replica_killed_mid_handler_leaves_the_key_locked_until_the_ttl() {
    let (a, b, clock, _schema) = replicas();
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    doomed.spawn(a.post("/gated").key("k").send());
    doomed.block_on(a.started.notified());
    drop(doomed); // replica A dies with the lock held

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let locked = b.post("/gated").key("k").send().await;
        assert_eq!(locked.status, StatusCode::CONFLICT);
        clock.advance(LOCK_TTL + Duration::from_secs(1));
        let retry = tokio::spawn(b.post("/gated").key("k").send());
        b.started.notified().await;
        b.gate.notify_one();
        let retry = retry.await.expect("retry");
        assert_eq!(retry.status, StatusCode::OK);
        assert_eq!((a.runs(), b.runs()), (1, 1));
    });
}
