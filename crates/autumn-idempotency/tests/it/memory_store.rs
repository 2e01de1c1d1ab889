//! The memory store against the store conformance suite, plus what only the
//! memory store promises: it forgets expired entries by itself, and it is
//! bounded.

use std::sync::Arc;
use std::time::Duration;

use crate::support::app::{Fixture, LOCK_TTL, RECORD_TTL};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{
    Claim, IdempotencyRecord, IdempotencyStore, MemoryIdempotencyStore, StoreErrorKind,
    StoreOperation, StoreSize,
};
use http::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_passes_the_conformance_suite() {
    crate::support::conformance::run_all(|clock| {
        Arc::new(
            MemoryIdempotencyStore::new(Duration::from_secs(24 * 3600)).with_clock(Arc::new(clock)),
        )
    })
    .await;
}

#[tokio::test]
async fn a_record_lives_for_the_ttl_set_asks_for_even_past_the_stores_own() {
    let clock = ManualClock::new();
    let store =
        MemoryIdempotencyStore::new(Duration::from_secs(10)).with_clock(Arc::new(clock.clone()));
    let record = IdempotencyRecord::new(StatusCode::OK, [], "x");
    assert!(
        store
            .set("k", "o", record, vec![1], Duration::from_secs(3600))
            .await
            .expect("set")
    );
    // A route's own TTL, longer than the store's usual one, is honoured.
    clock.advance(Duration::from_secs(11));
    assert!(store.get("k").await.expect("get").is_some());
    clock.advance(Duration::from_secs(3600));
    assert_eq!(store.get("k").await.expect("get"), None);
}

#[tokio::test]
async fn memory_stays_flat_under_a_stream_of_unique_keys() {
    let clock = ManualClock::new();
    let ttl = Duration::from_secs(60);
    let store = MemoryIdempotencyStore::new(ttl).with_clock(Arc::new(clock.clone()));
    let record = IdempotencyRecord::new(StatusCode::CREATED, [], "created");
    let mut high_water = 0;
    for minute in 0..10 {
        for i in 0..1_000 {
            let key = format!("m{minute}-{i}");
            assert!(store.try_lock(&key, "o", ttl).await.expect("lock"));
            assert!(
                store
                    .finish(&key, "o", record.clone(), vec![0; 32], ttl)
                    .await
                    .expect("finish")
            );
        }
        high_water = high_water.max(store.len());
        clock.advance(ttl + Duration::from_secs(1));
    }
    // Each minute's keys expire before the next minute's arrive: the store
    // never holds much more than one minute's worth.
    assert!(high_water <= 2_000, "store grew to {high_water} entries");
    // One write after everything expired sweeps the shard it lands in.
    assert!(store.try_lock("last", "o", ttl).await.expect("lock"));
    assert!(
        store.len() < 1_000,
        "expired entries were not swept: {}",
        store.len()
    );
}

fn capped(clock: &ManualClock, max_entries: usize) -> MemoryIdempotencyStore {
    MemoryIdempotencyStore::new(RECORD_TTL)
        .with_clock(Arc::new(clock.clone()))
        .with_max_entries(max_entries)
}

#[tokio::test]
async fn a_full_store_answers_503_with_retry_after_and_keeps_every_live_record() {
    let clock = ManualClock::new();
    let store = Arc::new(capped(&clock, 4));
    let f = Fixture::with_store(store.clone(), clock.clone(), |layer| layer);
    for i in 0..4 {
        let answer = f.post("/orders").key(&format!("k{i}")).send().await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
    }

    let refused = f.post("/orders").key("k4").send().await;
    refused.assert_problem(StatusCode::SERVICE_UNAVAILABLE, "idempotency_store_full");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(f.runs(), 4, "a refused key never runs the handler");
    // Nothing live was evicted to make room: every first response replays.
    for i in 0..4 {
        let retry = f.post("/orders").key(&format!("k{i}")).send().await;
        assert!(retry.replayed(), "k{i}: {} {}", retry.status, retry.text());
    }
    assert_eq!(f.runs(), 4);
    assert_eq!(store.len(), 4);

    // Once the records expire they are dead: swept to make room.
    clock.advance(RECORD_TTL + Duration::from_secs(1));
    let answer = f.post("/orders").key("k4").send().await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
    assert_eq!(f.runs(), 5);
    assert!(store.len() <= 4, "the cap holds: {}", store.len());
}

#[tokio::test]
async fn live_locks_are_never_evicted_to_make_room() {
    let clock = ManualClock::new();
    let store = capped(&clock, 2);
    assert_eq!(
        store.claim("a", "o1", LOCK_TTL).await.expect("claim"),
        Claim::Acquired
    );
    assert_eq!(
        store.claim("b", "o2", LOCK_TTL).await.expect("claim"),
        Claim::Acquired
    );

    let error = store.claim("c", "o3", LOCK_TTL).await.expect_err("full");
    assert_eq!(error.kind(), StoreErrorKind::Full);
    assert_eq!(error.operation(), Some(StoreOperation::Get));
    let error = store.try_lock("c", "o3", LOCK_TTL).await.expect_err("full");
    assert_eq!(error.kind(), StoreErrorKind::Full);
    // The locks held are still held, and their owners still finish.
    assert_eq!(
        store.claim("a", "o9", LOCK_TTL).await.expect("claim"),
        Claim::InFlight
    );
    let record = IdempotencyRecord::new(StatusCode::OK, [], "done");
    assert!(
        store
            .finish("b", "o2", record, vec![2], RECORD_TTL)
            .await
            .expect("finish")
    );

    // A released lock frees its entry at once.
    store.unlock("a", "o1").await.expect("unlock");
    assert_eq!(
        store.claim("c", "o3", LOCK_TTL).await.expect("claim"),
        Claim::Acquired
    );
    assert!(
        store.claim("d", "o4", LOCK_TTL).await.is_err(),
        "full again"
    );

    // A lapsed lock is dead: swept to make room.
    clock.advance(LOCK_TTL + Duration::from_secs(1));
    assert_eq!(
        store.claim("d", "o4", LOCK_TTL).await.expect("claim"),
        Claim::Acquired
    );
    assert!(
        matches!(
            store.claim("b", "o5", LOCK_TTL).await.expect("claim"),
            Claim::Completed { .. }
        ),
        "b's record outlives the sweep"
    );
}

#[tokio::test]
async fn past_max_bytes_new_keys_are_refused_but_held_locks_still_record() {
    let clock = ManualClock::new();
    let store = MemoryIdempotencyStore::new(RECORD_TTL)
        .with_clock(Arc::new(clock.clone()))
        .with_max_bytes(100);
    assert_eq!(
        store.claim("a", "o1", LOCK_TTL).await.expect("claim"),
        Claim::Acquired
    );
    assert_eq!(
        store.claim("b", "o2", LOCK_TTL).await.expect("claim"),
        Claim::Acquired
    );
    let big = IdempotencyRecord::new(StatusCode::OK, [], vec![b'x'; 200]);
    assert!(
        store
            .finish("a", "o1", big.clone(), vec![1; 32], RECORD_TTL)
            .await
            .expect("finish")
    );
    // Past the limit, but b holds its lock: its response is kept.
    assert!(
        store
            .finish("b", "o2", big, vec![2; 32], RECORD_TTL)
            .await
            .expect("finish")
    );
    assert!(store.record_bytes() > 400, "{}", store.record_bytes());

    let error = store.claim("c", "o3", LOCK_TTL).await.expect_err("full");
    assert_eq!(error.kind(), StoreErrorKind::Full);
    assert!(
        matches!(
            store.claim("a", "o4", LOCK_TTL).await.expect("replay"),
            Claim::Completed { .. }
        ),
        "a full store still replays"
    );

    clock.advance(RECORD_TTL + Duration::from_secs(1));
    assert_eq!(
        store.claim("c", "o3", LOCK_TTL).await.expect("claim"),
        Claim::Acquired
    );
    assert_eq!(store.record_bytes(), 0, "the expired records were swept");
}

#[tokio::test]
async fn the_store_reports_its_size() {
    let clock = ManualClock::new();
    let store = capped(&clock, 10).with_max_bytes(4096);
    let empty = store.size().expect("the memory store reports its size");
    assert_eq!(
        empty,
        StoreSize {
            entries: 0,
            bytes: 0,
            max_entries: Some(10),
            max_bytes: Some(4096)
        }
    );
    let record = IdempotencyRecord::new(StatusCode::OK, [], "twelve bytes");
    for key in ["a", "b"] {
        assert_eq!(
            store.claim(key, key, LOCK_TTL).await.expect("claim"),
            Claim::Acquired
        );
    }
    assert_eq!(store.size().expect("size").entries, 2);
    assert_eq!(store.size().expect("size").bytes, 0, "locks hold no record");
    assert!(
        store
            .finish("a", "a", record, vec![0; 32], RECORD_TTL)
            .await
            .expect("finish")
    );
    let size = store.size().expect("size");
    assert_eq!(size.entries, 2);
    assert!(
        size.bytes >= 32 + 12,
        "fingerprint and body at least: {size:?}"
    );
    store.unlock("b", "b").await.expect("unlock");
    assert_eq!(store.size().expect("size").entries, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_never_take_more_than_max_entries() {
    let clock = ManualClock::new();
    let store = Arc::new(capped(&clock, 1_000));
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut acquired = 0;
                for i in 0..500 {
                    let key = format!("t{task}-{i}");
                    match store.claim(&key, &key, LOCK_TTL).await {
                        Ok(Claim::Acquired) => acquired += 1,
                        Ok(other) => panic!("a fresh key found {other:?}"),
                        Err(error) => assert_eq!(error.kind(), StoreErrorKind::Full),
                    }
                }
                acquired
            })
        })
        .collect();
    let mut acquired = 0;
    for task in tasks {
        acquired += task.await.expect("task");
    }
    assert_eq!(acquired, 1_000, "exactly the cap, never more");
    assert_eq!(store.len(), 1_000);
}

/// A capped memory store seen only through the five required methods, so
/// the trait's default `claim` runs: a full store then fails in `try_lock`.
struct FiveMethods(MemoryIdempotencyStore);

impl IdempotencyStore for FiveMethods {
    fn get<'a>(
        &'a self,
        key: &'a str,
    ) -> autumn_idempotency::IdempotencyFuture<'a, Option<autumn_idempotency::IdempotencyEntry>>
    {
        self.0.get(key)
    }

    fn set<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        body_hash: Vec<u8>,
        ttl: Duration,
    ) -> autumn_idempotency::IdempotencyFuture<'a, bool> {
        self.0.set(key, owner, record, body_hash, ttl)
    }

    fn try_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> autumn_idempotency::IdempotencyFuture<'a, bool> {
        self.0.try_lock(key, owner, ttl)
    }

    fn unlock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
    ) -> autumn_idempotency::IdempotencyFuture<'a, ()> {
        self.0.unlock(key, owner)
    }
}

#[tokio::test]
async fn a_store_full_when_locking_answers_503_not_409() {
    let clock = ManualClock::new();
    let store = Arc::new(FiveMethods(capped(&clock, 1)));
    let f = Fixture::with_store(store, clock, |layer| layer);
    let first = f.post("/orders").key("a").send().await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text());
    // Full in try_lock, tagged TryLock: still "full", not "lock unavailable".
    let full = f.post("/orders").key("b").send().await;
    full.assert_problem(StatusCode::SERVICE_UNAVAILABLE, "idempotency_store_full");
    assert_eq!(full.header("retry-after"), Some("1"));
    assert_eq!(f.runs(), 1);
}
