//! The database store on real PostgreSQL and SQLite: the conformance suite,
//! sweeping, and two replicas sharing one database.
#![cfg(any(feature = "postgres", feature = "sqlite"))]

use std::sync::Arc;
use std::time::Duration;

use crate::support::database;
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{IdempotencyRecord, IdempotencyStore};
use http::StatusCode;

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_passes_the_conformance_suite() {
    crate::support::conformance::run_all_shared(|clocks| {
        // The stores outlive this factory: the schema stays, for a later
        // run to drop.
        let url = database::fresh_postgres_schema().keep();
        clocks
            .into_iter()
            .map(|clock| Arc::new(database::store(&url, clock)) as Arc<dyn IdempotencyStore>)
            .collect()
    })
    .await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_passes_the_conformance_suite() {
    crate::support::conformance::run_all_shared(|clocks| {
        let url = database::fresh_sqlite_file();
        clocks
            .into_iter()
            .map(|clock| Arc::new(database::store(&url, clock)) as Arc<dyn IdempotencyStore>)
            .collect()
    })
    .await;
}

async fn sweeping_drops_only_dead_rows(url: &str) {
    let clock = ManualClock::new();
    let store = database::store(url, clock.clone());
    let record = IdempotencyRecord::new(StatusCode::OK, [], "x");
    let ttl = Duration::from_secs(60);
    for i in 0..10 {
        let key = format!("old-{i}");
        assert!(store.try_lock(&key, "o", ttl).await.expect("lock"));
        assert!(
            store
                .finish(&key, "o", record.clone(), vec![1], ttl)
                .await
                .expect("finish")
        );
    }
    assert!(store.try_lock("crashed", "o", ttl).await.expect("lock"));
    clock.advance(Duration::from_secs(61));
    assert!(store.try_lock("live", "o", ttl).await.expect("lock"));
    // Batches of 4: two full ones, then a short one that ends the sweep.
    assert_eq!(store.sweep_expired_in_batches(4).await.expect("sweep"), 11);
    assert_eq!(store.sweep_expired().await.expect("sweep"), 0);
    assert!(store.get("live").await.expect("get").is_some());
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_sweeper_keeps_the_table_bounded() {
    sweeping_drops_only_dead_rows(&database::fresh_postgres_schema()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sweeper_keeps_the_table_bounded() {
    sweeping_drops_only_dead_rows(&database::fresh_sqlite_file()).await;
}

/// Renewing never shortens a lock (`IdempotencyTx::commit` extends it to the
/// record's lifetime while a session change waits to be saved; the heartbeat
/// must not undo that), and a live recovery point keeps its row from the
/// sweeper and from the unlock's clean-up.
async fn renewal_extends_only_and_recovery_points_keep_their_row(url: &str) {
    use autumn_idempotency::clock::Clock as _;
    use autumn_idempotency::database::DbConnection;
    use diesel_async::SimpleAsyncConnection as _;
    let clock = ManualClock::new();
    let store = database::store(url, clock.clone());
    let long = Duration::from_secs(600);
    assert!(store.try_lock("k", "o", long).await.expect("lock"));
    assert!(
        store
            .renew_lock("k", "o", Duration::from_secs(30))
            .await
            .expect("renew")
    );
    clock.advance(Duration::from_secs(31));
    assert!(
        !store.try_lock("k", "other", long).await.expect("try"),
        "the longer deadline stands"
    );
    // A row holding only a recovery point (its run crashed, its lock lapsed).
    let now = i64::try_from(clock.now_millis()).expect("millis fit");
    let sql = format!(
        "INSERT INTO autumn_idempotency_keys (storage_key, lock_owner, lock_expires_at, \
           recovery_point, recovery_body_hash, recovery_expires_at) \
         VALUES ('rp', 'gone', {now}, 'charged', X'01', {})",
        now + 60_000
    );
    #[allow(unreachable_patterns)]
    match store.pool().get().await.expect("connection") {
        #[cfg(feature = "postgres")]
        DbConnection::Postgres(mut conn) => conn
            .batch_execute(&sql.replace("X'01'", "'\\x01'::bytea"))
            .await
            .expect("insert"),
        #[cfg(feature = "sqlite")]
        DbConnection::Sqlite(mut conn) => conn.batch_execute(&sql).await.expect("insert"),
        _ => unreachable!(),
    }
    clock.advance(Duration::from_secs(1));
    assert!(
        store
            .try_lock("rp", "retry", long)
            .await
            .expect("the key is free")
    );
    store.unlock("rp", "retry").await.expect("unlock");
    assert_eq!(
        store.sweep_expired().await.expect("sweep"),
        0,
        "the point is live"
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        store.sweep_expired().await.expect("sweep"),
        1,
        "then it goes"
    );
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_renewal_extends_only_and_recovery_points_keep_their_row() {
    renewal_extends_only_and_recovery_points_keep_their_row(&database::fresh_postgres_schema())
        .await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_renewal_extends_only_and_recovery_points_keep_their_row() {
    renewal_extends_only_and_recovery_points_keep_their_row(&database::fresh_sqlite_file()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_migrating_an_empty_database_at_once_all_succeed() {
    use autumn_idempotency::FRAMEWORK_MIGRATIONS;
    use autumn_idempotency::database::DbPool;
    let url = database::empty_postgres_schema();
    let replicas: Vec<_> = (0..4)
        .map(|_| {
            let pool = DbPool::new(&url, 1, Duration::from_secs(5)).expect("pool");
            tokio::spawn(async move { FRAMEWORK_MIGRATIONS.run(&pool).await })
        })
        .collect();
    for replica in replicas {
        replica.await.expect("task").expect("migrations");
    }
    let store = database::store(&url, ManualClock::new());
    assert!(
        store
            .try_lock("k", "o", Duration::from_secs(1))
            .await
            .expect("the table exists")
    );
}

/// A connection of the test's own on the store's schema, for looking at what
/// the store did from the database's side.
#[cfg(feature = "postgres")]
async fn probe(url: &str) -> diesel_async::AsyncPgConnection {
    use diesel_async::AsyncConnection as _;
    diesel_async::AsyncPgConnection::establish(url)
        .await
        .expect("probe connection")
}

#[cfg(feature = "postgres")]
#[derive(diesel::QueryableByName, Debug, PartialEq)]
struct Text {
    #[diesel(sql_type = diesel::sql_types::Text)]
    value: String,
}

#[cfg(feature = "postgres")]
async fn text(conn: &mut diesel_async::AsyncPgConnection, query: &str) -> String {
    use diesel_async::RunQueryDsl as _;
    let rows: Vec<Text> = diesel::sql_query(query)
        .load(conn)
        .await
        .expect("probe query");
    rows.into_iter()
        .next()
        .map(|row| row.value)
        .unwrap_or_default()
}

/// A replay must be a plain read: no row lock (which writes the locker's
/// transaction id into the row, and WAL with it) and no waiting on another
/// transaction's lock, so replays of one key never queue behind each other.
#[cfg(feature = "postgres")]
/// Claims `key` as owner "first" and records a 201 "made" under it, with
/// fingerprint `[1]`; returns the TTL used and the record.
async fn record_one(store: &impl IdempotencyStore, key: &str) -> (Duration, IdempotencyRecord) {
    let ttl = Duration::from_secs(60);
    let record = IdempotencyRecord::new(StatusCode::CREATED, [], "made");
    assert_eq!(
        store.claim(key, "first", ttl).await.expect("claim"),
        autumn_idempotency::Claim::Acquired
    );
    assert!(
        store
            .finish(key, "first", record.clone(), vec![1], ttl)
            .await
            .expect("finish")
    );
    (ttl, record)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_replay_takes_no_row_lock() {
    use autumn_idempotency::Claim;
    use diesel_async::SimpleAsyncConnection as _;
    let url = database::fresh_postgres_schema();
    let store = Arc::new(database::store(&url, ManualClock::new()));
    let (ttl, record) = record_one(store.as_ref(), "k").await;
    let replayed = Claim::Completed {
        record,
        fingerprint: vec![1],
    };

    let mut probe = probe(&url).await;
    let xmax = "SELECT xmax::text AS value FROM autumn_idempotency_keys WHERE storage_key = 'k'";
    let before = text(&mut probe, xmax).await;
    for i in 0..20 {
        let owner = format!("replay-{i}");
        assert_eq!(
            store.claim("k", &owner, ttl).await.expect("claim"),
            replayed
        );
    }
    assert_eq!(
        text(&mut probe, xmax).await,
        before,
        "a replay locked (wrote to) the row"
    );

    // Another transaction holds the row lock: replays answer regardless,
    // all at once.
    probe
        .batch_execute(
            "BEGIN; SELECT 1 FROM autumn_idempotency_keys WHERE storage_key = 'k' FOR UPDATE",
        )
        .await
        .expect("hold the row lock");
    let replays: Vec<_> = (0..20)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.claim("k", &format!("busy-{i}"), ttl).await })
        })
        .collect();
    let answers = tokio::time::timeout(Duration::from_secs(5), async {
        let mut answers = Vec::new();
        for replay in replays {
            answers.push(replay.await.expect("task").expect("claim"));
        }
        answers
    })
    .await;
    probe.batch_execute("ROLLBACK").await.expect("release");
    let answers = answers.expect("replays queued behind another transaction's row lock");
    assert!(answers.iter().all(|answer| *answer == replayed));
}

/// The sweep's predicate is the indexed expression: with sequential scans
/// priced out, the sweep reads through `autumn_idempotency_keys_expiry`.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_sweep_uses_the_expiry_index() {
    let schema_url = database::fresh_postgres_schema();
    let url = format!("{schema_url}%20-c%20enable_seqscan%3Doff");
    let clock = ManualClock::new();
    let store = database::store(&url, clock.clone());
    let ttl = Duration::from_secs(60);
    for i in 0..30 {
        assert!(
            store
                .try_lock(&format!("dead-{i}"), "o", ttl)
                .await
                .expect("lock")
        );
    }
    clock.advance(ttl + Duration::from_secs(1));
    assert_eq!(store.sweep_expired().await.expect("sweep"), 30);

    // Index statistics reach the views once the sweeping backend reports
    // them (at the latest when its connection closes, right after a sweep).
    let mut probe = probe(&schema_url).await;
    // Each probe statement is a transaction of its own, so each reads the
    // statistics afresh.
    let scans = "SELECT idx_scan::text AS value FROM pg_stat_user_indexes \
        WHERE schemaname = current_schema() AND indexrelname = 'autumn_idempotency_keys_expiry'";
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let seen = text(&mut probe, scans).await;
        assert!(!seen.is_empty(), "no statistics for the expiry index");
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

/// One replica sweeps a table at a time: while the sweep lock is held
/// elsewhere, a sweep does nothing; replicas sweeping together share the
/// work without deleting a row twice or failing.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_sweeps_at_a_time() {
    use diesel_async::SimpleAsyncConnection as _;
    let url = database::fresh_postgres_schema();
    let clock = ManualClock::new();
    let a = database::store(&url, clock.clone());
    let b = database::store(&url, clock.clone());
    let ttl = Duration::from_secs(60);
    for i in 0..40 {
        assert!(
            a.try_lock(&format!("dead-{i}"), "o", ttl)
                .await
                .expect("lock")
        );
    }
    clock.advance(ttl + Duration::from_secs(1));

    let mut other = probe(&url).await;
    let lock = "(1635087477::bigint << 32) | 'autumn_idempotency_keys'::regclass::oid::bigint";
    other
        .batch_execute(&format!("SELECT pg_advisory_lock({lock})"))
        .await
        .expect("take the sweep lock");
    assert_eq!(
        a.sweep_expired().await.expect("sweep"),
        0,
        "swept while another replica held the sweep lock"
    );
    other
        .batch_execute(&format!("SELECT pg_advisory_unlock({lock})"))
        .await
        .expect("release the sweep lock");

    let (from_a, from_b) =
        tokio::join!(a.sweep_expired_in_batches(3), b.sweep_expired_in_batches(3));
    let swept = from_a.expect("sweep a") + from_b.expect("sweep b");
    let left = a.sweep_expired().await.expect("sweep");
    assert_eq!(swept + left, 40);
}

/// After a PostgreSQL restart the pooled connection is dead, and the first
/// statement on it fails. When that statement is the record write (or the
/// unlock), it is retried once on a new connection: the response is kept,
/// and a retry of the request replays it instead of running again.
#[cfg(feature = "postgres")]
#[test]
fn finish_and_unlock_survive_a_postgres_restart() {
    use autumn_idempotency::database::DbPool;
    use autumn_idempotency::{Claim, FRAMEWORK_MIGRATIONS};
    let server = database::PrivatePostgres::start();
    let url = server.url();
    // Nothing runs on this runtime while the server restarts, so the pooled
    // connection has not noticed when the next statement comes: as in an app
    // whose request finishes just after the restart.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let ttl = Duration::from_secs(60);
    let record = IdempotencyRecord::new(StatusCode::CREATED, [], "made");
    let store = runtime.block_on(async {
        let pool = DbPool::new(&url, 1, Duration::from_secs(5)).expect("pool");
        FRAMEWORK_MIGRATIONS.run(&pool).await.expect("migrations");
        let store = database::store(&url, ManualClock::new());
        for key in ["finished", "released"] {
            assert_eq!(
                store.claim(key, "a", ttl).await.expect("claim"),
                Claim::Acquired
            );
        }
        store
    });

    server.restart();
    runtime.block_on(async {
        assert!(
            store
                .finish("finished", "a", record.clone(), vec![1], ttl)
                .await
                .expect("finish right after a restart")
        );
        assert_eq!(
            store.claim("finished", "b", ttl).await.expect("claim"),
            Claim::Completed {
                record,
                fingerprint: vec![1]
            }
        );
    });

    server.restart();
    runtime.block_on(async {
        store
            .unlock("released", "a")
            .await
            .expect("unlock right after a restart");
        assert_eq!(
            store.claim("released", "b", ttl).await.expect("claim"),
            Claim::Acquired
        );
    });
}

/// On SQLite a replay is a plain read too: while another connection holds
/// the file's one write lock, replays still answer at once (in WAL mode a
/// reader never waits for the writer).
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_replay_does_not_wait_for_the_writer() {
    use autumn_idempotency::Claim;
    use diesel::Connection as _;
    use diesel::connection::SimpleConnection as _;
    let url = database::fresh_sqlite_file();
    let store = database::store(&url, ManualClock::new());
    let (ttl, record) = record_one(&store, "k").await;

    let path = url.trim_start_matches("sqlite://");
    let mut writer = diesel::SqliteConnection::establish(path).expect("writer connection");
    writer
        .batch_execute("BEGIN IMMEDIATE")
        .expect("take the write lock");
    let replay = tokio::time::timeout(Duration::from_secs(2), store.claim("k", "again", ttl)).await;
    writer.batch_execute("ROLLBACK").expect("release");
    assert_eq!(
        replay
            .expect("the replay waited for the writer")
            .expect("claim"),
        Claim::Completed {
            record,
            fingerprint: vec![1]
        }
    );
}

/// The round-trip budget on PostgreSQL, counted on the wire: a first-time
/// request costs two (claim, finish) and a replay one, every statement
/// prepared once per connection.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_round_trips_first_time_two_replay_one() {
    use autumn_idempotency::Claim;
    use autumn_idempotency::database::{DbIdempotencyStore, DbPool};
    let schema = database::fresh_postgres_schema();
    let proxy = database::RoundTrips::proxy(&schema).await;
    let pool = DbPool::new(proxy.url(), 1, Duration::from_secs(5)).expect("pool");
    let store = DbIdempotencyStore::new(pool).with_clock(Arc::new(ManualClock::new()));
    let ttl = Duration::from_secs(60);
    let record = IdempotencyRecord::new(StatusCode::CREATED, [], "made");
    // Warm up: connect and prepare the statements.
    for key in ["warm", "warm"] {
        if store.claim(key, "w", ttl).await.expect("claim") == Claim::Acquired {
            assert!(
                store
                    .finish(key, "w", record.clone(), vec![1], ttl)
                    .await
                    .expect("finish")
            );
        }
    }
    proxy.take();

    assert_eq!(
        store.claim("k", "a", ttl).await.expect("claim"),
        Claim::Acquired
    );
    assert!(
        store
            .finish("k", "a", record.clone(), vec![1], ttl)
            .await
            .expect("finish")
    );
    assert_eq!(proxy.take(), 2, "a first-time request");
    for i in 0..5 {
        assert!(matches!(
            store
                .claim("k", &format!("r{i}"), ttl)
                .await
                .expect("claim"),
            Claim::Completed { .. }
        ));
        assert_eq!(proxy.take(), 1, "a replay");
    }
}
