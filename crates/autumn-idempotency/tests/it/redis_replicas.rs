//! Two replicas of one app on one Redis: two `RedisIdempotencyStore`s (each
//! with its own connection) behind two routers and layers, sharing nothing
//! but the Redis key prefix and the clock.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use crate::support::app::{Answer, Fixture, LOCK_TTL};
use crate::support::redis::{require_redis, unique_prefix};
use autumn_idempotency::RedisIdempotencyStore;
use autumn_idempotency::clock::ManualClock;
use http::StatusCode;

/// Replicas A and B of one app.
fn replicas() -> (Fixture, Fixture) {
    let url = require_redis();
    let prefix = unique_prefix();
    let clock = ManualClock::new();
    let replica = || {
        let store = RedisIdempotencyStore::new(&url, &prefix)
            .expect("a valid Redis URL")
            .with_clock(Arc::new(clock.clone()));
        Fixture::with_store(Arc::new(store), clock.clone(), |layer| layer)
    };
    (replica(), replica())
}

/// The headers without what says how the key was used (replayed, or
/// honoured on a first run).
fn without_replay_marker(answer: &Answer) -> http::HeaderMap {
    let mut headers = answer.headers.clone();
    headers.remove("x-idempotent-replayed");
    headers.remove("x-idempotent-honoured");
    headers
}

#[tokio::test]
async fn a_retry_sent_to_the_other_replica_replays() {
    let (a, b) = replicas();
    let first = a.post("/orders").key("k").body("hello").send().await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());

    let retry = b.post("/orders").key("k").body("hello").send().await;
    assert!(retry.replayed(), "{}", retry.text());
    assert_eq!(retry.header("x-idempotent-replayed"), Some("true"));
    assert_eq!(retry.status, first.status);
    assert_eq!(retry.body, first.body);
    assert_eq!(first.header("x-idempotent-honoured"), Some("true"));
    assert_eq!(without_replay_marker(&retry), without_replay_marker(&first));
    assert_eq!((a.runs(), b.runs()), (1, 0));

    // The same key with another body is refused on either replica.
    let other = b.post("/orders").key("k").body("bye").send().await;
    other.assert_problem(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused");
    assert_eq!((a.runs(), b.runs()), (1, 0));
}

#[tokio::test]
async fn while_one_replica_runs_the_request_the_other_answers_409() {
    let (a, b) = replicas();
    let first = tokio::spawn(a.post("/gated").key("k").send());
    a.started.notified().await;
    let duplicate = b.post("/gated").key("k").send().await;
    duplicate.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");
    assert_eq!(duplicate.header("retry-after"), Some("1"));

    a.gate.notify_one();
    assert_eq!(first.await.expect("first").text(), "gated 1");
    let retry = b.post("/gated").key("k").send().await;
    assert!(retry.replayed());
    assert_eq!(retry.text(), "gated 1");
    assert_eq!((a.runs(), b.runs()), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_duplicates_over_two_replicas_run_the_handler_once() {
    let (a, b) = replicas();
    crate::support::app::burst(&[&a, &b], 200).await;
}

#[test]
fn a_replica_killed_mid_handler_leaves_the_key_locked_until_the_in_flight_ttl() {
    let (a, b) = replicas();
    // Replica A "crashes": its runtime is dropped while its handler runs,
    // after it took the lock in Redis.
    let crashed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    crashed.spawn(a.post("/gated").key("k").send());
    crashed.block_on(a.started.notified());
    drop(crashed);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let retry = b.post("/gated").key("k").send().await;
        retry.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");
        assert_eq!(retry.header("retry-after"), Some("1"));

        b.clock.advance(LOCK_TTL - Duration::from_secs(1));
        let still = b.post("/gated").key("k").send().await;
        assert_eq!(still.status, StatusCode::CONFLICT, "lock still live");
        assert_eq!(b.runs(), 0);

        b.clock.advance(Duration::from_secs(2));
        let released = tokio::spawn(b.post("/gated").key("k").send());
        b.started.notified().await;
        b.gate.notify_one();
        let released = released.await.expect("retry");
        assert_eq!(released.status, StatusCode::OK);
        assert_eq!(released.text(), "gated 1", "replica B's first run");
        assert!(b.post("/gated").key("k").send().await.replayed());
    });
    assert_eq!((a.runs(), b.runs()), (1, 1));
}
