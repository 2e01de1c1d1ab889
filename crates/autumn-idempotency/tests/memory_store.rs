//! The memory store against the store conformance suite, plus what only the
//! memory store promises: it forgets expired entries by itself.

mod support;

use std::sync::Arc;
use std::time::Duration;

use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{IdempotencyRecord, IdempotencyStore, MemoryIdempotencyStore};
use http::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_passes_the_conformance_suite() {
    support::conformance::run_all(|clock| {
        Arc::new(MemoryIdempotencyStore::with_clock(
            Duration::from_secs(24 * 3600),
            Arc::new(clock),
        ))
    })
    .await;
}

#[tokio::test]
async fn the_store_ttl_caps_what_set_asks_for() {
    let clock = ManualClock::new();
    let store =
        MemoryIdempotencyStore::with_clock(Duration::from_secs(10), Arc::new(clock.clone()));
    let record = IdempotencyRecord::new(StatusCode::OK, [], "x");
    assert!(
        store
            .set("k", "o", record, vec![1], Duration::from_secs(3600))
            .await
            .expect("set")
    );
    clock.advance(Duration::from_secs(11));
    assert_eq!(store.get("k").await.expect("get"), None);
}

#[tokio::test]
async fn memory_stays_flat_under_a_stream_of_unique_keys() {
    let clock = ManualClock::new();
    let ttl = Duration::from_secs(60);
    let store = MemoryIdempotencyStore::with_clock(ttl, Arc::new(clock.clone()));
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
