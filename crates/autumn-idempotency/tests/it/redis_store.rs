//! The Redis store against a real Redis: the conformance suite, the command
//! count as the server sees it, keys that expire in Redis itself, and what
//! happens while Redis is down.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use crate::support::app::{Fixture, LOCK_TTL, RECORD_TTL};
use crate::support::redis::{
    Monitor, RedisServer, client_commands, command_name, keys_under, plain_connection,
    require_redis, unique_prefix,
};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{
    Claim, IdempotencyRecord, IdempotencyStore, RedisIdempotencyStore, StoreOperation,
};
use http::{HeaderValue, StatusCode};

fn store(url: &str, prefix: &str, clock: &ManualClock) -> Arc<RedisIdempotencyStore> {
    Arc::new(
        RedisIdempotencyStore::new(url, prefix)
            .expect("a valid Redis URL")
            .with_clock(Arc::new(clock.clone())),
    )
}

fn fixture(url: &str, prefix: &str) -> Fixture {
    let clock = ManualClock::new();
    Fixture::with_store(store(url, prefix, &clock), clock, |layer| layer)
}

/// Guards a call that must fail fast: a regression fails instead of hanging.
async fn fast<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not answer within 10 s"))
}

async fn pttl(url: &str, key: &str) -> i64 {
    ::redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut plain_connection(url).await)
        .await
        .expect("PTTL")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_passes_the_conformance_suite() {
    let url = require_redis();
    crate::support::conformance::run_all_shared(|clocks| {
        let prefix = unique_prefix();
        clocks
            .iter()
            .map(|clock| store(&url, &prefix, clock) as Arc<dyn IdempotencyStore>)
            .collect()
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn redis_store_passes_the_conformance_suite_on_a_current_thread_runtime() {
    let url = require_redis();
    crate::support::conformance::run_all_shared(|clocks| {
        let prefix = unique_prefix();
        clocks
            .iter()
            .map(|clock| store(&url, &prefix, clock) as Arc<dyn IdempotencyStore>)
            .collect()
    })
    .await;
}

#[test]
fn building_the_store_does_not_connect_and_a_bad_url_is_named_without_its_password() {
    // Nothing listens on port 1; building needs no runtime and no Redis.
    let store = RedisIdempotencyStore::new("redis://127.0.0.1:1", "p").expect("not connected");
    assert!(format!("{store:?}").contains("127.0.0.1:1"));

    let error = RedisIdempotencyStore::new("http://admin:hunter2@localhost:6379", "p")
        .expect_err("not a Redis URL");
    let message = error.to_string();
    assert!(
        message.contains("http://admin:***@localhost:6379"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");

    let debug = format!(
        "{:?}",
        RedisIdempotencyStore::new("redis://:hunter2@127.0.0.1:6379", "p").expect("valid")
    );
    assert!(!debug.contains("hunter2"), "{debug}");
}

#[tokio::test]
async fn ping_answers_and_an_unreachable_redis_fails_fast() {
    let url = require_redis();
    let store = RedisIdempotencyStore::new(&url, &unique_prefix()).expect("valid URL");
    store.ping().await.expect("PONG");

    let port = autumn_testkit::free_port(); // closed again: nothing listens there
    let down =
        RedisIdempotencyStore::new(&format!("redis://127.0.0.1:{port}"), "p").expect("valid URL");
    let error = fast("ping", down.ping())
        .await
        .expect_err("nothing listens");
    assert!(
        error.to_string().contains(&format!("127.0.0.1:{port}")),
        "names the Redis: {error}"
    );
    let error = fast("get", down.get("k")).await.expect_err("no Redis");
    assert_eq!(error.operation(), Some(StoreOperation::Get));
    let error = fast("claim", down.claim("k", "o", LOCK_TTL))
        .await
        .expect_err("no Redis");
    assert_eq!(error.operation(), Some(StoreOperation::Get), "503, not 409");
    let error = fast("try_lock", down.try_lock("k", "o", LOCK_TTL))
        .await
        .expect_err("no Redis");
    assert_eq!(error.operation(), Some(StoreOperation::TryLock));
    let record = IdempotencyRecord::new(StatusCode::OK, [], "x");
    let error = fast("finish", down.finish("k", "o", record, vec![1], RECORD_TTL))
        .await
        .expect_err("no Redis");
    assert_eq!(error.operation(), Some(StoreOperation::Set));
}

#[tokio::test]
async fn keys_expire_in_redis_itself() {
    let url = require_redis();
    let prefix = unique_prefix();
    let clock = ManualClock::new();
    let store = store(&url, &prefix, &clock);
    let key = format!("{prefix}:k");

    assert!(store.try_lock("k", "a", LOCK_TTL).await.expect("lock"));
    let ttl = pttl(&url, &key).await;
    assert!(ttl > 0 && ttl <= 60_000, "a lock lives for its TTL: {ttl}");

    let record = IdempotencyRecord::new(StatusCode::CREATED, [], "done");
    assert!(
        store
            .finish("k", "a", record, vec![7; 32], RECORD_TTL)
            .await
            .expect("finish")
    );
    let ttl = pttl(&url, &key).await;
    assert!(
        ttl > 60_000 && ttl <= 3_600_000,
        "a record lives for its TTL: {ttl}"
    );

    // A lock released with nothing recorded leaves no key behind.
    assert!(store.try_lock("gone", "a", LOCK_TTL).await.expect("lock"));
    store.unlock("gone", "a").await.expect("unlock");
    assert_eq!(pttl(&url, &format!("{prefix}:gone")).await, -2, "no key");

    // A renewal moves Redis's own expiry too.
    assert!(
        store
            .try_lock("renewed", "a", LOCK_TTL)
            .await
            .expect("lock")
    );
    assert!(
        store
            .renew_lock("renewed", "a", Duration::from_secs(600))
            .await
            .expect("renew")
    );
    let ttl = pttl(&url, &format!("{prefix}:renewed")).await;
    assert!(ttl > 60_000 && ttl <= 600_000, "renewed: {ttl}");
}

#[tokio::test]
async fn a_request_through_the_layer_leaves_one_key_that_redis_expires() {
    let url = require_redis();
    let prefix = unique_prefix();
    let f = fixture(&url, &prefix);
    let first = f.post("/orders").key("my-order-42").body("x").send().await;
    assert_eq!(first.status, StatusCode::CREATED);

    let keys = keys_under(&url, &prefix).await;
    assert_eq!(keys.len(), 1, "one Redis key per storage key: {keys:?}");
    assert!(
        !keys[0].contains("my-order-42"),
        "the raw Idempotency-Key is never a Redis key: {}",
        keys[0]
    );
    let ttl = pttl(&url, &keys[0]).await;
    assert!(ttl > 0 && ttl <= 3_600_000, "PTTL {ttl}");
}

#[tokio::test]
async fn binary_records_round_trip_between_store_instances() {
    let url = require_redis();
    let prefix = unique_prefix();
    let clock = ManualClock::new();
    let (writer, reader) = (store(&url, &prefix, &clock), store(&url, &prefix, &clock));
    let body: Vec<u8> = (0..=255u8).chain(*b"\r\n\0\"'\\").collect();
    let record = IdempotencyRecord::new(
        StatusCode::CREATED,
        [
            (
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (http::header::SET_COOKIE, HeaderValue::from_static("a=1")),
            (http::header::SET_COOKIE, HeaderValue::from_static("b=2")),
        ],
        body,
    );
    let hash: Vec<u8> = (0..32).map(|i| 255 - i).collect();
    assert_eq!(
        writer.claim("k", "a", LOCK_TTL).await.expect("claim"),
        Claim::Acquired
    );
    assert!(
        writer
            .finish("k", "a", record.clone(), hash.clone(), RECORD_TTL)
            .await
            .expect("finish")
    );
    assert_eq!(
        reader.claim("k", "b", LOCK_TTL).await.expect("claim"),
        Claim::Completed {
            record: record.clone(),
            fingerprint: hash.clone()
        }
    );
    let entry = reader.get("k").await.expect("get").expect("entry");
    assert_eq!(entry.record(), Some(&record));
    assert_eq!(entry.fingerprint(), Some(&hash[..]));
}

#[tokio::test]
async fn a_first_time_request_costs_two_commands_and_a_replay_one() {
    // A server of the test's own, so every command it sees is ours.
    let server = RedisServer::new();
    let prefix = unique_prefix();
    let f = fixture(&server.url(), &prefix);
    let mut monitor = Monitor::connect(&server.url()).await;

    // Warm up: connect, and load the scripts once.
    let warm_up = f.post("/orders").key("warm-up").send().await;
    assert_eq!(warm_up.status, StatusCode::CREATED);
    let lines = monitor.mark().await;
    let loads = client_commands(&lines, "")
        .into_iter()
        .filter(|line| command_name(line) == "SCRIPT")
        .count();
    // claim, set, try_lock, unlock, renew_lock, and the read of get/inspect.
    assert_eq!(loads, 6, "each script loaded once: {lines:#?}");

    let first = f.post("/orders").key("k").body("x").send().await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    let lines = monitor.mark().await;
    let on_key = client_commands(&lines, &prefix);
    assert_eq!(on_key.len(), 2, "claim + finish: {lines:#?}");
    assert_eq!(
        client_commands(&lines, "").len(),
        2,
        "nothing else: {lines:#?}"
    );
    assert!(on_key.iter().all(|line| command_name(line) == "EVALSHA"));

    let replay = f.post("/orders").key("k").body("x").send().await;
    assert!(replay.replayed());
    let lines = monitor.mark().await;
    assert_eq!(
        client_commands(&lines, &prefix).len(),
        1,
        "claim: {lines:#?}"
    );
    assert_eq!(
        client_commands(&lines, "").len(),
        1,
        "nothing else: {lines:#?}"
    );
    assert_eq!(f.runs(), 2, "warm-up + first");

    // Redis forgets its scripts (as on a restart): the next calls load them
    // again by themselves, then it is one command per operation again.
    let mut plain = plain_connection(&server.url()).await;
    let () = ::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut plain)
        .await
        .expect("SCRIPT FLUSH");
    monitor.mark().await;
    let reloaded = f.post("/orders").key("after-flush").send().await;
    assert_eq!(reloaded.status, StatusCode::CREATED);
    let lines = monitor.mark().await;
    let names: Vec<&str> = client_commands(&lines, "")
        .into_iter()
        .map(command_name)
        .collect();
    assert_eq!(
        names,
        [
            "EVALSHA", "SCRIPT", "EVALSHA", "EVALSHA", "SCRIPT", "EVALSHA"
        ],
        "NOSCRIPT, load, run, for claim then finish: {lines:#?}"
    );
    f.post("/orders").key("steady").send().await;
    let lines = monitor.mark().await;
    assert_eq!(client_commands(&lines, "").len(), 2, "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_requests_get_503_and_service_resumes_when_it_returns() {
    let mut server = RedisServer::new();
    let f = fixture(&server.url(), &unique_prefix());

    // Down before the first use: the store never connected.
    server.stop();
    for _ in 0..2 {
        let answer = fast("request", f.post("/orders").key("k").send()).await;
        answer.assert_problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "idempotency_store_unavailable",
        );
    }
    assert_eq!(f.runs(), 0, "the handler never ran");
    server.start();
    let answer = fast("request", f.post("/orders").key("k").send()).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
    assert!(f.post("/orders").key("k").send().await.replayed());
    assert_eq!(f.runs(), 1);

    // Down while connected.
    server.stop();
    for key in ["k", "k2", "k2"] {
        let answer = fast("request", f.post("/orders").key(key).send()).await;
        answer.assert_problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "idempotency_store_unavailable",
        );
    }
    assert_eq!(f.runs(), 1, "no run while the store cannot answer");
    // Not a wait for something to happen: it makes the harder case certain,
    // the connection's background reconnect having given up before Redis is
    // back, so the first request after the restart meets that failure.
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.start();
    let answer = fast("request", f.post("/orders").key("k2").send()).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
    assert!(f.post("/orders").key("k2").send().await.replayed());
    assert_eq!(f.runs(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_dying_mid_handler_keeps_the_response_and_the_lock_it_kept() {
    // Redis writes every command to disk before answering: what it held
    // when killed is still there after the restart.
    let mut server = RedisServer::persistent();
    let f = fixture(&server.url(), &unique_prefix());

    let first = tokio::spawn(f.post("/gated").key("k").send());
    f.started.notified().await; // claimed: the lock is in Redis
    server.stop();
    f.gate.notify_one();
    let first = fast("the first request", first)
        .await
        .expect("first request");
    assert_eq!(first.status, StatusCode::OK, "the handler's answer is sent");
    assert_eq!(first.text(), "gated 1");

    let retry = fast("retry", f.post("/gated").key("k").send()).await;
    retry.assert_problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "idempotency_store_unavailable",
    );

    server.start();
    let retry = fast("retry", f.post("/gated").key("k").send()).await;
    retry.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");
    assert_eq!(retry.header("retry-after"), Some("1"));
    f.clock.advance(LOCK_TTL - Duration::from_secs(1));
    let retry = fast("retry", f.post("/gated").key("k").send()).await;
    assert_eq!(retry.status, StatusCode::CONFLICT, "the lock still lives");
    assert_eq!(f.runs(), 1, "no second run while the lock lives");

    f.clock.advance(Duration::from_secs(2));
    let released = tokio::spawn(f.post("/gated").key("k").send());
    f.started.notified().await;
    f.gate.notify_one();
    let released = fast("the retry", released).await.expect("retry");
    assert_eq!(released.status, StatusCode::OK);
    assert_eq!(
        released.text(),
        "gated 2",
        "runs again once the lock lapsed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_during_the_handler_does_not_lose_the_record() {
    // Persistent, so the lock taken before the restart is still there after.
    let mut server = RedisServer::persistent();
    let f = fixture(&server.url(), &unique_prefix());

    let first = tokio::spawn(f.post("/gated").key("k").send());
    f.started.notified().await; // claimed over the connection made now
    // Restarted while the handler runs: the store's connection is now stale,
    // and the record write is the first command sent over it.
    server.stop();
    server.start();
    f.gate.notify_one();
    let first = fast("the first request", first)
        .await
        .expect("first request");
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.text(), "gated 1");

    // The write was sent again over a fresh connection: the retry replays
    // instead of getting 409 until the lock lapses and then running again.
    let retry = fast("retry", f.post("/gated").key("k").send()).await;
    assert!(retry.replayed(), "{} {}", retry.status, retry.text());
    assert_eq!(retry.text(), "gated 1");
    assert_eq!(f.runs(), 1);
}

/// Sends six keyed requests at once and waits (at most 30 s) for each to
/// be refused 503 because the store cannot be reached; returns how long
/// that took.
async fn six_concurrent_requests_get_503(f: &Fixture) -> Duration {
    let started = std::time::Instant::now();
    let requests: Vec<_> = (0..6)
        .map(|i| tokio::spawn(f.post("/orders").key(&format!("k{i}")).send()))
        .collect();
    for request in requests {
        let answer = tokio::time::timeout(Duration::from_secs(30), request)
            .await
            .expect("an answer within 30 s")
            .expect("the request");
        answer.assert_problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "idempotency_store_unavailable",
        );
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_black_holed_concurrent_first_requests_all_get_503_within_the_connect_timeout() {
    // A loopback port that takes connections and never answers: a Redis
    // whose packets vanish. Nothing else is ever dialled.
    let black_hole = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = black_hole.local_addr().expect("its address").port();
    let f = fixture(&format!("redis://127.0.0.1:{port}"), &unique_prefix());

    // The documented connect timeout is 2 s. One connection attempt at a
    // time, each spending the whole timeout, would take 6 x 2 s.
    let elapsed = six_concurrent_requests_get_503(&f).await;
    assert!(
        elapsed < Duration::from_secs(4),
        "every request answered within twice the 2 s connect timeout, took {elapsed:?}"
    );
    assert_eq!(f.runs(), 0);
    drop(black_hole);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_black_holed_after_it_was_reached_requests_get_503_within_the_connect_timeout() {
    let mut server = RedisServer::new();
    let f = fixture(&server.url(), &unique_prefix());
    let answer = fast("request", f.post("/orders").key("before").send()).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());

    // Redis gone, and its loopback port now takes connections and never
    // answers: every reconnection attempt meets the connect timeout.
    server.stop();
    let black_hole = std::net::TcpListener::bind(("127.0.0.1", server.port()))
        .expect("Redis's port, free again");
    let elapsed = six_concurrent_requests_get_503(&f).await;
    // One reconnection attempt of 2 s, shared; retrying it inside the
    // connection manager would double that.
    assert!(
        elapsed < Duration::from_millis(3_500),
        "every request answered within the 2 s connect timeout and some slack, took {elapsed:?}"
    );
    assert_eq!(f.runs(), 1);
    drop(black_hole);
}
