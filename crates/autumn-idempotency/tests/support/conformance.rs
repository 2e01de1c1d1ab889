//! The store conformance suite: the same functions run against every store.
//! A store under test is built from a `ManualClock`, so expiry is driven by
//! moving the clock, never by sleeping.

use std::sync::Arc;
use std::time::Duration;

use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{Claim, IdempotencyRecord, IdempotencyStore};
use http::{HeaderValue, StatusCode};

const TTL: Duration = Duration::from_secs(3600);
const LOCK: Duration = Duration::from_secs(60);

fn record(body: &'static str) -> IdempotencyRecord {
    IdempotencyRecord::new(
        StatusCode::CREATED,
        [(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain"),
        )],
        body,
    )
}

fn hash(byte: u8) -> Vec<u8> {
    vec![byte; 32]
}

/// Everything a store must do, one assertion group per rule.
pub async fn run_all<F>(make: F)
where
    F: Fn(ManualClock) -> Arc<dyn IdempotencyStore>,
{
    empty_store_has_nothing(make(ManualClock::new())).await;
    lock_is_exclusive_and_owned(make(ManualClock::new())).await;
    set_respects_other_owners(make(ManualClock::new())).await;
    record_under_lock_is_not_final(make(ManualClock::new())).await;
    let clock = ManualClock::new();
    lock_expires_with_the_clock(make(clock.clone()), clock).await;
    let clock = ManualClock::new();
    record_expires_with_the_clock(make(clock.clone()), clock).await;
    let clock = ManualClock::new();
    renew_only_for_a_live_owner(make(clock.clone()), clock).await;
    claim_and_finish(make(ManualClock::new())).await;
    concurrent_locks_have_one_winner(make(ManualClock::new())).await;
}

async fn empty_store_has_nothing(store: Arc<dyn IdempotencyStore>) {
    assert_eq!(store.get("k").await.expect("get"), None);
    store
        .unlock("k", "nobody")
        .await
        .expect("unlock of nothing");
    assert!(!store.renew_lock("k", "nobody", LOCK).await.expect("renew"));
}

async fn lock_is_exclusive_and_owned(store: Arc<dyn IdempotencyStore>) {
    assert!(store.try_lock("k", "a", LOCK).await.expect("lock"));
    assert!(
        !store.try_lock("k", "b", LOCK).await.expect("lock"),
        "second owner"
    );
    assert!(
        !store.try_lock("k", "a", LOCK).await.expect("lock"),
        "same owner twice"
    );
    let entry = store.get("k").await.expect("get").expect("entry");
    assert!(entry.is_locked());
    assert!(entry.record().is_none());

    store.unlock("k", "b").await.expect("unlock");
    assert!(
        store.get("k").await.expect("get").is_some(),
        "other owner cannot unlock"
    );
    store.unlock("k", "a").await.expect("unlock");
    assert_eq!(store.get("k").await.expect("get"), None);
    assert!(
        store.try_lock("k", "b", LOCK).await.expect("lock"),
        "free again"
    );
}

async fn set_respects_other_owners(store: Arc<dyn IdempotencyStore>) {
    assert!(store.try_lock("k", "a", LOCK).await.expect("lock"));
    assert!(
        !store
            .set("k", "b", record("b"), hash(2), TTL)
            .await
            .expect("set"),
        "another owner's live lock"
    );
    assert!(
        store
            .set("k", "a", record("a"), hash(1), TTL)
            .await
            .expect("set")
    );
    store.unlock("k", "a").await.expect("unlock");
    assert!(
        !store
            .set("k", "b", record("b"), hash(2), TTL)
            .await
            .expect("set"),
        "another owner's live record"
    );
    assert!(
        !store.try_lock("k", "b", LOCK).await.expect("lock"),
        "recorded key"
    );
    let entry = store.get("k").await.expect("get").expect("entry");
    assert_eq!(entry.record(), Some(&record("a")));
    assert_eq!(entry.body_hash(), Some(&hash(1)[..]));

    // Nothing locked or recorded: anyone may record.
    assert!(
        store
            .set("free", "c", record("c"), hash(3), TTL)
            .await
            .expect("set")
    );
}

async fn record_under_lock_is_not_final(store: Arc<dyn IdempotencyStore>) {
    assert!(store.try_lock("k", "a", LOCK).await.expect("lock"));
    assert!(
        store
            .set("k", "a", record("first"), hash(1), TTL)
            .await
            .expect("set")
    );
    assert!(
        store
            .get("k")
            .await
            .expect("get")
            .expect("entry")
            .is_locked()
    );
    assert_eq!(
        store.claim("k", "b", LOCK).await.expect("claim"),
        Claim::InFlight
    );
    // The owner may rewrite its own record (the session finishing it).
    assert!(
        store
            .set("k", "a", record("final"), hash(1), TTL)
            .await
            .expect("set")
    );
    store.unlock("k", "a").await.expect("unlock");
    let entry = store.get("k").await.expect("get").expect("entry");
    assert!(!entry.is_locked());
    assert_eq!(entry.record(), Some(&record("final")));
}

async fn lock_expires_with_the_clock(store: Arc<dyn IdempotencyStore>, clock: ManualClock) {
    assert!(store.try_lock("k", "a", LOCK).await.expect("lock"));
    clock.advance(LOCK - Duration::from_secs(1));
    assert!(
        !store.try_lock("k", "b", LOCK).await.expect("lock"),
        "still live"
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        store.get("k").await.expect("get"),
        None,
        "lapsed lock is gone"
    );
    assert!(
        store.try_lock("k", "b", LOCK).await.expect("lock"),
        "lapsed lock"
    );
    // The crashed owner's late write must not land over the new owner.
    assert!(
        !store
            .set("k", "a", record("late"), hash(1), TTL)
            .await
            .expect("set")
    );
}

async fn record_expires_with_the_clock(store: Arc<dyn IdempotencyStore>, clock: ManualClock) {
    assert!(store.try_lock("k", "a", LOCK).await.expect("lock"));
    assert!(
        store
            .finish("k", "a", record("a"), hash(1), TTL)
            .await
            .expect("finish")
    );
    clock.advance(TTL - Duration::from_secs(1));
    assert!(store.get("k").await.expect("get").is_some());
    clock.advance(Duration::from_secs(2));
    assert_eq!(store.get("k").await.expect("get"), None);
    assert_eq!(
        store.claim("k", "b", LOCK).await.expect("claim"),
        Claim::Acquired
    );
}

async fn renew_only_for_a_live_owner(store: Arc<dyn IdempotencyStore>, clock: ManualClock) {
    assert!(store.try_lock("k", "a", LOCK).await.expect("lock"));
    clock.advance(Duration::from_secs(50));
    assert!(
        !store.renew_lock("k", "b", LOCK).await.expect("renew"),
        "not the owner"
    );
    assert!(store.renew_lock("k", "a", LOCK).await.expect("renew"));
    clock.advance(Duration::from_secs(50));
    assert!(
        !store.try_lock("k", "b", LOCK).await.expect("lock"),
        "renewed lock holds"
    );
    clock.advance(Duration::from_secs(11));
    assert!(
        !store.renew_lock("k", "a", LOCK).await.expect("renew"),
        "lapsed"
    );
}

async fn claim_and_finish(store: Arc<dyn IdempotencyStore>) {
    assert_eq!(
        store.claim("k", "a", LOCK).await.expect("claim"),
        Claim::Acquired
    );
    assert_eq!(
        store.claim("k", "b", LOCK).await.expect("claim"),
        Claim::InFlight
    );
    assert!(
        !store
            .finish("k", "b", record("b"), hash(2), TTL)
            .await
            .expect("finish"),
        "finish by another owner"
    );
    assert!(
        store
            .finish("k", "a", record("a"), hash(1), TTL)
            .await
            .expect("finish")
    );
    assert_eq!(
        store.claim("k", "c", LOCK).await.expect("claim"),
        Claim::Completed {
            record: record("a"),
            body_hash: hash(1)
        }
    );
}

async fn concurrent_locks_have_one_winner(store: Arc<dyn IdempotencyStore>) {
    let attempts = (0..50).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .claim("contended", &format!("owner-{i}"), LOCK)
                .await
                .expect("claim")
        })
    });
    let mut acquired = 0;
    for attempt in attempts {
        if attempt.await.expect("task") == Claim::Acquired {
            acquired += 1;
        }
    }
    assert_eq!(acquired, 1);
}
