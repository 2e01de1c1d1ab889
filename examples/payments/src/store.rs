//! The payments table, and the transaction that writes a payment with its
//! idempotency record.

use autumn_web::db::{Db, DbPool, PgConnection, SqliteConnection};
use autumn_web::idempotency::IdempotencyTx;
use autumn_web::prelude::*;
use autumn_web::reexports::diesel::sql_types::{BigInt, Text};
use autumn_web::reexports::diesel::{self, QueryableByName};
use autumn_web::reexports::diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;

use crate::{PAUSE_BEFORE_COMMIT_ENV, Payment, is_sqlite, pause};

const POSTGRES_TABLES: &str = "\
    BEGIN; \
    SELECT pg_advisory_xact_lock(7245031); \
    CREATE TABLE IF NOT EXISTS payments (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, \
        account TEXT NOT NULL, amount BIGINT NOT NULL, charge TEXT NOT NULL); \
    CREATE TABLE IF NOT EXISTS provider_charges (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, \
        key TEXT NOT NULL UNIQUE, account TEXT NOT NULL, amount BIGINT NOT NULL); \
    CREATE TABLE IF NOT EXISTS provider_calls (seq BIGSERIAL PRIMARY KEY, key TEXT NOT NULL); \
    COMMIT;";
const SQLITE_TABLES: &str = "\
    CREATE TABLE IF NOT EXISTS payments (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, \
        account TEXT NOT NULL, amount BIGINT NOT NULL, charge TEXT NOT NULL); \
    CREATE TABLE IF NOT EXISTS provider_charges (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, \
        key TEXT NOT NULL UNIQUE, account TEXT NOT NULL, amount BIGINT NOT NULL); \
    CREATE TABLE IF NOT EXISTS provider_calls (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL);";

const INSERT: &str = "INSERT INTO payments (id, account, amount, charge) VALUES ($1, $2, $3, $4)";
const LIST: &str = "SELECT id, account, amount, charge FROM payments ORDER BY seq";
const FIND: &str = "SELECT id, account, amount, charge FROM payments WHERE id = $1";

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Text)]
    account: String,
    #[diesel(sql_type = BigInt)]
    amount: i64,
    #[diesel(sql_type = Text)]
    charge: String,
}

impl From<Row> for Payment {
    fn from(row: Row) -> Self {
        Self {
            id: row.id,
            account: row.account,
            amount: row.amount,
            charge: row.charge,
        }
    }
}

pub(crate) async fn create_tables(pool: &DbPool) -> Result<(), AutumnError> {
    if is_sqlite(pool) {
        let mut db = Db::<SqliteConnection>::from_pool(pool).await?;
        db.batch_execute(SQLITE_TABLES).await?;
    } else {
        // Replicas starting together would race on the catalog.
        let mut db = Db::<PgConnection>::from_pool(pool).await?;
        db.batch_execute(POSTGRES_TABLES).await?;
    }
    Ok(())
}

/// The same code for each connection type: diesel's SQL is typed by it.
macro_rules! insert_and_commit {
    ($conn:ty, $pool:expr, $idem:expr, $payment:expr) => {{
        let mut db = Db::<$conn>::from_pool($pool).await?;
        db.tx(|conn| {
            async move {
                diesel::sql_query(INSERT)
                    .bind::<Text, _>(&$payment.id)
                    .bind::<Text, _>(&$payment.account)
                    .bind::<BigInt, _>($payment.amount)
                    .bind::<Text, _>(&$payment.charge)
                    .execute(conn)
                    .await?;
                if let Some(pause) = pause(PAUSE_BEFORE_COMMIT_ENV) {
                    tokio::time::sleep(pause).await;
                }
                let location = format!("/payments/{}", $payment.id);
                $idem
                    .commit(
                        conn,
                        (
                            StatusCode::CREATED,
                            [(axum::http::header::LOCATION, location)],
                            Json($payment),
                        ),
                    )
                    .await
            }
            .scope_boxed()
        })
        .await
    }};
}

/// Writes `payment` and the 201 answering it in one transaction: both
/// commit or neither does.
pub(crate) async fn insert_and_commit(
    pool: &DbPool,
    idem: &IdempotencyTx,
    payment: &Payment,
) -> AutumnResult<Response> {
    if is_sqlite(pool) {
        insert_and_commit!(SqliteConnection, pool, idem, payment)
    } else {
        insert_and_commit!(PgConnection, pool, idem, payment)
    }
}

pub(crate) async fn list(pool: &DbPool) -> Result<Vec<Payment>, AutumnError> {
    let rows: Vec<Row> = if is_sqlite(pool) {
        let mut db = Db::<SqliteConnection>::from_pool(pool).await?;
        diesel::sql_query(LIST).load(&mut *db).await?
    } else {
        let mut db = Db::<PgConnection>::from_pool(pool).await?;
        diesel::sql_query(LIST).load(&mut *db).await?
    };
    Ok(rows.into_iter().map(Payment::from).collect())
}

pub(crate) async fn find(pool: &DbPool, id: &str) -> Result<Option<Payment>, AutumnError> {
    let rows: Vec<Row> = if is_sqlite(pool) {
        let mut db = Db::<SqliteConnection>::from_pool(pool).await?;
        diesel::sql_query(FIND)
            .bind::<Text, _>(id)
            .load(&mut *db)
            .await?
    } else {
        let mut db = Db::<PgConnection>::from_pool(pool).await?;
        diesel::sql_query(FIND)
            .bind::<Text, _>(id)
            .load(&mut *db)
            .await?
    };
    Ok(rows.into_iter().next().map(Payment::from))
}
