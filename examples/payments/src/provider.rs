//! A stand-in payment provider: the `provider_charges` and `provider_calls`
//! tables, written through a connection of their own, never the request's
//! transaction. What it wrote stays written whatever happens to the
//! request, as with a remote service.
//!
//! Every call is logged in `provider_calls`. A charge is made once per key:
//! a call with a key already charged gets the first charge back and moves
//! no money, the way real providers treat an idempotency key.

use autumn_web::AutumnError;
use autumn_web::db::{Db, DbPool, PgConnection, SqliteConnection};
use autumn_web::reexports::diesel::sql_types::{BigInt, Text};
use autumn_web::reexports::diesel::{self, QueryableByName};
use autumn_web::reexports::diesel_async::RunQueryDsl as _;
use serde::{Deserialize, Serialize};

use crate::is_sqlite;

/// A charge the provider made.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, QueryableByName)]
pub struct Charge {
    /// The provider's id for it.
    #[diesel(sql_type = Text)]
    pub id: String,
    /// The key it was made under.
    #[diesel(sql_type = Text)]
    pub key: String,
    /// The account charged.
    #[diesel(sql_type = Text)]
    pub account: String,
    /// In cents.
    #[diesel(sql_type = BigInt)]
    pub amount: i64,
    /// How many calls asked for it (one made it; the others got it back).
    #[diesel(sql_type = BigInt)]
    pub calls: i64,
}

const LOG_CALL: &str = "INSERT INTO provider_calls (key) VALUES ($1)";
const CHARGE_ONCE: &str = "INSERT INTO provider_charges (id, key, account, amount) \
    VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING";
const SELECT: &str = "SELECT c.id, c.key, c.account, c.amount, \
    (SELECT count(*) FROM provider_calls p WHERE p.key = c.key) AS calls \
    FROM provider_charges c";

macro_rules! charge_on {
    ($conn:ty, $pool:expr, $key:expr, $account:expr, $amount:expr) => {{
        let mut db = Db::<$conn>::from_pool($pool).await?;
        let conn = &mut *db;
        diesel::sql_query(LOG_CALL)
            .bind::<Text, _>($key)
            .execute(conn)
            .await?;
        diesel::sql_query(CHARGE_ONCE)
            .bind::<Text, _>(uuid::Uuid::new_v4().to_string())
            .bind::<Text, _>($key)
            .bind::<Text, _>($account)
            .bind::<BigInt, _>($amount)
            .execute(conn)
            .await?;
        let charge: Charge = diesel::sql_query(format!("{SELECT} WHERE c.key = $1"))
            .bind::<Text, _>($key)
            .get_result(conn)
            .await?;
        charge
    }};
}

/// Asks the provider to charge `amount` to `account` under `key`. A key
/// already charged gets that charge back; nothing is charged again.
///
/// # Errors
///
/// 409 when `key` was charged for another account or amount; the database
/// error otherwise.
pub async fn charge(
    pool: &DbPool,
    key: &str,
    account: &str,
    amount: i64,
) -> Result<Charge, AutumnError> {
    let charge = if is_sqlite(pool) {
        charge_on!(SqliteConnection, pool, key, account, amount)
    } else {
        charge_on!(PgConnection, pool, key, account, amount)
    };
    if charge.account != account || charge.amount != amount {
        return Err(AutumnError::conflict(
            "the payment provider refused: this key was charged for another account or amount",
        ));
    }
    Ok(charge)
}

/// Every charge, oldest first.
///
/// # Errors
///
/// The database error.
pub async fn charges(pool: &DbPool) -> Result<Vec<Charge>, AutumnError> {
    let query = format!("{SELECT} ORDER BY c.seq");
    Ok(if is_sqlite(pool) {
        let mut db = Db::<SqliteConnection>::from_pool(pool).await?;
        diesel::sql_query(query).load(&mut *db).await?
    } else {
        let mut db = Db::<PgConnection>::from_pool(pool).await?;
        diesel::sql_query(query).load(&mut *db).await?
    })
}
