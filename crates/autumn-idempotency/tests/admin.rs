//! Key administration on every store: a key's state (absent, locked,
//! recorded) with its deadlines and status but not its body, and evicting a
//! stuck lock or a record, with an audit line.

mod support;

use std::sync::Arc;
use std::time::Duration;

use autumn_idempotency::admin::{self, KeyLookup, State};
use autumn_idempotency::clock::{Clock as _, ManualClock};
use autumn_idempotency::{Claim, IdempotencyRecord, IdempotencyStore, MemoryIdempotencyStore};
use http::StatusCode;

const LOCK: Duration = Duration::from_secs(60);
const RECORD: Duration = Duration::from_secs(3600);

/// The whole life of one key, as an operator sees it, on `store`.
async fn administer(store: &dyn IdempotencyStore, clock: &ManualClock) {
    let (_guard, logs) = support::logs::capture();
    let key = KeyLookup::new("post", "/orders?x=1", "order-1")
        .with_scope("tenant", "acme")
        .storage_key();
    assert_eq!(
        key,
        autumn_idempotency::key::storage_key(
            "POST",
            "/orders?x=1",
            autumn_idempotency::IdempotencyScope::default()
                .with_part("tenant", "acme")
                .as_bytes(),
            "order-1"
        ),
        "the key the layer keeps the request under"
    );
    let now = clock.now_millis();

    let absent = admin::inspect(store, &key, true).await.expect("inspect");
    assert_eq!(absent.state, State::Absent);
    assert!(!admin::evict(store, &key, "ops").await.expect("evict"));

    // A stuck lock: its run is gone, and retries get 409 until it lapses.
    assert_eq!(
        store.claim(&key, "gone", LOCK).await.expect("claim"),
        Claim::Acquired
    );
    let locked = admin::inspect(store, &key, false).await.expect("inspect");
    assert_eq!(locked.state, State::Locked);
    assert_eq!(locked.lock_expires_at, Some(now + 60_000));
    assert_eq!(locked.status, None);
    assert_eq!(
        store.claim(&key, "retry", LOCK).await.expect("claim"),
        Claim::InFlight
    );
    assert!(
        admin::evict(store, &key, "ops@example.com")
            .await
            .expect("evict")
    );
    assert_eq!(
        store.claim(&key, "retry", LOCK).await.expect("claim"),
        Claim::Acquired,
        "evicted, the lock no longer refuses the retry"
    );

    let record = IdempotencyRecord::new(StatusCode::CREATED, [], "card 4242 charged");
    assert!(
        store
            .finish(&key, "retry", record, vec![7; 32], RECORD)
            .await
            .expect("finish")
    );
    let recorded = admin::inspect(store, &key, false).await.expect("inspect");
    assert_eq!(recorded.state, State::Recorded);
    assert_eq!(recorded.status, Some(201));
    assert_eq!(recorded.record_expires_at, Some(now + 3_600_000));
    assert_eq!(recorded.body_bytes, Some(17));
    assert_eq!(recorded.body, None, "never the body unless asked");
    let json = serde_json::to_string(&recorded).expect("json");
    assert!(!json.contains("4242"), "{json}");
    assert!(json.contains(r#""state":"recorded""#), "{json}");
    let with_body = admin::inspect(store, &key, true).await.expect("inspect");
    assert_eq!(with_body.body.as_deref(), Some("card 4242 charged"));

    assert!(
        admin::evict(store, &key, "ops@example.com")
            .await
            .expect("evict")
    );
    let gone = admin::inspect(store, &key, false).await.expect("inspect");
    assert_eq!(gone.state, State::Absent);
    assert_eq!(
        store.claim(&key, "again", LOCK).await.expect("claim"),
        Claim::Acquired
    );

    let audit = logs.lines_with("autumn::audit");
    assert_eq!(audit.len(), 3, "{}", logs.text());
    assert!(audit[1].contains("by=ops@example.com"), "{}", audit[1]);
    assert!(audit[1].contains("evicted=true"), "{}", audit[1]);
    assert!(audit[1].contains(&key), "{}", audit[1]);
}

#[tokio::test]
async fn memory() {
    let clock = ManualClock::new();
    let store = MemoryIdempotencyStore::new(RECORD).with_clock(Arc::new(clock.clone()));
    administer(&store, &clock).await;
}

#[tokio::test]
async fn redis() {
    use support::redis::{require_redis, unique_prefix};
    let clock = ManualClock::new();
    let store = autumn_idempotency::RedisIdempotencyStore::new(&require_redis(), &unique_prefix())
        .expect("a valid Redis URL")
        .with_clock(Arc::new(clock.clone()));
    administer(&store, &clock).await;
}

#[tokio::test]
async fn postgres() {
    let clock = ManualClock::new();
    let url = support::database::fresh_postgres_schema();
    administer(&support::database::store(&url, clock.clone()), &clock).await;
}

#[tokio::test]
async fn sqlite() {
    let clock = ManualClock::new();
    let url = support::database::fresh_sqlite_file();
    administer(&support::database::store(&url, clock.clone()), &clock).await;
}

/// A store written against the five-method contract can be inspected
/// (through `get`, without deadlines) and says plainly that it cannot evict.
#[tokio::test]
async fn a_custom_store_inspects_through_get_and_refuses_to_evict() {
    let store = support::faulty::FaultyStore {
        inner: Arc::new(MemoryIdempotencyStore::new(RECORD)),
        faults: Arc::default(),
        on_lock: Box::new(|| {}),
        renew_gate: None,
    };
    let key = KeyLookup::new("POST", "/orders", "k").storage_key();
    assert!(store.try_lock(&key, "o", LOCK).await.expect("lock"));
    let report = admin::inspect(&store, &key, false).await.expect("inspect");
    assert_eq!(report.state, State::Locked);
    assert_eq!(report.lock_expires_at, None);
    let error = admin::evict(&store, &key, "ops")
        .await
        .expect_err("no evict");
    assert!(
        error.to_string().contains("does not implement evict"),
        "{error}"
    );
}
