//! Every session store against the same checks: memory, Redis (a key prefix
//! per test), PostgreSQL (a schema per test) and SQLite (a file per test),
//! each on the real service. Time is the `now_millis` the tests pass: nothing
//! sleeps for a record to expire.
#![cfg(all(feature = "redis", feature = "postgres", feature = "sqlite"))]

use crate::support::database::FreshDatabase as _;
use crate::support::{database, redis_support};

use std::sync::Arc;
use std::time::Duration;

use autumn_core::session::{
    DbSessionStore, MemorySessionStore, RedisSessionStore, SaveOutcome, SessionFuture, SessionId,
    SessionRecord, SessionStore,
};
use autumn_idempotency::RedisConnection;
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::database::DbPool;
use diesel::sql_types::Text;
use serde_json::{Map, Value, json};

/// A store under test, and how to see what it keeps.
struct Subject {
    store: Arc<dyn SessionStore>,
    kept: Kept,
    /// What must live as long as the store: a server of the test's own,
    /// the certificates it uses.
    _server: Option<Box<dyn std::any::Any + Send>>,
}

/// Where a store's entries can be listed from outside it.
enum Kept {
    /// In the process: nothing to list.
    Memory,
    /// Keys under `prefix:` in the Redis at `url`.
    Redis { url: String, prefix: String },
    /// Keys under `prefix:` in the Redis, or on every master of the
    /// cluster, that `connection` reaches (over TLS, which the plain
    /// listing connection does not speak).
    Connection {
        connection: RedisConnection,
        prefix: String,
    },
    /// Rows of `autumn_sessions` in the database of `pool`.
    Table { pool: DbPool },
}

#[derive(diesel::QueryableByName)]
struct StoredKey {
    #[diesel(sql_type = Text)]
    storage_key: String,
}

impl Subject {
    /// The names the store keeps its entries under (Redis keys, or the
    /// table's `storage_key`s); `None` for the memory store.
    async fn stored_names(&self) -> Option<Vec<String>> {
        match &self.kept {
            Kept::Memory => None,
            Kept::Redis { url, prefix } => Some(redis_support::keys_under(url, prefix).await),
            Kept::Connection { connection, prefix } => {
                let pattern = format!("{prefix}:*");
                let keys: Vec<String> = connection
                    .run(|mut link| {
                        let pattern = pattern.clone();
                        async move {
                            ::redis::cmd("KEYS")
                                .arg(pattern)
                                .query_async(&mut link)
                                .await
                        }
                    })
                    .await
                    .expect("KEYS");
                Some(keys)
            }
            Kept::Table { pool } => {
                use diesel_async::RunQueryDsl as _;
                let sql = "SELECT storage_key FROM autumn_sessions";
                let rows: Vec<StoredKey> = match pool.get().await.expect("a connection") {
                    autumn_idempotency::database::DbConnection::Postgres(mut conn) => {
                        diesel::sql_query(sql).load(&mut *conn).await
                    }
                    autumn_idempotency::database::DbConnection::Sqlite(mut conn) => {
                        diesel::sql_query(sql).load(&mut *conn).await
                    }
                    _ => unreachable!("the tests build both backends"),
                }
                .expect("list the sessions table");
                Some(rows.into_iter().map(|row| row.storage_key).collect())
            }
        }
    }

    /// Whether the store deletes expired entries itself on `delete_expired`
    /// (Redis expires its keys on its own and keeps the default).
    fn sweeps(&self) -> bool {
        !matches!(self.kept, Kept::Redis { .. } | Kept::Connection { .. })
    }
}

fn memory() -> Subject {
    Subject {
        store: Arc::new(MemorySessionStore::new(10_000)),
        kept: Kept::Memory,
        _server: None,
    }
}

fn redis_store(url: &str, prefix: &str) -> RedisSessionStore {
    RedisSessionStore::new(RedisConnection::new(url).expect("a Redis URL"), prefix)
}

fn redis() -> Subject {
    let url = redis_support::require_redis();
    let prefix = redis_support::unique_prefix();
    Subject {
        store: Arc::new(redis_store(&url, &prefix)),
        kept: Kept::Redis { url, prefix },
        _server: None,
    }
}

/// The Redis session store on a Redis Cluster of six servers, shared by
/// this binary's tests: every session command touches one key, so each goes
/// to the master owning it.
fn redis_cluster() -> Subject {
    let url = redis_support::cluster::shared_cluster().url();
    let prefix = redis_support::unique_prefix();
    Subject {
        store: Arc::new(redis_store(&url, &prefix)),
        kept: Kept::Redis { url, prefix },
        _server: None,
    }
}

/// The Redis session store on a Valkey server of the test's own.
fn valkey() -> Subject {
    let server = redis_support::ValkeyServer::new();
    let url = server.url();
    let prefix = redis_support::unique_prefix();
    Subject {
        store: Arc::new(redis_store(&url, &prefix)),
        kept: Kept::Redis { url, prefix },
        _server: Some(Box::new(server)),
    }
}

/// The Redis session store on a six-node Valkey cluster shared by this
/// binary's tests.
fn valkey_cluster() -> Subject {
    let url = redis_support::cluster::shared_valkey_cluster().url();
    let prefix = redis_support::unique_prefix();
    Subject {
        store: Arc::new(redis_store(&url, &prefix)),
        kept: Kept::Redis { url, prefix },
        _server: None,
    }
}

/// The Redis session store over TLS, on a TLS-only server of the test's
/// own that asks for a client certificate.
fn redis_tls() -> Subject {
    use autumn_base::redis::RedisTls;
    use autumn_testkit::tls::TestCa;
    use redis_support::{ClientCerts, RedisServer};
    let ca = TestCa::new();
    let server = RedisServer::with_tls(&ca, ClientCerts::Required);
    let tls = RedisTls::new()
        .with_ca_file(ca.ca_file())
        .with_client_cert(ca.client_cert(), ca.client_key());
    let connection = RedisConnection::with_tls(&server.url(), &tls).expect("a rediss:// URL");
    assert!(connection.is_tls());
    let prefix = redis_support::unique_prefix();
    Subject {
        store: Arc::new(RedisSessionStore::new(connection.clone(), &prefix)),
        kept: Kept::Connection { connection, prefix },
        _server: Some(Box::new((server, ca))),
    }
}

/// The Redis session store over TLS on a TLS-only Valkey server of the
/// test's own that asks for a client certificate.
fn valkey_tls() -> Subject {
    use autumn_base::redis::RedisTls;
    use autumn_testkit::tls::TestCa;
    use redis_support::ClientCerts;
    let ca = TestCa::new();
    let server = redis_support::ValkeyServer::with_tls(&ca, ClientCerts::Required);
    let tls = RedisTls::new()
        .with_ca_file(ca.ca_file())
        .with_client_cert(ca.client_cert(), ca.client_key());
    let connection = RedisConnection::with_tls(&server.url(), &tls).expect("a rediss:// URL");
    assert!(connection.is_tls());
    let prefix = redis_support::unique_prefix();
    Subject {
        store: Arc::new(RedisSessionStore::new(connection.clone(), &prefix)),
        kept: Kept::Connection { connection, prefix },
        _server: Some(Box::new((server, ca))),
    }
}

/// The Redis session store on a six-node Valkey cluster whose nodes accept
/// TLS only (their cluster bus too), shared by this binary's tests.
fn valkey_tls_cluster() -> Subject {
    use autumn_base::redis::RedisTls;
    let cluster = redis_support::cluster::shared_valkey_tls_cluster();
    let tls = RedisTls::new().with_ca_file(cluster.ca_file().expect("a TLS cluster's CA"));
    let connection =
        RedisConnection::with_tls(&cluster.url(), &tls).expect("a rediss+cluster:// URL");
    assert!(connection.is_cluster() && connection.is_tls());
    let prefix = redis_support::unique_prefix();
    Subject {
        store: Arc::new(RedisSessionStore::new(connection.clone(), &prefix)),
        kept: Kept::Connection { connection, prefix },
        _server: None,
    }
}

fn pool(url: &str) -> DbPool {
    DbPool::new(url, 8, Duration::from_secs(5)).expect("pool")
}

fn table(url: &str) -> Subject {
    let pool = pool(url);
    Subject {
        store: Arc::new(DbSessionStore::new(pool.clone())),
        kept: Kept::Table { pool },
        _server: None,
    }
}

fn postgres() -> Subject {
    // The store outlives this function: the schema stays, for a later run
    // to drop.
    table(&database::fresh_postgres_schema().keep())
}

/// The table through a real PgBouncer in transaction pooling mode, with
/// the statement cache off, as `[database] statement_cache = false` sets up.
fn postgres_via_pgbouncer() -> Subject {
    static BOUNCER: std::sync::OnceLock<database::PgBouncer> = std::sync::OnceLock::new();
    let url = BOUNCER
        .get_or_init(database::PgBouncer::start)
        .fresh_database();
    let pool = DbPool::with_statement_cache(&url, 8, Duration::from_secs(5), false).expect("pool");
    Subject {
        store: Arc::new(DbSessionStore::new(pool.clone())),
        kept: Kept::Table { pool },
        _server: None,
    }
}

fn sqlite() -> Subject {
    table(&database::fresh_sqlite_file())
}

fn data(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// The checks every store passes.
mod checks {
    use super::*;

    pub(super) async fn round_trip(subject: Subject) {
        let store = &subject.store;
        let id = SessionId::generate();
        let record = SessionRecord::new(
            data(json!({"user_id": 7, "cart": [1, 2], "name": "Zoë \"quoted\""})),
            61_000,
        );
        store.save(&id, &record, 1_000).await.expect("save");
        assert_eq!(
            store.load(&id, 1_000).await.expect("load"),
            Some(record.clone())
        );
        // Another handle of the same id (as from the next request's cookie).
        let same = SessionId::from_cookie(id.as_str().as_bytes()).expect("an id");
        assert_eq!(store.load(&same, 30_000).await.expect("load"), Some(record));
        assert_eq!(
            store
                .load(&SessionId::generate(), 1_000)
                .await
                .expect("load"),
            None,
            "an unknown id has no session"
        );
    }

    pub(super) async fn expired_records_are_not_loaded(subject: Subject) {
        let store = &subject.store;
        let id = SessionId::generate();
        let record = SessionRecord::new(data(json!({"a": 1})), 2_000);
        store.save(&id, &record, 1_000).await.expect("save");
        assert_eq!(store.load(&id, 1_999).await.expect("load"), Some(record));
        assert_eq!(
            store.load(&id, 2_000).await.expect("load"),
            None,
            "at expiry"
        );
        assert_eq!(store.load(&id, 90_000).await.expect("load"), None, "after");
    }

    pub(super) async fn save_replaces(subject: Subject) {
        let store = &subject.store;
        let id = SessionId::generate();
        let first = SessionRecord::new(data(json!({"step": 1, "old": true})), 10_000);
        let second = SessionRecord::new(data(json!({"step": 2})), 20_000);
        store.save(&id, &first, 1_000).await.expect("save");
        store.save(&id, &second, 2_000).await.expect("save again");
        assert_eq!(
            store.load(&id, 15_000).await.expect("load"),
            Some(second),
            "the second write, with its later expiry"
        );
        if let Some(names) = subject.stored_names().await {
            assert_eq!(names.len(), 1, "one entry per session: {names:?}");
        }
    }

    pub(super) async fn delete_removes(subject: Subject) {
        let store = &subject.store;
        let (id, other) = (SessionId::generate(), SessionId::generate());
        let record = SessionRecord::new(data(json!({"a": 1})), 10_000);
        store.save(&id, &record, 1_000).await.expect("save");
        store.save(&other, &record, 1_000).await.expect("save");
        store.delete(&id).await.expect("delete");
        assert_eq!(store.load(&id, 1_000).await.expect("load"), None);
        assert_eq!(
            store.load(&other, 1_000).await.expect("load"),
            Some(record),
            "only that session"
        );
        store.delete(&id).await.expect("deleting nothing is fine");
        store
            .delete(&SessionId::generate())
            .await
            .expect("an unknown id");
    }

    pub(super) async fn retired_records_round_trip(subject: Subject) {
        let store = &subject.store;
        let id = SessionId::generate();
        store
            .save(
                &id,
                &SessionRecord::new(data(json!({"u": 1})), 5_000),
                1_000,
            )
            .await
            .expect("save");
        let retired = SessionRecord::retired(9_000);
        store.save(&id, &retired, 2_000).await.expect("retire");
        let loaded = store.load(&id, 3_000).await.expect("load").expect("kept");
        assert!(loaded.retired);
        assert!(loaded.data.is_empty());
        assert_eq!(loaded, retired);
    }

    /// A request that loaded a live session and saves it after another
    /// request retired the id (a sign-out) must not make it live again.
    pub(super) async fn a_live_save_never_overwrites_a_retired_record(subject: Subject) {
        let store = &subject.store;
        let id = SessionId::generate();
        let live = SessionRecord::new(data(json!({"user_id": 7})), 600_000);
        assert_eq!(
            store
                .save_unless_retired(&id, &live, 1_000)
                .await
                .expect("save"),
            SaveOutcome::Written,
            "a new id"
        );
        let changed = SessionRecord::new(data(json!({"user_id": 7, "theme": "dark"})), 601_000);
        assert_eq!(
            store
                .save_unless_retired(&id, &changed, 2_000)
                .await
                .expect("save"),
            SaveOutcome::Written,
            "over a live record"
        );
        assert_eq!(store.load(&id, 2_000).await.expect("load"), Some(changed));

        let retired = SessionRecord::retired(900_000);
        store.save(&id, &retired, 3_000).await.expect("retire");
        let late = SessionRecord::new(data(json!({"user_id": 7, "theme": "light"})), 602_000);
        assert_eq!(
            store
                .save_unless_retired(&id, &late, 4_000)
                .await
                .expect("a refused save is no error"),
            SaveOutcome::Retired,
            "a live save over a retired record"
        );
        assert_eq!(
            store.load(&id, 4_000).await.expect("load"),
            Some(retired.clone()),
            "still retired, with its own expiry"
        );
        // A rotation retiring the id once more finds it retired as well.
        assert_eq!(
            store
                .save_unless_retired(&id, &SessionRecord::retired(950_000), 5_000)
                .await
                .expect("save"),
            SaveOutcome::Retired
        );
        assert_eq!(
            store.load(&id, 5_000).await.expect("load"),
            Some(retired),
            "unchanged"
        );
        if let Some(names) = subject.stored_names().await {
            assert_eq!(names.len(), 1, "one entry, the retired one: {names:?}");
        }
    }

    /// Live saves racing a retirement: whatever the order, the id ends
    /// retired (a save before it is overwritten, one after it refused). A
    /// check and a write with anything between them loses this.
    pub(super) async fn a_retirement_racing_live_saves_ends_retired(subject: Subject) {
        for round in 0..5 {
            let id = SessionId::generate();
            let live = SessionRecord::new(data(json!({"user_id": round})), 600_000);
            subject.store.save(&id, &live, 1_000).await.expect("save");
            let mut saves = tokio::task::JoinSet::new();
            for n in 0..20 {
                let (store, id) = (subject.store.clone(), id.clone());
                saves.spawn(async move {
                    if n == 10 {
                        let retired = SessionRecord::retired(900_000);
                        return store.save(&id, &retired, 2_000).await;
                    }
                    let record = SessionRecord::new(data(json!({ "n": n })), 600_000);
                    store
                        .save_unless_retired(&id, &record, 2_000)
                        .await
                        .map(|_| ())
                });
            }
            while let Some(saved) = saves.join_next().await {
                saved.expect("the task").expect("save");
            }
            let stored = subject
                .store
                .load(&id, 3_000)
                .await
                .expect("load")
                .expect("kept");
            assert!(stored.retired, "round {round}: revived as {stored:?}");
        }
    }

    pub(super) async fn ids_are_stored_by_hash(subject: Subject) {
        let store = &subject.store;
        let ids: Vec<SessionId> = (0..3).map(|_| SessionId::generate()).collect();
        let record = SessionRecord::new(data(json!({"a": 1})), 10_000);
        for id in &ids {
            store.save(id, &record, 1_000).await.expect("save");
        }
        let Some(names) = subject.stored_names().await else {
            return; // the memory store keeps nothing outside the process
        };
        assert_eq!(names.len(), ids.len(), "{names:?}");
        for id in &ids {
            let key = id.storage_key();
            assert!(
                names.iter().any(|name| name.ends_with(&key)),
                "kept under the hash {key}: {names:?}"
            );
            assert!(
                names.iter().all(|name| !name.contains(id.as_str())),
                "the raw id is nowhere in {names:?}"
            );
        }
    }

    pub(super) async fn delete_expired_removes_only_expired_within_its_limit(subject: Subject) {
        let store = &subject.store;
        let expired: Vec<SessionId> = (0..5).map(|_| SessionId::generate()).collect();
        let live: Vec<SessionId> = (0..3).map(|_| SessionId::generate()).collect();
        for id in &expired {
            let record = SessionRecord::new(data(json!({"gone": true})), 2_000);
            store.save(id, &record, 1_000).await.expect("save");
        }
        let kept = SessionRecord::new(data(json!({"kept": true})), 10_000);
        for id in &live {
            store.save(id, &kept, 1_000).await.expect("save");
        }
        let now = 5_000;
        let first = store.delete_expired(now, 2).await.expect("delete_expired");
        let rest = store
            .delete_expired(now, 100)
            .await
            .expect("delete_expired");
        let after = store
            .delete_expired(now, 100)
            .await
            .expect("delete_expired");
        if subject.sweeps() {
            assert_eq!(
                first, 2,
                "at most the limit, and the limit when there is more"
            );
            assert_eq!(rest, 3, "the rest of the expired ones");
            assert_eq!(after, 0, "nothing left to delete");
            assert_eq!(store.delete_expired(now, 0).await.expect("limit 0"), 0);
            if let Some(names) = subject.stored_names().await {
                assert_eq!(names.len(), live.len(), "only live rows remain: {names:?}");
            }
            if let Some(len) = store.len() {
                assert_eq!(len, 3);
            }
        } else {
            assert_eq!((first, rest, after), (0, 0, 0), "expires on its own");
        }
        for id in &live {
            assert_eq!(
                store.load(id, now).await.expect("load"),
                Some(kept.clone()),
                "live sessions survive"
            );
        }
    }

    pub(super) async fn concurrent_saves_all_load_back(subject: Subject) {
        let ids: Vec<SessionId> = (0..200).map(|_| SessionId::generate()).collect();
        let mut saves = tokio::task::JoinSet::new();
        for (n, id) in ids.iter().enumerate() {
            let (store, id) = (subject.store.clone(), id.clone());
            saves.spawn(async move {
                let record = SessionRecord::new(data(json!({ "n": n })), 600_000);
                store.save(&id, &record, 1_000).await
            });
        }
        while let Some(saved) = saves.join_next().await {
            saved.expect("the task").expect("save");
        }
        for (n, id) in ids.iter().enumerate() {
            let record = subject
                .store
                .load(id, 1_000)
                .await
                .expect("load")
                .unwrap_or_else(|| panic!("session {n} was lost"));
            assert_eq!(record.data.get("n"), Some(&json!(n)));
        }
        if let Some(names) = subject.stored_names().await {
            assert_eq!(names.len(), 200);
        }
    }

    /// A live record signed in as `principal`, created at 1 000.
    fn signed_in(principal: &str, value: Value, expires_at: u64) -> SessionRecord {
        SessionRecord::new(data(value), expires_at)
            .with_principal(Some(principal.to_owned()))
            .with_created_at(Some(1_000))
    }

    pub(super) async fn principal_and_creation_round_trip(subject: Subject) {
        let store = &subject.store;
        let id = SessionId::generate();
        let record = signed_in("user:7", json!({"cart": [1]}), 61_000);
        store.save(&id, &record, 1_000).await.expect("save");
        let loaded = store.load(&id, 2_000).await.expect("load").expect("live");
        assert_eq!(loaded.principal.as_deref(), Some("user:7"));
        assert_eq!(loaded.created_at_millis, Some(1_000));
        assert_eq!(loaded, record);
    }

    pub(super) async fn end_sessions_of(subject: Subject) {
        let store = &subject.store;
        let now = 2_000;
        let [kept, other, third, bobs, expired, guest] =
            std::array::from_fn(|_| SessionId::generate());
        for (id, record) in [
            (&kept, signed_in("alice", json!({"n": 1}), 60_000)),
            (&other, signed_in("alice", json!({"n": 2}), 60_000)),
            (&third, signed_in("alice", json!({"n": 3}), 60_000)),
            (&bobs, signed_in("bob", json!({"n": 4}), 60_000)),
            (&expired, signed_in("alice", json!({"n": 5}), 1_500)),
            (&guest, SessionRecord::new(data(json!({"n": 6})), 60_000)),
        ] {
            store.save(id, &record, 1_000).await.expect("save");
        }
        assert_eq!(
            store
                .end_sessions_of("alice", Some(&kept), now)
                .await
                .expect("end"),
            2,
            "alice's two other live sessions"
        );
        for ended in [&other, &third] {
            let record = store.load(ended, now).await.expect("load").expect("kept");
            assert!(record.retired, "ended means retired");
            assert!(record.data.is_empty(), "and forgotten: {record:?}");
            assert_eq!(
                store
                    .save_unless_retired(ended, &signed_in("alice", json!({"n": 9}), 60_000), now)
                    .await
                    .expect("save"),
                SaveOutcome::Retired,
                "a request still running cannot revive an ended session"
            );
        }
        for (live, n) in [(&kept, 1), (&bobs, 4), (&guest, 6)] {
            let record = store.load(live, now).await.expect("load").expect("live");
            assert!(!record.retired, "session {n} is left alone");
            assert_eq!(record.data, data(json!({"n": n})));
        }
        assert_eq!(
            store
                .end_sessions_of("alice", Some(&kept), now)
                .await
                .expect("end"),
            0,
            "nothing left to end"
        );
        assert_eq!(
            store
                .end_sessions_of("alice", None, now)
                .await
                .expect("end"),
            1,
            "everywhere: the kept one too"
        );
        assert!(
            store
                .load(&kept, now)
                .await
                .expect("load")
                .is_some_and(|record| record.retired)
        );
        assert_eq!(
            store
                .end_sessions_of("nobody", None, now)
                .await
                .expect("end"),
            0
        );
    }

    pub(super) async fn a_retired_or_rotated_session_leaves_the_index(subject: Subject) {
        let store = &subject.store;
        let now = 2_000;
        let (signed_out, rotated_to) = (SessionId::generate(), SessionId::generate());
        let record = signed_in("carol", json!({}), 60_000);
        store.save(&signed_out, &record, 1_000).await.expect("save");
        // A sign-out: the retired marker replaces the record.
        store
            .save(&signed_out, &SessionRecord::retired(60_000), now)
            .await
            .expect("retire");
        let saved = store
            .save_unless_retired(&rotated_to, &record, now)
            .await
            .expect("save");
        assert_eq!(saved, SaveOutcome::Written);
        assert_eq!(
            store
                .end_sessions_of("carol", None, now)
                .await
                .expect("end"),
            1,
            "only the live session counts"
        );
    }
}

/// One test per check for a backend, each on a store of its own.
macro_rules! conformance {
    ($backend:ident) => {
        mod $backend {
            use super::checks;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn round_trip() {
                checks::round_trip(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn expired_records_are_not_loaded() {
                checks::expired_records_are_not_loaded(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn save_replaces() {
                checks::save_replaces(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn delete_removes() {
                checks::delete_removes(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn retired_records_round_trip() {
                checks::retired_records_round_trip(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_live_save_never_overwrites_a_retired_record() {
                checks::a_live_save_never_overwrites_a_retired_record(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_retirement_racing_live_saves_ends_retired() {
                checks::a_retirement_racing_live_saves_ends_retired(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ids_are_stored_by_hash() {
                checks::ids_are_stored_by_hash(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn delete_expired_removes_only_expired_within_its_limit() {
                checks::delete_expired_removes_only_expired_within_its_limit(super::$backend())
                    .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_saves_all_load_back() {
                checks::concurrent_saves_all_load_back(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn principal_and_creation_round_trip() {
                checks::principal_and_creation_round_trip(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ending_a_principals_sessions_retires_all_but_the_kept_one() {
                checks::end_sessions_of(super::$backend()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_retired_or_rotated_session_leaves_the_index() {
                checks::a_retired_or_rotated_session_leaves_the_index(super::$backend()).await;
            }
        }
    };
}

conformance!(memory);
conformance!(redis);
conformance!(redis_cluster);
conformance!(redis_tls);
conformance!(valkey);
conformance!(valkey_cluster);
conformance!(valkey_tls);
conformance!(valkey_tls_cluster);
conformance!(postgres);
conformance!(postgres_via_pgbouncer);
conformance!(sqlite);

#[tokio::test]
async fn memory_store_refuses_a_new_session_when_full_but_replaces_and_reuses_expired_room() {
    let store = MemorySessionStore::new(2);
    let (a, b, c) = (
        SessionId::generate(),
        SessionId::generate(),
        SessionId::generate(),
    );
    let short = SessionRecord::new(data(json!({"a": 1})), 2_000);
    let long = SessionRecord::new(data(json!({"b": 1})), 10_000);
    store.save(&a, &short, 1_000).await.expect("first");
    store.save(&b, &long, 1_000).await.expect("second");

    let error = store
        .save(&c, &long, 1_000)
        .await
        .expect_err("a third session does not fit");
    assert!(error.is_full(), "{error}");
    assert!(error.to_string().contains('2'), "says the cap: {error}");

    let replaced = SessionRecord::new(data(json!({"b": 2})), 10_000);
    store
        .save(&b, &replaced, 1_500)
        .await
        .expect("replacing a session needs no room");
    assert_eq!(store.load(&b, 1_500).await.expect("load"), Some(replaced));

    // Once `a` expired, its room goes to a new session.
    store
        .save(&c, &long, 2_000)
        .await
        .expect("an expired session makes room");
    assert_eq!(store.load(&a, 1_999).await.expect("load"), None, "dropped");
    assert_eq!(store.len(), Some(2));
}

/// A store written before `save_unless_retired` existed: the trait's
/// default still refuses a live save that starts after the retirement.
struct WithoutConditionalSave(MemorySessionStore);

impl SessionStore for WithoutConditionalSave {
    fn load<'a>(
        &'a self,
        id: &'a SessionId,
        now_millis: u64,
    ) -> SessionFuture<'a, Option<SessionRecord>> {
        self.0.load(id, now_millis)
    }

    fn save<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, ()> {
        self.0.save(id, record, now_millis)
    }

    fn delete<'a>(&'a self, id: &'a SessionId) -> SessionFuture<'a, ()> {
        self.0.delete(id)
    }
}

#[tokio::test]
async fn the_default_conditional_save_refuses_a_save_after_the_retirement() {
    let store = WithoutConditionalSave(MemorySessionStore::new(10));
    let id = SessionId::generate();
    let live = SessionRecord::new(data(json!({"user_id": 7})), 600_000);
    assert_eq!(
        store
            .save_unless_retired(&id, &live, 1_000)
            .await
            .expect("save"),
        SaveOutcome::Written
    );
    let retired = SessionRecord::retired(900_000);
    store.save(&id, &retired, 2_000).await.expect("retire");
    assert_eq!(
        store
            .save_unless_retired(&id, &live, 3_000)
            .await
            .expect("save"),
        SaveOutcome::Retired
    );
    assert_eq!(store.load(&id, 3_000).await.expect("load"), Some(retired));
}

#[tokio::test]
async fn a_store_without_a_principal_index_refuses_to_end_sessions() {
    // The wrapper forwards only the required methods, as a store written
    // before the index existed does.
    let store = WithoutConditionalSave(MemorySessionStore::new(10));
    let error = store
        .end_sessions_of("alice", None, 1_000)
        .await
        .expect_err("no index: an error, not a silent zero");
    assert!(error.to_string().contains("index"), "{error}");
}

#[test]
fn a_record_from_before_principals_decodes_without_principal_or_creation() {
    let record = SessionRecord::decode(br#"{"data":{"a":1},"exp":5000,"retired":false,"v":1}"#)
        .expect("a version 1 record");
    assert_eq!(record, SessionRecord::new(data(json!({"a": 1})), 5_000));
    assert_eq!(record.principal, None);
    assert_eq!(record.created_at_millis, None);
}

async fn pttl(url: &str, key: &str) -> i64 {
    ::redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut redis_support::plain_connection(url).await)
        .await
        .expect("PTTL")
}

#[tokio::test]
async fn redis_keys_expire_in_redis_when_the_record_does() {
    let url = redis_support::require_redis();
    let prefix = redis_support::unique_prefix();
    let store = redis_store(&url, &prefix);
    let id = SessionId::generate();
    let key = format!("{prefix}:{}", id.storage_key());

    let record = SessionRecord::new(data(json!({"a": 1})), 61_000);
    store.save(&id, &record, 1_000).await.expect("save");
    let ttl = pttl(&url, &key).await;
    assert!(
        ttl > 0 && ttl <= 60_000,
        "PX until the record's expiry: {ttl}"
    );

    // A save moves Redis's expiry along with the record's.
    let longer = SessionRecord::new(data(json!({"a": 2})), 3_601_000);
    store.save(&id, &longer, 1_000).await.expect("save");
    let ttl = pttl(&url, &key).await;
    assert!(ttl > 60_000 && ttl <= 3_600_000, "extended: {ttl}");

    // Saving a record already expired still sets a TTL (of 1 ms), never
    // an error and never a key without one.
    let other = SessionId::generate();
    let other_key = format!("{prefix}:{}", other.storage_key());
    store
        .save(&other, &SessionRecord::new(Map::new(), 500), 1_000)
        .await
        .expect("save an expired record");
    let ttl = pttl(&url, &other_key).await;
    assert_ne!(ttl, -1, "every key has a TTL");
    assert_eq!(store.load(&other, 1_000).await.expect("load"), None);

    store.delete(&id).await.expect("delete");
    assert_eq!(pttl(&url, &key).await, -2, "no key left");
}

#[tokio::test]
async fn the_session_store_shares_the_idempotency_stores_redis_connection() {
    let url = redis_support::require_redis();
    let prefix = redis_support::unique_prefix();
    let idempotency =
        autumn_idempotency::RedisIdempotencyStore::new(&url, &format!("{prefix}:idem"))
            .expect("a Redis URL");
    let sessions = RedisSessionStore::new(idempotency.connection().clone(), &prefix);
    assert!(!idempotency.connection().is_connected());
    let id = SessionId::generate();
    sessions
        .save(&id, &SessionRecord::new(Map::new(), 61_000), 1_000)
        .await
        .expect("save");
    assert!(
        idempotency.connection().is_connected(),
        "the session store's first command connected the shared connection"
    );
    idempotency
        .ping()
        .await
        .expect("the same connection answers");
}

#[tokio::test]
async fn an_unreachable_redis_fails_fast_naming_it_without_its_password() {
    let port = autumn_testkit::free_port(); // closed again: nothing listens there
    let store = redis_store(&format!("redis://:hunter2@127.0.0.1:{port}"), "p");
    let id = SessionId::generate();
    let record = SessionRecord::new(Map::new(), 61_000);
    let fast = Duration::from_secs(10);
    let errors = [
        tokio::time::timeout(fast, store.load(&id, 1_000))
            .await
            .expect("load answers")
            .expect_err("no Redis"),
        tokio::time::timeout(fast, store.save(&id, &record, 1_000))
            .await
            .expect("save answers")
            .expect_err("no Redis"),
        tokio::time::timeout(fast, store.delete(&id))
            .await
            .expect("delete answers")
            .expect_err("no Redis"),
    ];
    for error in errors {
        let message = error.to_string();
        assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
        assert!(!error.is_full());
    }
}

/// What a database sweeps: 7 expired sessions, 2 live ones.
async fn expired_and_live(store: &DbSessionStore) -> Vec<SessionId> {
    let live: Vec<SessionId> = (0..2).map(|_| SessionId::generate()).collect();
    for _ in 0..7 {
        let record = SessionRecord::new(Map::new(), 2_000);
        store
            .save(&SessionId::generate(), &record, 1_000)
            .await
            .expect("save");
    }
    for id in &live {
        let record = SessionRecord::new(Map::new(), 600_000);
        store.save(id, &record, 1_000).await.expect("save");
    }
    live
}

async fn the_sweeper_deletes_expired_sessions_by_its_clock(url: &str) {
    let store = DbSessionStore::new(pool(url));
    let live = expired_and_live(&store).await;
    assert_eq!(
        store.sweep_expired(1_500).await.expect("sweep"),
        0,
        "none yet"
    );

    let clock = ManualClock::starting_at(1_000);
    let sweeper = store.spawn_sweeper(Duration::from_millis(20), Arc::new(clock.clone()));
    let subject = table(url);
    // Not expired by the sweeper's clock. (That the sweeper reads its own
    // clock, not the system's, is shown below without waiting: by the
    // system clock every row here expired decades ago, the live ones too,
    // and those must survive.)
    assert_eq!(subject.stored_names().await.expect("rows").len(), 9);

    clock.advance(Duration::from_secs(5));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = subject.stored_names().await.expect("rows").len();
        if left == live.len() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sweeper left {left} rows"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sweeper.abort();
    for id in &live {
        assert!(store.load(id, 6_000).await.expect("load").is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sweeper_deletes_expired_sessions() {
    the_sweeper_deletes_expired_sessions_by_its_clock(&database::fresh_postgres_schema()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sweeper_deletes_expired_sessions() {
    the_sweeper_deletes_expired_sessions_by_its_clock(&database::fresh_sqlite_file()).await;
}

/// While another replica holds the sessions table's sweep lock, a sweep
/// does nothing; once it is free, the sweep deletes every expired session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_sweeps_the_sessions_table_at_a_time() {
    use diesel_async::{AsyncConnection as _, SimpleAsyncConnection as _};
    let url = database::fresh_postgres_schema();
    let store = DbSessionStore::new(pool(&url));
    expired_and_live(&store).await;

    let mut other = diesel_async::AsyncPgConnection::establish(&url)
        .await
        .expect("another connection");
    let lock = "(1635087477::bigint << 32) | 'autumn_sessions'::regclass::oid::bigint";
    other
        .batch_execute(&format!("SELECT pg_advisory_lock({lock})"))
        .await
        .expect("take the sweep lock");
    assert_eq!(
        store.sweep_expired(5_000).await.expect("sweep"),
        0,
        "swept while another replica held the sweep lock"
    );
    other
        .batch_execute(&format!("SELECT pg_advisory_unlock({lock})"))
        .await
        .expect("release the sweep lock");
    assert_eq!(store.sweep_expired(5_000).await.expect("sweep"), 7);
}

/// The sweep's batches read through `autumn_sessions_expiry`: with
/// sequential scans priced out, a sweep scans that index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_session_sweep_uses_the_expiry_index() {
    use diesel_async::{AsyncConnection as _, RunQueryDsl as _};
    #[derive(diesel::QueryableByName)]
    struct Scans {
        #[diesel(sql_type = Text)]
        value: String,
    }
    let schema_url = database::fresh_postgres_schema();
    let url = format!("{schema_url}%20-c%20enable_seqscan%3Doff");
    let store = DbSessionStore::new(pool(&url));
    expired_and_live(&store).await;
    assert_eq!(store.sweep_expired(5_000).await.expect("sweep"), 7);
    drop(store); // its connections report their statistics as they close

    let mut probe = diesel_async::AsyncPgConnection::establish(&schema_url)
        .await
        .expect("a connection");
    // Index statistics reach the view once the sweeping backend reports
    // them; each probe statement is a transaction of its own, so each reads
    // them afresh.
    let scans = "SELECT idx_scan::text AS value FROM pg_stat_user_indexes \
        WHERE schemaname = current_schema() AND indexrelname = 'autumn_sessions_expiry'";
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let seen: Vec<Scans> = diesel::sql_query(scans)
            .load(&mut probe)
            .await
            .expect("read the index statistics");
        let seen = seen
            .into_iter()
            .next()
            .expect("the expiry index exists")
            .value;
        if seen != "0" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sweep never used the expiry index"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The statements of a migration's `up.sql` that start with `UPDATE`.
fn updates_in(migration: &str) -> Vec<String> {
    let code: String = migration
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    code.split(';')
        .map(str::trim)
        .filter(|statement| statement.starts_with("UPDATE"))
        .map(str::to_owned)
        .collect()
}

/// Rows written before `autumn_sessions` had its `retired` column: the
/// migration that adds it marks the retired ones, and only those (a
/// session whose values look like the marker stays live).
async fn rows_retired_before_the_column_existed_are_marked(url: &str, migration: &str) {
    use diesel_async::RunQueryDsl as _;
    let pool = pool(url);
    let store = DbSessionStore::new(pool.clone());
    let (retired, live, lookalike) = (
        SessionId::generate(),
        SessionId::generate(),
        SessionId::generate(),
    );
    store
        .save(&retired, &SessionRecord::retired(900_000), 1_000)
        .await
        .expect("save");
    store
        .save(
            &live,
            &SessionRecord::new(data(json!({"a": 1})), 600_000),
            1_000,
        )
        .await
        .expect("save");
    let marker_text = String::from_utf8(SessionRecord::retired(900_000).encode()).expect("UTF-8");
    store
        .save(
            &lookalike,
            &SessionRecord::new(data(json!({"retired": true, "note": marker_text})), 600_000),
            1_000,
        )
        .await
        .expect("save");
    let mut statements = vec!["UPDATE autumn_sessions SET retired = FALSE".to_owned()];
    let updates = updates_in(migration);
    assert!(!updates.is_empty(), "the migration marks old rows");
    statements.extend(updates);
    for sql in &statements {
        match pool.get().await.expect("a connection") {
            autumn_idempotency::database::DbConnection::Postgres(mut conn) => {
                diesel::sql_query(sql).execute(&mut *conn).await
            }
            autumn_idempotency::database::DbConnection::Sqlite(mut conn) => {
                diesel::sql_query(sql).execute(&mut *conn).await
            }
            _ => unreachable!("the tests build both backends"),
        }
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    }
    let late = SessionRecord::new(data(json!({"a": 2})), 600_000);
    assert_eq!(
        store
            .save_unless_retired(&retired, &late, 2_000)
            .await
            .expect("save"),
        SaveOutcome::Retired,
        "a row retired before the column existed"
    );
    assert_eq!(
        store
            .save_unless_retired(&live, &late, 2_000)
            .await
            .expect("save"),
        SaveOutcome::Written
    );
    assert_eq!(
        store
            .save_unless_retired(&lookalike, &late, 2_000)
            .await
            .expect("save"),
        SaveOutcome::Written,
        "values that look like the marker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migration_marks_sessions_retired_before_the_column() {
    rows_retired_before_the_column_existed_are_marked(
        &database::fresh_postgres_schema(),
        include_str!(
            "../../../../migrations/postgres/2026-12-06-000000_add_autumn_sessions_retired/up.sql"
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migration_marks_sessions_retired_before_the_column() {
    rows_retired_before_the_column_existed_are_marked(
        &database::fresh_sqlite_file(),
        include_str!(
            "../../../../migrations/sqlite/2026-12-06-000000_add_autumn_sessions_retired/up.sql"
        ),
    )
    .await;
}
