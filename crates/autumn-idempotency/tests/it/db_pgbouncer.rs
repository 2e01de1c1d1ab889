//! The database store through a real PgBouncer in transaction pooling mode
//! (`statement_cache = false`): the conformance suite, replicas sharing the
//! store, and the round trips a request costs.
#![cfg(feature = "postgres")]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::support::app::Fixture;
use crate::support::database::{FreshDatabase as _, PgBouncer, RoundTrips};
use autumn_idempotency::IdempotencyStore;
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::database::{DbIdempotencyStore, DbPool};
use http::StatusCode;

/// The PgBouncer this binary's tests share (each on a database of its own).
fn bouncer() -> &'static PgBouncer {
    static BOUNCER: OnceLock<PgBouncer> = OnceLock::new();
    BOUNCER.get_or_init(PgBouncer::start)
}

fn store(url: &str, clock: &ManualClock) -> DbIdempotencyStore {
    let pool = DbPool::with_statement_cache(url, 8, Duration::from_secs(5), false).expect("pool");
    DbIdempotencyStore::new(pool).with_clock(Arc::new(clock.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_store_passes_the_conformance_suite_through_pgbouncer() {
    crate::support::conformance::run_all_shared(|clocks| {
        let url = bouncer().fresh_database();
        clocks
            .iter()
            .map(|clock| Arc::new(store(&url, clock)) as Arc<dyn IdempotencyStore>)
            .collect()
    })
    .await;
}

/// Many clients' statements interleaved on PgBouncer's few server
/// connections: with prepared statements kept across transactions, a
/// statement prepared on one server connection would be missing (or be
/// another client's) on the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_replicas_interleaving_on_few_server_connections_all_succeed() {
    let url = bouncer().fresh_database();
    let clock = ManualClock::new();
    let replicas: Vec<Arc<DbIdempotencyStore>> =
        (0..4).map(|_| Arc::new(store(&url, &clock))).collect();
    let tasks: Vec<_> = (0..400)
        .map(|i| {
            let store = replicas[i % replicas.len()].clone();
            tokio::spawn(async move {
                let key = format!("k{}", i / 2);
                let owner = format!("o{i}");
                match store.claim(&key, &owner, Duration::from_secs(60)).await {
                    Ok(autumn_idempotency::Claim::Acquired) => {
                        let record = autumn_idempotency::IdempotencyRecord::new(
                            http::StatusCode::CREATED,
                            Vec::<(http::HeaderName, http::HeaderValue)>::new(),
                            bytes::Bytes::from_static(b"done"),
                        );
                        let recorded = store
                            .finish(
                                &key,
                                &owner,
                                record,
                                b"fp".to_vec(),
                                Duration::from_secs(600),
                            )
                            .await
                            .map_err(|e| e.to_string())?;
                        Ok::<_, String>(usize::from(recorded))
                    }
                    Ok(_) => Ok(0),
                    Err(error) => Err(error.to_string()),
                }
            })
        })
        .collect();
    let mut recorded = 0;
    for task in tasks {
        recorded += task.await.expect("task").expect("every operation succeeds");
    }
    assert_eq!(recorded, 200, "one record per key");
}

/// Two replicas of the app, each with its own pool, through PgBouncer.
fn replicas(url: &str) -> (Fixture, Fixture) {
    let clock = ManualClock::new();
    let replica = || Fixture::with_store(Arc::new(store(url, &clock)), clock.clone(), |l| l);
    (replica(), replica())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_duplicates_over_two_replicas_run_once_through_pgbouncer() {
    let (a, b) = replicas(&bouncer().fresh_database());
    let requests: Vec<_> = (0..200)
        .map(|i| {
            let replica = if i % 2 == 0 { &a } else { &b };
            tokio::spawn(replica.post("/orders").key("burst").body("same").send())
        })
        .collect();
    let (mut created, mut others) = (0, 0);
    for request in requests {
        let answer = request.await.expect("request");
        match answer.status {
            StatusCode::CREATED if !answer.replayed() => created += 1,
            StatusCode::CREATED | StatusCode::CONFLICT => others += 1,
            other => panic!("unexpected {other}: {}", answer.text()),
        }
    }
    assert_eq!(a.runs() + b.runs(), 1, "exactly one run over both replicas");
    assert_eq!((created, others), (1, 199));
    let retry = b.post("/orders").key("burst").body("same").send().await;
    assert!(retry.replayed(), "{}", retry.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_runs_through_pgbouncer_and_replicas_take_turns() {
    let url = bouncer().fresh_database();
    let clock = ManualClock::new();
    let (a, b) = (store(&url, &clock), store(&url, &clock));
    let ttl = Duration::from_secs(60);
    for i in 0..50 {
        let key = format!("k{i}");
        assert_eq!(
            a.claim(&key, "o", ttl).await.expect("claim"),
            autumn_idempotency::Claim::Acquired
        );
    }
    clock.advance(ttl + Duration::from_secs(1));
    // Both replicas sweep at once, in small batches: each batch holds a
    // transaction-level lock, so they take turns and nothing is left.
    let (swept_a, swept_b) =
        tokio::join!(a.sweep_expired_in_batches(7), b.sweep_expired_in_batches(7));
    let (swept_a, swept_b) = (swept_a.expect("sweep a"), swept_b.expect("sweep b"));
    assert!(swept_a + swept_b <= 50, "{swept_a} + {swept_b}");
    let rest = a.sweep_expired().await.expect("sweep again");
    assert_eq!(swept_a + swept_b + rest, 50, "every expired row went once");
    assert_eq!(a.sweep_expired().await.expect("nothing left"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_through_pgbouncer_first_time_ten_replay_five() {
    use autumn_idempotency::{Claim, IdempotencyRecord};
    let proxy = RoundTrips::proxy(&bouncer().fresh_database()).await;
    let store = store(proxy.url(), &ManualClock::new());
    let ttl = Duration::from_secs(60);
    let record = IdempotencyRecord::new(StatusCode::CREATED, [], "made");
    // Connect first: making the connection is not a request's cost.
    assert_eq!(
        store.claim("warm", "w", ttl).await.expect("claim"),
        Claim::Acquired
    );
    proxy.take();

    assert_eq!(
        store.claim("k", "a", ttl).await.expect("claim"),
        Claim::Acquired
    );
    assert!(
        store
            .finish("k", "a", record, vec![1], ttl)
            .await
            .expect("finish")
    );
    // Each operation: BEGIN, prepare, execute, close, COMMIT. The close is
    // sent without waiting for its answer (it travels ahead of the
    // COMMIT), so a client waits on four of the five.
    assert_eq!(proxy.take(), 10, "a first-time request");
    assert!(matches!(
        store.claim("k", "b", ttl).await.expect("claim"),
        Claim::Completed { .. }
    ));
    assert_eq!(proxy.take(), 5, "a replay");
}

/// Replicas starting together on an empty database through PgBouncer: each
/// runs the framework migrations over its own pool, at the same moment. With
/// the lock and the migrations on different server connections, two would
/// create the same table (one fails), or one would wait for a lock left
/// behind on a pooled server connection (and never start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_through_pgbouncer_migrate_once_and_all_start() {
    use autumn_idempotency::FRAMEWORK_MIGRATIONS;
    use diesel::sql_types::{BigInt, Text};
    use diesel_async::{AsyncConnection as _, RunQueryDsl as _};
    let bouncer = bouncer();
    let url = bouncer.empty_database();
    let starts: Vec<_> = (0..6)
        .map(|_| {
            let pool = DbPool::with_statement_cache(&url, 2, Duration::from_secs(10), false)
                .expect("pool");
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_secs(60), FRAMEWORK_MIGRATIONS.run(&pool))
                    .await
                    .map_err(|_| "the migrations did not finish within 60 s".to_owned())?
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    for (replica, start) in starts.into_iter().enumerate() {
        if let Err(error) = start.await.expect("task") {
            panic!("replica {replica} did not start: {error}");
        }
    }

    #[derive(diesel::QueryableByName)]
    struct Version {
        #[diesel(sql_type = Text)]
        version: String,
    }
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let direct = bouncer.direct(&url);
    let mut conn = diesel_async::AsyncPgConnection::establish(&direct)
        .await
        .expect("connect directly");
    let versions: Vec<Version> =
        diesel::sql_query("SELECT version FROM __diesel_schema_migrations ORDER BY version")
            .load(&mut conn)
            .await
            .expect("applied migrations");
    let on_disk = std::fs::read_dir(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../migrations/postgres"
    ))
    .expect("migrations directory")
    .count();
    let mut distinct: Vec<&str> = versions.iter().map(|v| v.version.as_str()).collect();
    distinct.dedup();
    assert_eq!(distinct.len(), on_disk, "every migration applied, once");
    let tables: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM pg_tables WHERE tablename IN \
         ('autumn_idempotency_keys', 'autumn_sessions', 'autumn_api_tokens')",
    )
    .get_result(&mut conn)
    .await
    .expect("tables");
    assert_eq!(tables.n, 3);
    // No advisory lock was left on PgBouncer's server connections.
    let locks: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
         WHERE l.locktype = 'advisory' AND d.datname = current_database()",
    )
    .get_result(&mut conn)
    .await
    .expect("locks");
    assert_eq!(locks.n, 0, "advisory locks left behind");
}
