//! Quotas: the ledgers on memory and on a real Redis (one suite for both),
//! and both guards holding a caller to its quota while its replays and
//! other callers go on.

use std::sync::Arc;
use std::time::Duration;

use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::quota::{
    MemoryQuotaLedger, Quota, QuotaLedger, QuotaLimits, QuotaSubject, RedisQuotaLedger, Taken,
};
use autumn_idempotency::submit::SubmitTokenLayer;
use autumn_idempotency::{IdempotencyStore, MemoryIdempotencyStore};
use axum::Router;
use axum::routing::post;
use http::StatusCode;
use tower::util::MapRequestLayer;

use crate::support::app::{Call, Fixture, RECORD_TTL};
use crate::support::redis::{require_redis, unique_prefix};

const HOLD: Duration = Duration::from_secs(60);

fn limits(max_records: u64, max_bytes: u64) -> QuotaLimits {
    QuotaLimits {
        max_records,
        max_bytes,
    }
}

fn memory(clock: &ManualClock) -> Arc<dyn QuotaLedger> {
    Arc::new(MemoryQuotaLedger::new(1_000).with_clock(Arc::new(clock.clone())))
}

fn redis(clock: &ManualClock) -> Arc<dyn QuotaLedger> {
    let url = require_redis();
    let connection = autumn_idempotency::RedisConnection::new(&url).expect("a Redis URL");
    Arc::new(
        RedisQuotaLedger::new(connection, &format!("{}:quota", unique_prefix()))
            .with_clock(Arc::new(clock.clone())),
    )
}

async fn take(ledger: &dyn QuotaLedger, subject: &str, item: &str, limits: QuotaLimits) -> Taken {
    ledger
        .take(subject, item, HOLD, limits)
        .await
        .expect("the ledger answers")
}

/// What every ledger must do, on a fresh ledger whose clock is `clock`.
async fn conformance(ledger: Arc<dyn QuotaLedger>, clock: ManualClock) {
    let ledger = &*ledger;
    let three = limits(3, 1_000);
    for item in ["a", "b", "c"] {
        assert_eq!(take(ledger, "alice", item, three).await, Taken::Counted);
    }
    // Counting an item again counts it once.
    assert_eq!(take(ledger, "alice", "c", three).await, Taken::Counted);
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        take(ledger, "alice", "d", three).await,
        Taken::Over {
            retry_after: Duration::from_secs(50)
        },
        "over, until the oldest count ends"
    );
    // Another caller has a quota of its own.
    assert_eq!(take(ledger, "bob", "d", three).await, Taken::Counted);
    // What is given back no longer counts.
    ledger.give_back("alice", "a").await.expect("given back");
    assert_eq!(take(ledger, "alice", "d", three).await, Taken::Counted);
    assert!(matches!(
        take(ledger, "alice", "e", three).await,
        Taken::Over { .. }
    ));
    // A record keeps its count for the record's TTL, not the lock's.
    ledger
        .settle("alice", "b", 10, Duration::from_secs(3_600))
        .await
        .expect("settled");
    clock.advance(Duration::from_secs(60));
    // "c" and "d" ended with their locks; "b" is recorded.
    assert_eq!(take(ledger, "alice", "e", three).await, Taken::Counted);
    assert_eq!(take(ledger, "alice", "f", three).await, Taken::Counted);
    assert!(matches!(
        take(ledger, "alice", "g", three).await,
        Taken::Over { .. }
    ));

    // Bytes: a caller whose records weigh its quota takes no new key.
    let bytes = limits(100, 100);
    assert_eq!(take(ledger, "carol", "x", bytes).await, Taken::Counted);
    ledger
        .settle("carol", "x", 60, Duration::from_secs(600))
        .await
        .expect("settled");
    assert_eq!(take(ledger, "carol", "y", bytes).await, Taken::Counted);
    ledger
        .settle("carol", "y", 40, Duration::from_secs(300))
        .await
        .expect("settled");
    assert_eq!(
        take(ledger, "carol", "z", bytes).await,
        Taken::Over {
            retry_after: Duration::from_secs(300)
        }
    );
    // Settling again replaces an item's weight, never adds to it.
    ledger
        .settle("carol", "y", 10, Duration::from_secs(300))
        .await
        .expect("settled");
    assert_eq!(take(ledger, "carol", "z", bytes).await, Taken::Counted);
    ledger.give_back("carol", "z").await.expect("given back");
    // A record that expires frees its bytes with it.
    clock.advance(Duration::from_secs(301));
    ledger
        .settle("carol", "x", 100, Duration::from_secs(600))
        .await
        .expect("settled");
    assert!(matches!(
        take(ledger, "carol", "z", bytes).await,
        Taken::Over { .. }
    ));
    clock.advance(Duration::from_secs(601));
    assert_eq!(take(ledger, "carol", "z", bytes).await, Taken::Counted);
}

#[tokio::test]
async fn the_memory_ledger_passes_the_conformance_suite() {
    let clock = ManualClock::new();
    conformance(memory(&clock), clock).await;
}

#[tokio::test]
async fn the_redis_ledger_passes_the_conformance_suite() {
    let clock = ManualClock::new();
    conformance(redis(&clock), clock).await;
}

#[tokio::test]
async fn a_full_memory_ledger_forgets_callers_whose_counts_ended_before_refusing() {
    let clock = ManualClock::new();
    // Room for one caller a shard.
    let ledger = MemoryQuotaLedger::new(16).with_clock(Arc::new(clock.clone()));
    let one = limits(1, 100);
    let mut refused = None;
    for n in 0..200 {
        let caller = format!("caller-{n}");
        match ledger.take(&caller, "k", HOLD, one).await {
            Ok(taken) => assert_eq!(taken, Taken::Counted),
            Err(error) => {
                refused = Some((caller, error));
                break;
            }
        }
    }
    let (caller, error) = refused.expect("a shard fills up");
    assert_eq!(error.kind(), autumn_idempotency::StoreErrorKind::Full);
    assert!(
        error.to_string().contains("idempotency.quota.max_callers"),
        "{error}"
    );
    clock.advance(HOLD);
    assert_eq!(
        ledger.take(&caller, "k", HOLD, one).await.expect("room"),
        Taken::Counted
    );
}

#[tokio::test]
async fn a_ledger_counts_concurrent_takes_of_one_caller_exactly() {
    let clock = ManualClock::new();
    for ledger in [memory(&clock), redis(&clock)] {
        let tasks: Vec<_> = (0..40)
            .map(|n| {
                let ledger = ledger.clone();
                tokio::spawn(async move {
                    ledger
                        .take("mallory", &format!("k{n}"), HOLD, limits(7, 1_000))
                        .await
                        .expect("the ledger answers")
                })
            })
            .collect();
        let mut counted = 0;
        for task in tasks {
            if task.await.expect("a take") == Taken::Counted {
                counted += 1;
            }
        }
        assert_eq!(counted, 7, "{}", ledger.backend());
    }
}

/// A fixture whose layer holds callers to `quota`, each request counted
/// against the caller its `x-caller` header names.
fn guarded(clock: &ManualClock, quota: Quota) -> Fixture {
    let clock = clock.clone();
    let store =
        Arc::new(MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())));
    let mut fixture = Fixture::with_store(store, clock, |layer| layer.with_quota(quota));
    fixture.app = fixture.app.layer(by_caller());
    fixture
}

fn by_caller()
-> MapRequestLayer<fn(http::Request<axum::body::Body>) -> http::Request<axum::body::Body>> {
    MapRequestLayer::new(|mut request: http::Request<axum::body::Body>| {
        let caller = request
            .headers()
            .get("x-caller")
            .map(|value| value.as_bytes().to_vec());
        if let Some(caller) = caller {
            request
                .extensions_mut()
                .insert(QuotaSubject::new("test", caller));
        }
        request
    })
}

async fn over_quota_a_caller_gets_429_for_new_keys_and_its_replays(
    ledger: fn(&ManualClock) -> Arc<dyn QuotaLedger>,
) {
    let clock = ManualClock::new();
    let app = guarded(&clock, Quota::new(ledger(&clock), limits(2, 1 << 20)));
    let post = |caller: &str, key: &str| app.post("/orders").header("x-caller", caller).key(key);
    for key in ["k1", "k2"] {
        assert_eq!(post("alice", key).send().await.status, StatusCode::CREATED);
    }
    let refused = post("alice", "k3").send().await;
    refused.assert_problem(StatusCode::TOO_MANY_REQUESTS, "idempotency_quota_exceeded");
    // Until the oldest record (one hour) expires.
    assert_eq!(refused.header("retry-after"), Some("3600"));
    assert_eq!(app.runs(), 2, "a refused key runs nothing");
    // Its own retries are replayed.
    let replay = post("alice", "k1").send().await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert!(replay.replayed());
    // Others keep being served.
    assert_eq!(post("bob", "k3").send().await.status, StatusCode::CREATED);
    // A refused key was not kept locked: once there is room, it runs.
    app.clock.advance(RECORD_TTL);
    assert_eq!(post("alice", "k3").send().await.status, StatusCode::CREATED);
    assert_eq!(app.runs(), 4);
}

#[tokio::test]
async fn over_quota_on_memory_a_caller_gets_429_for_new_keys_and_its_replays_go_on() {
    over_quota_a_caller_gets_429_for_new_keys_and_its_replays(memory).await;
}

#[tokio::test]
async fn over_quota_on_redis_a_caller_gets_429_for_new_keys_and_its_replays_go_on() {
    over_quota_a_caller_gets_429_for_new_keys_and_its_replays(redis).await;
}

#[tokio::test]
async fn what_records_nothing_gives_its_count_back() {
    let clock = ManualClock::new();
    let app = guarded(&clock, Quota::new(memory(&clock), limits(1, 1 << 20)));
    let post = |path: &str, key: &str| app.post(path).header("x-caller", "alice").key(key);
    // A panic (the app's first run panics) and a 422 record nothing, so
    // they use up nothing.
    assert_eq!(
        post("/panic", "p1").send().await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(
        post("/invalid", "i1").send().await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        post("/orders", "o1").send().await.status,
        StatusCode::CREATED
    );
    post("/orders", "o2")
        .send()
        .await
        .assert_problem(StatusCode::TOO_MANY_REQUESTS, "idempotency_quota_exceeded");
}

#[tokio::test]
async fn recorded_bytes_count_against_the_quota() {
    let clock = ManualClock::new();
    // One `/orders` record weighs a few hundred bytes.
    let app = guarded(&clock, Quota::new(memory(&clock), limits(100, 200)));
    let post = |key: &str| app.post("/orders").header("x-caller", "alice").key(key);
    assert_eq!(post("k1").send().await.status, StatusCode::CREATED);
    post("k2")
        .send()
        .await
        .assert_problem(StatusCode::TOO_MANY_REQUESTS, "idempotency_quota_exceeded");
}

#[tokio::test]
async fn requests_without_a_subject_count_against_no_quota() {
    let clock = ManualClock::new();
    let app = guarded(&clock, Quota::new(memory(&clock), limits(1, 1 << 20)));
    for key in ["k1", "k2", "k3"] {
        assert_eq!(
            app.post("/orders").key(key).send().await.status,
            StatusCode::CREATED
        );
    }
}

#[tokio::test]
async fn submitted_tokens_and_keys_count_in_one_quota() {
    let clock = ManualClock::new();
    let store: Arc<dyn IdempotencyStore> =
        Arc::new(MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())));
    let quota = Quota::new(memory(&clock), limits(2, 1 << 20));
    let forms = Router::new()
        .route("/forms", post(|| async { "saved" }))
        .layer(SubmitTokenLayer::new(store.clone()).with_quota(quota.clone()))
        .layer(by_caller());
    let keyed = Fixture::with_store(store, clock, |layer| layer.with_quota(quota));
    let keyed = keyed.app.layer(by_caller());
    let form = |token: &str| {
        Call::new(forms.clone(), "POST", "/forms")
            .header("x-caller", "alice")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("_submit_token={token}&name=a"))
    };
    assert_eq!(form("t1").send().await.status, StatusCode::OK);
    let order = Call::new(keyed, "POST", "/orders")
        .header("x-caller", "alice")
        .key("k1")
        .send()
        .await;
    assert_eq!(order.status, StatusCode::CREATED);
    let refused = form("t2").send().await;
    refused.assert_problem(StatusCode::TOO_MANY_REQUESTS, "submit_token_quota_exceeded");
    assert!(refused.header("retry-after").is_some());
    // A resubmission of the recorded form is still replayed.
    let again = form("t1").send().await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(
        again.header(autumn_idempotency::submit::SUBMIT_TOKEN_REPLAYED.as_str()),
        Some("true")
    );
}
