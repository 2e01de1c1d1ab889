//! Where orders are kept: in memory, or in the `orders` table of the app
//! database (created on first use).

use std::sync::{Arc, Mutex};

use autumn_web::AutumnError;
use autumn_web::db::{DbBackend, DbPool, PgConnection, SqliteConnection};
use autumn_web::reexports::diesel::sql_types::{BigInt, Text};
use autumn_web::reexports::diesel::{self, QueryableByName};
use autumn_web::reexports::diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
use axum::extract::FromRequestParts;
use http::request::Parts;
use tokio::sync::OnceCell;
use uuid::Uuid;

use crate::Order;

/// The orders, wherever they are kept. As an extractor it picks the app
/// database when one is configured.
#[derive(Debug, Clone, Default)]
pub struct Orders {
    memory: Arc<Mutex<Vec<Order>>>,
    /// The app database, when `[database] url` is set.
    database: Option<DbPool>,
    /// Whether the `orders` table was made in this app's database.
    table: Arc<OnceCell<()>>,
}

enum Store<'a> {
    Memory(&'a Mutex<Vec<Order>>),
    Database(&'a DbPool),
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Text)]
    item: String,
    #[diesel(sql_type = BigInt)]
    qty: i64,
}

impl Row {
    fn into_order(self) -> Result<Order, AutumnError> {
        Ok(Order {
            id: Uuid::parse_str(&self.id).map_err(AutumnError::internal)?,
            item: self.item,
            qty: self.qty,
        })
    }
}

const POSTGRES_TABLE: &str = "CREATE TABLE IF NOT EXISTS orders \
    (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, item TEXT NOT NULL, qty BIGINT NOT NULL)";
const SQLITE_TABLE: &str = "CREATE TABLE IF NOT EXISTS orders \
    (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, item TEXT NOT NULL, qty BIGINT NOT NULL)";
const LIST: &str = "SELECT id, item, qty FROM orders ORDER BY seq";
const FIND_POSTGRES: &str = "SELECT id, item, qty FROM orders WHERE id = $1";
const FIND_SQLITE: &str = "SELECT id, item, qty FROM orders WHERE id = ?";

impl Orders {
    fn memory(list: &Mutex<Vec<Order>>) -> std::sync::MutexGuard<'_, Vec<Order>> {
        list.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The database (with its table made) or the memory list.
    async fn store(&self) -> Result<Store<'_>, AutumnError> {
        match &self.database {
            Some(pool) => {
                self.ensure_table(pool).await?;
                Ok(Store::Database(pool))
            }
            None => Ok(Store::Memory(&self.memory)),
        }
    }

    async fn ensure_table(&self, pool: &DbPool) -> Result<(), AutumnError> {
        self.table
            .get_or_try_init(|| async {
                match pool.backend() {
                    DbBackend::Sqlite => {
                        let mut db =
                            autumn_web::db::Db::<SqliteConnection>::from_pool(pool).await?;
                        db.batch_execute(SQLITE_TABLE).await?;
                    }
                    _ => {
                        let mut db = autumn_web::db::Db::<PgConnection>::from_pool(pool).await?;
                        db.batch_execute(POSTGRES_TABLE).await?;
                    }
                }
                Ok::<_, AutumnError>(())
            })
            .await?;
        Ok(())
    }

    /// Stores a new order.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn insert(&self, order: &Order) -> Result<(), AutumnError> {
        let pool = match self.store().await? {
            Store::Memory(list) => {
                Self::memory(list).push(order.clone());
                return Ok(());
            }
            Store::Database(pool) => pool,
        };
        let id = order.id.to_string();
        match pool.backend() {
            DbBackend::Sqlite => {
                let mut db = autumn_web::db::Db::<SqliteConnection>::from_pool(pool).await?;
                diesel::sql_query("INSERT INTO orders (id, item, qty) VALUES (?, ?, ?)")
                    .bind::<Text, _>(&id)
                    .bind::<Text, _>(&order.item)
                    .bind::<BigInt, _>(order.qty)
                    .execute(&mut *db)
                    .await?;
            }
            _ => {
                let mut db = autumn_web::db::Db::<PgConnection>::from_pool(pool).await?;
                diesel::sql_query("INSERT INTO orders (id, item, qty) VALUES ($1, $2, $3)")
                    .bind::<Text, _>(&id)
                    .bind::<Text, _>(&order.item)
                    .bind::<BigInt, _>(order.qty)
                    .execute(&mut *db)
                    .await?;
            }
        }
        Ok(())
    }

    /// Every order, oldest first.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn list(&self) -> Result<Vec<Order>, AutumnError> {
        let pool = match self.store().await? {
            Store::Memory(list) => return Ok(Self::memory(list).clone()),
            Store::Database(pool) => pool,
        };
        let rows: Vec<Row> = match pool.backend() {
            DbBackend::Sqlite => {
                let mut db = autumn_web::db::Db::<SqliteConnection>::from_pool(pool).await?;
                diesel::sql_query(LIST).load(&mut *db).await?
            }
            _ => {
                let mut db = autumn_web::db::Db::<PgConnection>::from_pool(pool).await?;
                diesel::sql_query(LIST).load(&mut *db).await?
            }
        };
        rows.into_iter().map(Row::into_order).collect()
    }

    /// The order `id`, if there is one.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn find(&self, id: Uuid) -> Result<Option<Order>, AutumnError> {
        let pool = match self.store().await? {
            Store::Memory(list) => {
                return Ok(Self::memory(list)
                    .iter()
                    .find(|order| order.id == id)
                    .cloned());
            }
            Store::Database(pool) => pool,
        };
        let id = id.to_string();
        let rows: Vec<Row> = match pool.backend() {
            DbBackend::Sqlite => {
                let mut db = autumn_web::db::Db::<SqliteConnection>::from_pool(pool).await?;
                diesel::sql_query(FIND_SQLITE)
                    .bind::<Text, _>(&id)
                    .load(&mut *db)
                    .await?
            }
            _ => {
                let mut db = autumn_web::db::Db::<PgConnection>::from_pool(pool).await?;
                diesel::sql_query(FIND_POSTGRES)
                    .bind::<Text, _>(&id)
                    .load(&mut *db)
                    .await?
            }
        };
        rows.into_iter().next().map(Row::into_order).transpose()
    }

    /// How many orders exist.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn count(&self) -> Result<usize, AutumnError> {
        Ok(self.list().await?.len())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Orders {
    type Rejection = AutumnError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let mut orders =
            parts.extensions.get::<Self>().cloned().ok_or_else(|| {
                AutumnError::internal("the orders app was built without its state")
            })?;
        orders.database = parts.extensions.get::<DbPool>().cloned();
        Ok(orders)
    }
}
