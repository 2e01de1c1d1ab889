//! Real databases with the framework tables, from `autumn_testkit`'s
//! `framework` module (with its `on_databases!`), and the servers and
//! schemas of its `postgres` module.

pub use autumn_testkit::framework::{
    FreshDatabase, empty_postgres_schema, fresh_postgres_schema, fresh_sqlite_file,
};
pub use autumn_testkit::postgres::{PgBouncer, PgSchema, PrivatePostgres, RoundTrips};

use std::time::Duration;

use autumn_web::db::{DbConnection, DbPool};
use autumn_web::reexports::diesel;

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// What `sql` (a `SELECT COUNT(*) AS n ...`) counts on `pool`.
pub async fn count(pool: &DbPool, sql: &str) -> i64 {
    use autumn_web::reexports::diesel_async::RunQueryDsl as _;
    let counted: Count = match pool.get().await.expect("connection") {
        DbConnection::Postgres(mut conn) => diesel::sql_query(sql).get_result(&mut *conn).await,
        DbConnection::Sqlite(mut conn) => diesel::sql_query(sql).get_result(&mut *conn).await,
        _ => unreachable!("the tests build both backends"),
    }
    .expect("count");
    counted.n
}

/// Waits (up to 20 s) until `sql` counts `n`: for work a worker does on a
/// task of its own.
pub async fn eventually(pool: &DbPool, sql: &str, n: i64) {
    autumn_testkit::eventually_async(sql, Duration::from_secs(20), || async move {
        let now = count(pool, sql).await;
        if now == n {
            Ok(())
        } else {
            Err(format!("{now}, expected {n}"))
        }
    })
    .await;
}
