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
    let clock = ManualClock::new();
    a_stale_owner_cannot_touch_the_next_owners_key(make(clock.clone()), clock).await;
    a_ttl_under_a_millisecond_is_rejected(make(ManualClock::new())).await;
    a_cancelled_claim_leaves_the_key_usable(make(ManualClock::new())).await;
}

/// [`run_all`] for a store that replicas share (Redis, a database): `make`
/// returns handles on one fresh backend, one per clock. On top of the whole
/// suite, replicas whose clocks disagree must honour each other's locks.
pub async fn run_all_shared<F>(make: F)
where
    F: Fn(Vec<ManualClock>) -> Vec<Arc<dyn IdempotencyStore>>,
{
    run_all(|clock| make(vec![clock]).pop().expect("a store for the one clock")).await;
    skewed_clocks_honour_each_others_locks(&make).await;
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
    assert_eq!(entry.fingerprint(), Some(&hash(1)[..]));

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
            fingerprint: hash(1)
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

/// An owner whose lock lapsed (a stalled replica) and who comes back after
/// another owner took the key changes nothing: its unlock, renewal and
/// record are all refused, before and after the new owner finishes.
async fn a_stale_owner_cannot_touch_the_next_owners_key(
    store: Arc<dyn IdempotencyStore>,
    clock: ManualClock,
) {
    assert_eq!(
        store.claim("k", "a", LOCK).await.expect("claim"),
        Claim::Acquired
    );
    clock.advance(LOCK + Duration::from_secs(1));
    assert_eq!(
        store.claim("k", "b", LOCK).await.expect("claim"),
        Claim::Acquired,
        "the lapsed lock is free"
    );

    store.unlock("k", "a").await.expect("unlock");
    assert!(
        !store.renew_lock("k", "a", LOCK).await.expect("renew"),
        "stale renewal"
    );
    assert!(
        !store
            .finish("k", "a", record("stale"), hash(1), TTL)
            .await
            .expect("finish"),
        "stale finish"
    );
    assert!(
        !store
            .set("k", "a", record("stale"), hash(1), TTL)
            .await
            .expect("set"),
        "stale set"
    );
    let entry = store.get("k").await.expect("get").expect("entry");
    assert!(entry.is_locked(), "the stale unlock released the new lock");
    assert!(entry.record().is_none(), "the stale record landed");
    assert_eq!(
        store.claim("k", "c", LOCK).await.expect("claim"),
        Claim::InFlight
    );

    assert!(store.renew_lock("k", "b", LOCK).await.expect("renew"));
    assert!(
        store
            .finish("k", "b", record("b"), hash(2), TTL)
            .await
            .expect("finish")
    );
    store.unlock("k", "a").await.expect("unlock");
    assert!(
        !store
            .finish("k", "a", record("stale"), hash(1), TTL)
            .await
            .expect("finish"),
        "stale finish over the new record"
    );
    assert_eq!(
        store.claim("k", "c", LOCK).await.expect("claim"),
        Claim::Completed {
            record: record("b"),
            fingerprint: hash(2)
        }
    );
}

/// Stores keep time in milliseconds: a shorter TTL would write a lock or a
/// record that is already expired, and a duplicate could run at once. Every
/// write with such a TTL is an error, and writes nothing.
async fn a_ttl_under_a_millisecond_is_rejected(store: Arc<dyn IdempotencyStore>) {
    for ttl in [Duration::ZERO, Duration::from_micros(999)] {
        assert!(
            store.try_lock("k", "a", ttl).await.is_err(),
            "try_lock {ttl:?}"
        );
        assert!(store.claim("k", "a", ttl).await.is_err(), "claim {ttl:?}");
        assert!(
            store
                .set("k", "a", record("a"), hash(1), ttl)
                .await
                .is_err(),
            "set {ttl:?}"
        );
        assert!(
            store
                .finish("k", "a", record("a"), hash(1), ttl)
                .await
                .is_err(),
            "finish {ttl:?}"
        );
        assert_eq!(store.get("k").await.expect("get"), None, "{ttl:?}");
    }
    assert_eq!(
        store.claim("k", "a", LOCK).await.expect("claim"),
        Claim::Acquired
    );
    assert!(store.renew_lock("k", "a", Duration::ZERO).await.is_err());
    assert_eq!(
        store.claim("k", "b", LOCK).await.expect("claim"),
        Claim::InFlight,
        "the rejected renewal left the lock as it was"
    );
}

/// A claim dropped part-way (the client went away, a timeout fired) leaves
/// the key either untouched or locked by that owner, who can release it: it
/// never wedges the key, and never lets two owners in. Each round drops the
/// claim at a later point, from before its first poll to after it finished.
async fn a_cancelled_claim_leaves_the_key_usable(store: Arc<dyn IdempotencyStore>) {
    for round in 0..12_u64 {
        let key = format!("cancelled-{round}");
        let claim = store.claim(&key, "a", LOCK);
        if let Ok(finished) = tokio::time::timeout(Duration::from_millis(round), claim).await {
            assert_eq!(finished.expect("claim"), Claim::Acquired, "{key}");
        }
        // The dropped claim's statement may still reach the backend after
        // this point; whenever it lands, owner a's unlock clears it, and it
        // can never take the key from b.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            store.unlock(&key, "a").await.expect("unlock");
            match store.claim(&key, "b", LOCK).await.expect("claim") {
                Claim::Acquired => break,
                Claim::InFlight => assert!(
                    std::time::Instant::now() < deadline,
                    "{key} is still locked after the cancelled owner released it"
                ),
                other => panic!("{key}: unexpected {other:?}"),
            }
            tokio::task::yield_now().await;
        }
        assert!(
            !store
                .finish(&key, "a", record("a"), hash(1), TTL)
                .await
                .expect("finish"),
            "{key}: the cancelled owner recorded over b"
        );
        assert!(
            store
                .finish(&key, "b", record("b"), hash(2), TTL)
                .await
                .expect("finish"),
            "{key}"
        );
    }
}

/// Two replicas whose clocks are `SKEW` apart (less than the lock TTL, as
/// the docs require): a lock taken on either is honoured by the other for
/// the TTL less the skew, and the owner keeps it on its own clock.
async fn skewed_clocks_honour_each_others_locks<F>(make: &F)
where
    F: Fn(Vec<ManualClock>) -> Vec<Arc<dyn IdempotencyStore>>,
{
    const SKEW: Duration = Duration::from_secs(5);
    let behind = ManualClock::new();
    let ahead = ManualClock::new();
    ahead.advance(SKEW);
    let mut stores = make(vec![behind.clone(), ahead.clone()]);
    let fast = stores.pop().expect("the store whose clock is ahead");
    let slow = stores.pop().expect("the store whose clock is behind");
    let advance = |by: Duration| {
        behind.advance(by);
        ahead.advance(by);
    };

    // Taken by the replica behind: the one ahead sees it expire first.
    assert_eq!(
        slow.claim("behind", "a", LOCK).await.expect("claim"),
        Claim::Acquired
    );
    advance(LOCK - SKEW - Duration::from_secs(1));
    assert_eq!(
        fast.claim("behind", "b", LOCK).await.expect("claim"),
        Claim::InFlight,
        "the replica ahead let a duplicate in within the TTL"
    );
    assert!(!fast.try_lock("behind", "b", LOCK).await.expect("lock"));
    assert!(slow.renew_lock("behind", "a", LOCK).await.expect("renew"));
    advance(LOCK - SKEW - Duration::from_secs(1));
    assert_eq!(
        fast.claim("behind", "b", LOCK).await.expect("claim"),
        Claim::InFlight,
        "the renewal holds on the replica ahead"
    );
    assert!(
        slow.finish("behind", "a", record("a"), hash(1), TTL)
            .await
            .expect("finish")
    );
    assert_eq!(
        fast.claim("behind", "c", LOCK).await.expect("claim"),
        Claim::Completed {
            record: record("a"),
            fingerprint: hash(1)
        }
    );

    // Taken by the replica ahead: the one behind honours it past the TTL
    // of its own clock, never less.
    assert_eq!(
        fast.claim("ahead", "b", LOCK).await.expect("claim"),
        Claim::Acquired
    );
    advance(LOCK - Duration::from_secs(1));
    assert_eq!(
        slow.claim("ahead", "a", LOCK).await.expect("claim"),
        Claim::InFlight
    );
    assert!(
        !slow
            .set("ahead", "a", record("a"), hash(1), TTL)
            .await
            .expect("set"),
        "the replica behind wrote over a live lock"
    );
    assert!(
        fast.finish("ahead", "b", record("b"), hash(2), TTL)
            .await
            .expect("finish")
    );
    assert_eq!(
        slow.claim("ahead", "a", LOCK).await.expect("claim"),
        Claim::Completed {
            record: record("b"),
            fingerprint: hash(2)
        }
    );
}
