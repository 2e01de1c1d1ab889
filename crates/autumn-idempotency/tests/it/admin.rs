//! Key administration on every store: a key's state (absent, locked,
//! recorded) with its deadlines and status but not its body, and evicting a
//! stuck lock or a record, with an audit line.

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
    let (_guard, logs) = crate::support::logs::capture();
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
    assert_eq!(locked.lock_taken_at, Some(now));
    assert_eq!(locked.owner_age_ms, Some(0));
    assert_eq!(locked.status, None);
    // Its owner's age grows on the store's clock; a renewal moves the
    // expiry but not when the lock was taken.
    clock.advance(Duration::from_secs(20));
    assert!(
        store.renew_lock(&key, "gone", LOCK).await.expect("renew"),
        "the owner renews"
    );
    clock.advance(Duration::from_millis(2_500));
    let renewed = admin::inspect(store, &key, false).await.expect("inspect");
    assert_eq!(renewed.lock_expires_at, Some(now + 20_000 + 60_000));
    assert_eq!(renewed.lock_taken_at, Some(now), "a renewal keeps it");
    assert_eq!(renewed.owner_age_ms, Some(22_500));
    let json = serde_json::to_string(&renewed).expect("json");
    assert!(json.contains(r#""owner_age_ms":22500"#), "{json}");
    assert!(
        json.contains(&format!(r#""lock_taken_at":{now}"#)),
        "{json}"
    );
    let now = clock.now_millis();
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
    assert_eq!(recorded.lock_taken_at, None, "released with its lock");
    assert_eq!(recorded.owner_age_ms, None);
    assert_eq!(recorded.status, Some(201));
    assert_eq!(recorded.record_expires_at, Some(now + 3_600_000));
    assert_eq!(recorded.body_bytes, Some(17));
    assert_eq!(recorded.body, None, "never the body unless asked");
    let json = serde_json::to_string(&recorded).expect("json");
    assert!(!json.contains("4242"), "{json}");
    assert!(json.contains(r#""state":"recorded""#), "{json}");
    assert!(!json.contains("owner_age_ms"), "no lock, no owner: {json}");
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
    // A lock that lapsed and is taken by another run: its age starts over.
    clock.advance(LOCK + Duration::from_secs(1));
    assert_eq!(
        store.claim(&key, "later", LOCK).await.expect("claim"),
        Claim::Acquired
    );
    let retaken = admin::inspect(store, &key, false).await.expect("inspect");
    assert_eq!(retaken.lock_taken_at, Some(clock.now_millis()));
    assert_eq!(retaken.owner_age_ms, Some(0));

    // A run whose response was too large to keep leaves a marker: recorded,
    // flagged, with the status it answered and no body; a retry finds it.
    let marker = IdempotencyRecord::not_recorded(StatusCode::OK);
    assert!(
        store
            .finish(&key, "later", marker, vec![9; 32], RECORD)
            .await
            .expect("finish")
    );
    let marked = admin::inspect(store, &key, true).await.expect("inspect");
    assert_eq!(marked.state, State::Recorded);
    assert!(marked.not_recorded);
    assert_eq!(marked.status, Some(200));
    assert_eq!(marked.body_bytes, None);
    assert_eq!(marked.body, None, "a marker has no body to show");
    let json = serde_json::to_string(&marked).expect("json");
    assert!(json.contains(r#""not_recorded":true"#), "{json}");
    assert!(
        !serde_json::to_string(&recorded)
            .expect("json")
            .contains("not_recorded"),
        "a full record says nothing of it"
    );
    match store.claim(&key, "after", LOCK).await.expect("claim") {
        Claim::Completed {
            record,
            fingerprint,
        } => {
            assert!(record.is_not_recorded(), "the store keeps the marker");
            assert_eq!(fingerprint, vec![9; 32]);
        }
        other => panic!("expected the marker, got {other:?}"),
    }

    let audit = logs.lines_with("autumn::audit");
    assert_eq!(audit.len(), 3, "{}", logs.text());
    assert!(audit[1].contains("by=ops@example.com"), "{}", audit[1]);
    assert!(audit[1].contains("evicted=true"), "{}", audit[1]);
    // The storage key evicts a record: the audit line names it by its
    // digest, never as itself.
    let digest = {
        use sha2::Digest as _;
        format!(
            "sha256:{}",
            hex::encode(&sha2::Sha256::digest(key.as_bytes())[..6])
        )
    };
    assert!(
        audit[1].contains(&format!("storage_key_hash={digest}")),
        "{}",
        audit[1]
    );
    assert!(!audit[1].contains(&key), "{}", audit[1]);
}

#[tokio::test]
async fn memory() {
    let clock = ManualClock::new();
    let store = MemoryIdempotencyStore::new(RECORD).with_clock(Arc::new(clock.clone()));
    administer(&store, &clock).await;
}

#[tokio::test]
async fn redis() {
    use crate::support::redis::{require_redis, unique_prefix};
    let clock = ManualClock::new();
    let store = autumn_idempotency::RedisIdempotencyStore::new(&require_redis(), &unique_prefix())
        .expect("a valid Redis URL")
        .with_clock(Arc::new(clock.clone()));
    administer(&store, &clock).await;
}

#[tokio::test]
async fn postgres() {
    let clock = ManualClock::new();
    let url = crate::support::database::fresh_postgres_schema();
    administer(
        &crate::support::database::store(&url, clock.clone()),
        &clock,
    )
    .await;
}

#[tokio::test]
async fn sqlite() {
    let clock = ManualClock::new();
    let url = crate::support::database::fresh_sqlite_file();
    administer(
        &crate::support::database::store(&url, clock.clone()),
        &clock,
    )
    .await;
}

/// A lock written before stores kept when it was taken: it inspects as
/// locked, with its expiry and no owner age, and works as any lock.
async fn a_lock_without_its_taken_at(store: &dyn IdempotencyStore, clock: &ManualClock, key: &str) {
    let now = clock.now_millis();
    let report = admin::inspect(store, key, false).await.expect("inspect");
    assert_eq!(report.state, State::Locked);
    assert_eq!(report.lock_expires_at, Some(now + 60_000));
    assert_eq!(report.lock_taken_at, None);
    assert_eq!(report.owner_age_ms, None);
    let json = serde_json::to_string(&report).expect("json");
    assert!(!json.contains("owner_age_ms"), "{json}");
    assert_eq!(
        store.claim(key, "retry", LOCK).await.expect("claim"),
        Claim::InFlight
    );
    assert!(store.renew_lock(key, "old", LOCK).await.expect("renew"));
    let record = IdempotencyRecord::new(StatusCode::OK, [], "done");
    assert!(
        store
            .finish(key, "old", record, vec![1; 32], RECORD)
            .await
            .expect("finish")
    );
    let report = admin::inspect(store, key, false).await.expect("inspect");
    assert_eq!(report.state, State::Recorded);
}

#[tokio::test]
async fn redis_lock_from_before_taken_at_was_kept() {
    use crate::support::redis::{plain_connection, require_redis, unique_prefix};
    let clock = ManualClock::new();
    let (url, prefix) = (require_redis(), unique_prefix());
    let store = autumn_idempotency::RedisIdempotencyStore::new(&url, &prefix)
        .expect("a valid Redis URL")
        .with_clock(Arc::new(clock.clone()));
    let now = clock.now_millis();
    // The hash an earlier version wrote: owner and deadline, no `lt`.
    let _: () = ::redis::cmd("HSET")
        .arg(format!("{prefix}:k"))
        .arg(&["lo", "old", "le", &(now + 60_000).to_string()])
        .query_async(&mut plain_connection(&url).await)
        .await
        .expect("HSET");
    a_lock_without_its_taken_at(&store, &clock, "k").await;
}

#[tokio::test]
async fn postgres_lock_from_before_taken_at_was_kept() {
    let clock = ManualClock::new();
    let url = crate::support::database::fresh_postgres_schema();
    let store = crate::support::database::store(&url, clock.clone());
    insert_old_lock(&store, clock.now_millis() + 60_000).await;
    a_lock_without_its_taken_at(&store, &clock, "k").await;
}

#[tokio::test]
async fn sqlite_lock_from_before_taken_at_was_kept() {
    let clock = ManualClock::new();
    let url = crate::support::database::fresh_sqlite_file();
    let store = crate::support::database::store(&url, clock.clone());
    insert_old_lock(&store, clock.now_millis() + 60_000).await;
    a_lock_without_its_taken_at(&store, &clock, "k").await;
}

/// The row an earlier version wrote for a lock: no `lock_taken_at`.
async fn insert_old_lock(store: &autumn_idempotency::database::DbIdempotencyStore, expires: u64) {
    use autumn_idempotency::database::DbConnection;
    use diesel_async::SimpleAsyncConnection as _;
    let sql = format!(
        "INSERT INTO autumn_idempotency_keys (storage_key, lock_owner, lock_expires_at) \
         VALUES ('k', 'old', {expires})"
    );
    match store.pool().get().await.expect("connection") {
        DbConnection::Postgres(mut conn) => conn.batch_execute(&sql).await.expect("insert"),
        DbConnection::Sqlite(mut conn) => conn.batch_execute(&sql).await.expect("insert"),
        _ => unreachable!("a backend this test does not know"),
    }
}

/// A store written against the five-method contract can be inspected
/// (through `get`, without deadlines) and says plainly that it cannot evict.
#[tokio::test]
async fn a_custom_store_inspects_through_get_and_refuses_to_evict() {
    let store = crate::support::faulty::FaultyStore {
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
