//! The database store on real PostgreSQL and SQLite: the conformance suite,
//! sweeping, and two replicas sharing one database.
#![cfg(any(feature = "postgres", feature = "sqlite"))]

mod support;

use std::sync::Arc;
use std::time::Duration;

use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{IdempotencyRecord, IdempotencyStore};
use http::StatusCode;
use support::database;

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_passes_the_conformance_suite() {
    support::conformance::run_all(|clock| {
        Arc::new(database::store(&database::fresh_postgres_schema(), clock))
    })
    .await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_passes_the_conformance_suite() {
    support::conformance::run_all(|clock| {
        Arc::new(database::store(&database::fresh_sqlite_file(), clock))
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
    assert_eq!(store.sweep_expired().await.expect("sweep"), 11);
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
