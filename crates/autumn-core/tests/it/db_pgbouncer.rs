//! The app's own queries through `Db` behind a real PgBouncer in
//! transaction pooling mode (`statement_cache = false`), outside and inside
//! `Db::tx`.
#![cfg(feature = "postgres")]

use crate::support::database;
use crate::support::database::FreshDatabase as _;

use std::sync::OnceLock;
use std::time::Duration;

use autumn_core::db::{Db, PgConnection};
use autumn_idempotency::database::DbPool;
use diesel::sql_types::{BigInt, Integer, Text};
use diesel_async::{AsyncConnection as _, RunQueryDsl as _, SimpleAsyncConnection as _};
use scoped_futures::ScopedFutureExt as _;

fn bouncer() -> &'static database::PgBouncer {
    static BOUNCER: OnceLock<database::PgBouncer> = OnceLock::new();
    BOUNCER.get_or_init(database::PgBouncer::start)
}

#[derive(diesel::QueryableByName)]
struct Note {
    #[diesel(sql_type = Text)]
    note: String,
}

#[derive(diesel::QueryableByName)]
struct Number {
    #[diesel(sql_type = Integer)]
    n: i32,
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// A database through PgBouncer with an `items` table (made directly), and
/// a pool on it without a statement cache, larger than PgBouncer's pool of
/// server connections (4).
async fn items_pool() -> (DbPool, String) {
    let bouncer = bouncer();
    let url = bouncer.fresh_database();
    let mut direct = diesel_async::AsyncPgConnection::establish(&bouncer.direct(&url))
        .await
        .expect("connect directly");
    direct
        .batch_execute("CREATE TABLE items (id integer PRIMARY KEY, note text NOT NULL)")
        .await
        .expect("items table");
    let pool = DbPool::with_statement_cache(&url, 16, Duration::from_secs(10), false)
        .expect("pool through PgBouncer");
    (pool, bouncer.direct(&url))
}

/// Each statement outside a transaction is prepared, then executed, then
/// closed, each step its own message sequence: through PgBouncer, with
/// many clients on 4 server connections, the steps of one statement land
/// on different server connections unless they share a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_outside_a_transaction_through_pgbouncer_all_succeed() {
    let (pool, direct) = items_pool().await;
    let tasks: Vec<_> = (0..200)
        .map(|i: i32| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut db = Db::<PgConnection>::from_pool(&pool)
                    .await
                    .map_err(|e| format!("{e:?}"))?;
                let inserted = diesel::sql_query("INSERT INTO items (id, note) VALUES ($1, $2)")
                    .bind::<Integer, _>(i)
                    .bind::<Text, _>(format!("note {i}"))
                    .execute(&mut *db)
                    .await
                    .map_err(|e| format!("insert {i}: {e}"))?;
                let read: Note = diesel::sql_query("SELECT note FROM items WHERE id = $1")
                    .bind::<Integer, _>(i)
                    .get_result(&mut *db)
                    .await
                    .map_err(|e| format!("select {i}: {e}"))?;
                let series: Vec<Number> = diesel::sql_query("SELECT generate_series(1, $1) AS n")
                    .bind::<Integer, _>(i % 7 + 1)
                    .load(&mut *db)
                    .await
                    .map_err(|e| format!("series {i}: {e}"))?;
                let series: Vec<i32> = series.into_iter().map(|row| row.n).collect();
                Ok::<_, String>((inserted, read.note, series))
            })
        })
        .collect();
    let mut failures = Vec::new();
    for (i, task) in (0..).zip(tasks) {
        match task.await.expect("task") {
            Ok((inserted, note, series)) => {
                assert_eq!(inserted, 1);
                assert_eq!(note, format!("note {i}"));
                assert_eq!(series, (1..=i % 7 + 1).collect::<Vec<i32>>());
            }
            Err(error) => failures.push(error),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 200 failed, first: {:?}",
        failures.len(),
        <[String]>::first(&failures)
    );
    let mut direct = diesel_async::AsyncPgConnection::establish(&direct)
        .await
        .expect("connect directly");
    let count: Count = diesel::sql_query("SELECT count(*) AS n FROM items")
        .get_result(&mut direct)
        .await
        .expect("count");
    assert_eq!(count.n, 200, "every insert committed");
}

/// A statement that fails outside a transaction rolls its own transaction
/// back: the connection goes on working, out of any transaction, and the
/// next statement's write is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_statement_outside_a_transaction_leaves_the_connection_usable() {
    let (pool, direct) = items_pool().await;
    let mut db = Db::<PgConnection>::from_pool(&pool).await.expect("db");
    let insert = |id: i32| {
        diesel::sql_query("INSERT INTO items (id, note) VALUES ($1, 'x')").bind::<Integer, _>(id)
    };
    insert(1).execute(&mut *db).await.expect("first insert");
    let duplicate = insert(1).execute(&mut *db).await;
    assert!(
        matches!(
            duplicate,
            Err(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _
            ))
        ),
        "{duplicate:?}"
    );
    insert(2)
        .execute(&mut *db)
        .await
        .expect("the connection still works");
    // Inside Db::tx the statements go straight through, in its transaction.
    let rolled_back = db
        .tx(|conn| {
            async move {
                insert(3).execute(conn).await?;
                Err::<(), _>(diesel::result::Error::RollbackTransaction)
            }
            .scope_boxed()
        })
        .await;
    assert!(rolled_back.is_err());
    drop(db);
    let mut direct = diesel_async::AsyncPgConnection::establish(&direct)
        .await
        .expect("connect directly");
    let count: Count = diesel::sql_query("SELECT count(*) AS n FROM items")
        .get_result(&mut direct)
        .await
        .expect("count");
    assert_eq!(count.n, 2, "rows 1 and 2 committed, 3 rolled back");
}
