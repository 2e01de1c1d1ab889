//! `in_flight_wait`: a duplicate that arrives while the first request with
//! its key runs waits for it and gets its response, on every store; past the
//! wait it gets 409 with `Retry-After`. Each test counts the claims a waiter
//! makes, the figure that shows waiting is no polling storm.

use std::sync::Arc;
use std::time::Duration;

use crate::support::app::{Fixture, RECORD_TTL};
use crate::support::counting::CountingStore;
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{IdempotencyStore, MemoryIdempotencyStore};
use http::StatusCode;

/// Long enough never to end by itself in a test: only the first run's end
/// (or a test moving the clock) ends a wait. Shorter than the lock's TTL, so
/// moving the clock past the wait does not expire the first run's lock.
const WAIT: Duration = Duration::from_secs(30);

/// A fixture over `store`, counted, whose duplicates wait up to [`WAIT`].
fn waiting<S: IdempotencyStore>(store: S, clock: &ManualClock) -> (Fixture, Arc<CountingStore<S>>) {
    let counting = Arc::new(CountingStore::new(store));
    let fixture = Fixture::with_store(counting.clone(), clock.clone(), |layer| {
        layer.with_in_flight_wait(WAIT)
    });
    (fixture, counting)
}

/// Waits (without a fixed sleep) until `store` has seen `calls` calls.
async fn until_calls<S>(store: &CountingStore<S>, calls: usize) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while store.calls() < calls {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the store was called");
}

/// The first request runs `/gated`; a duplicate arrives while it runs and
/// waits; the first is held `hold` longer, then finishes. Returns the claims
/// the duplicate made.
async fn duplicate_gets_the_first_response<S: IdempotencyStore>(
    store: S,
    clock: ManualClock,
    hold: Duration,
) -> usize {
    let (fixture, counting) = waiting(store, &clock);
    let first = tokio::spawn(fixture.post("/gated").key("k").send());
    fixture.started.notified().await;
    assert_eq!(counting.calls(), 1, "the first request claimed once");
    let duplicate = tokio::spawn(fixture.post("/gated").key("k").send());
    // The duplicate's first claim found the key in flight.
    until_calls(&counting, 2).await;
    tokio::time::sleep(hold).await;
    assert!(!duplicate.is_finished(), "the duplicate waits");
    fixture.gate.notify_one();
    let first = first.await.expect("first");
    let duplicate = duplicate.await.expect("duplicate");
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.text(), "gated 1");
    assert_eq!(duplicate.status, StatusCode::OK, "{}", duplicate.text());
    assert_eq!(duplicate.text(), "gated 1", "the first run's response");
    assert!(duplicate.replayed(), "marked as a replay");
    assert_eq!(fixture.runs(), 1, "the handler ran once");
    // The first made a claim and a finish; everything else is the waiter's.
    counting.calls() - 2
}

/// Moving the clock past the wait ends it with 409 and `Retry-After`; the
/// first run goes on and records, and a later retry replays it.
async fn past_the_wait_is_409<S: IdempotencyStore>(store: S, clock: ManualClock) {
    let (fixture, counting) = waiting(store, &clock);
    let first = tokio::spawn(fixture.post("/gated").key("k").send());
    fixture.started.notified().await;
    let duplicate = tokio::spawn(fixture.post("/gated").key("k").send());
    until_calls(&counting, 2).await;
    clock.advance(WAIT + Duration::from_secs(1));
    let refused = tokio::time::timeout(Duration::from_secs(10), duplicate)
        .await
        .expect("the wait ended when the clock moved")
        .expect("duplicate");
    refused.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");
    assert_eq!(refused.header("retry-after"), Some("1"));
    fixture.gate.notify_one();
    assert_eq!(first.await.expect("first").status, StatusCode::OK);
    let retry = fixture.post("/gated").key("k").send().await;
    assert!(retry.replayed(), "{}", retry.text());
    assert_eq!(fixture.runs(), 1, "the handler ran once");
}

/// Without a wait (the default), a duplicate gets 409 at once: one claim.
#[tokio::test]
async fn without_a_wait_a_duplicate_is_refused_at_once() {
    let clock = ManualClock::new();
    let store = MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone()));
    let counting = Arc::new(CountingStore::new(store));
    let fixture = Fixture::with_store(counting.clone(), clock, |layer| layer);
    let first = tokio::spawn(fixture.post("/gated").key("k").send());
    fixture.started.notified().await;
    let duplicate = fixture.post("/gated").key("k").send().await;
    duplicate.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");
    assert_eq!(counting.calls(), 2, "one claim each");
    fixture.gate.notify_one();
    assert_eq!(first.await.expect("first").status, StatusCode::OK);
}

/// When the request holding the key releases it without a record (its run
/// failed), the waiter runs the handler itself: there was nothing to replay.
#[tokio::test]
async fn a_waiter_runs_when_the_holder_releases_the_key() {
    let clock = ManualClock::new();
    let store = MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone()));
    let (fixture, counting) = waiting(store, &clock);
    let storage_key = autumn_idempotency::key::storage_key(
        "POST",
        "/orders",
        autumn_idempotency::IdempotencyScope::default().as_bytes(),
        "k",
    );
    let holder = "a-run-that-will-fail";
    assert!(
        counting
            .try_lock(&storage_key, holder, crate::support::app::LOCK_TTL)
            .await
            .expect("lock")
    );
    let duplicate = tokio::spawn(fixture.post("/orders").key("k").body("x").send());
    until_calls(&counting, 2).await;
    assert_eq!(fixture.runs(), 0, "the duplicate waits");
    counting.unlock(&storage_key, holder).await.expect("unlock");
    let ran = duplicate.await.expect("duplicate");
    assert_eq!(ran.status, StatusCode::CREATED, "{}", ran.text());
    assert!(!ran.replayed());
    assert_eq!(fixture.runs(), 1);
}

mod memory {
    use super::*;

    fn store(clock: &ManualClock) -> MemoryIdempotencyStore {
        MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone()))
    }

    /// The memory store wakes a waiter when the lock goes: one claim to
    /// find the key in flight, one to get the record, however long it waits.
    #[tokio::test]
    async fn a_duplicate_waits_and_replays_woken_by_the_release() {
        let clock = ManualClock::new();
        let claims =
            duplicate_gets_the_first_response(store(&clock), clock, Duration::from_millis(600))
                .await;
        assert!(claims <= 3, "{claims} claims for a 600 ms wait");
    }

    #[tokio::test]
    async fn past_the_wait_a_duplicate_gets_409() {
        let clock = ManualClock::new();
        past_the_wait_is_409(store(&clock), clock).await;
    }
}

mod redis {
    use super::*;
    use crate::support::redis::{require_redis, unique_prefix};
    use autumn_idempotency::RedisIdempotencyStore;

    fn store(clock: &ManualClock) -> RedisIdempotencyStore {
        RedisIdempotencyStore::new(&require_redis(), &unique_prefix())
            .expect("a valid Redis URL")
            .with_clock(Arc::new(clock.clone()))
    }

    /// Redis waiters back off (10 ms doubling to 250 ms): for a 600 ms wait,
    /// 8 claims measured, where a 25 ms poll would make 24; the bound leaves
    /// room for a loaded machine stretching the wait.
    #[tokio::test]
    async fn a_duplicate_waits_and_replays_with_backoff() {
        let clock = ManualClock::new();
        let claims =
            duplicate_gets_the_first_response(store(&clock), clock, Duration::from_millis(600))
                .await;
        assert!(
            (2..=12).contains(&claims),
            "{claims} claims for a 600 ms wait"
        );
    }

    #[tokio::test]
    async fn past_the_wait_a_duplicate_gets_409() {
        let clock = ManualClock::new();
        past_the_wait_is_409(store(&clock), clock).await;
    }
}

mod postgres {
    use super::*;
    use crate::support::database::fresh_postgres_schema;
    use autumn_idempotency::DbIdempotencyStore;

    fn store(clock: &ManualClock) -> DbIdempotencyStore {
        // The store outlives this function: the schema stays, for a later
        // run to drop.
        crate::support::database::store(&fresh_postgres_schema().keep(), clock.clone())
    }

    /// PostgreSQL waiters back off as Redis ones do.
    #[tokio::test]
    async fn a_duplicate_waits_and_replays_with_backoff() {
        let clock = ManualClock::new();
        let claims =
            duplicate_gets_the_first_response(store(&clock), clock, Duration::from_millis(600))
                .await;
        assert!(
            (2..=12).contains(&claims),
            "{claims} claims for a 600 ms wait"
        );
    }

    #[tokio::test]
    async fn past_the_wait_a_duplicate_gets_409() {
        let clock = ManualClock::new();
        past_the_wait_is_409(store(&clock), clock).await;
    }
}
