//! Where users are kept: the `users` table of the app database (`[database]
//! url`, PostgreSQL or SQLite), created on first use.

use std::sync::Arc;

use autumn_web::AutumnError;
use autumn_web::db::{Db, DbBackend, DbPool, PgConnection, SqliteConnection};
use autumn_web::reexports::diesel::sql_types::Text;
use autumn_web::reexports::diesel::{self, QueryableByName};
use autumn_web::reexports::diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
use axum::extract::FromRequestParts;
use http::request::Parts;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use uuid::Uuid;

/// A user as stored, listed and served by `GET /users.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct User {
    /// A fresh UUID.
    pub id: Uuid,
    /// The address, trimmed and lowercased; unique.
    pub email: String,
    /// The display name, trimmed.
    pub name: String,
}

/// Request extension: whether the `users` table was made in this app's
/// database.
#[derive(Debug, Clone, Default)]
pub(crate) struct UsersTable(Arc<OnceCell<()>>);

/// The users, as an extractor: the app database, with its table made.
#[derive(Debug, Clone)]
pub struct Users {
    pool: DbPool,
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Text)]
    email: String,
    #[diesel(sql_type = Text)]
    name: String,
}

impl TryFrom<Row> for User {
    type Error = AutumnError;

    fn try_from(row: Row) -> Result<Self, AutumnError> {
        Ok(Self {
            id: Uuid::parse_str(&row.id).map_err(AutumnError::internal)?,
            email: row.email,
            name: row.name,
        })
    }
}

const POSTGRES_TABLE: &str = "CREATE TABLE IF NOT EXISTS users \
    (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, email TEXT NOT NULL UNIQUE, name TEXT NOT NULL)";
const SQLITE_TABLE: &str = "CREATE TABLE IF NOT EXISTS users \
    (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, email TEXT NOT NULL UNIQUE, name TEXT NOT NULL)";
const LIST: &str = "SELECT id, email, name FROM users ORDER BY seq";
// `ON CONFLICT DO NOTHING` (SQLite 3.24+, PostgreSQL 9.5+): a taken email
// inserts no row instead of failing, even when two signups race.
const INSERT_SQLITE: &str =
    "INSERT INTO users (id, email, name) VALUES (?, ?, ?) ON CONFLICT (email) DO NOTHING";
const INSERT_POSTGRES: &str =
    "INSERT INTO users (id, email, name) VALUES ($1, $2, $3) ON CONFLICT (email) DO NOTHING";
const FIND_SQLITE: &str = "SELECT id, email, name FROM users WHERE id = ?";
const FIND_POSTGRES: &str = "SELECT id, email, name FROM users WHERE id = $1";

impl Users {
    /// Creates a user; `None` when the email is already registered.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn create(&self, email: &str, name: &str) -> Result<Option<User>, AutumnError> {
        let user = User {
            id: Uuid::new_v4(),
            email: email.to_owned(),
            name: name.to_owned(),
        };
        let id = user.id.to_string();
        let inserted = match self.pool.backend() {
            DbBackend::Sqlite => {
                let mut db = Db::<SqliteConnection>::from_pool(&self.pool).await?;
                diesel::sql_query(INSERT_SQLITE)
                    .bind::<Text, _>(&id)
                    .bind::<Text, _>(&user.email)
                    .bind::<Text, _>(&user.name)
                    .execute(&mut *db)
                    .await?
            }
            _ => {
                let mut db = Db::<PgConnection>::from_pool(&self.pool).await?;
                diesel::sql_query(INSERT_POSTGRES)
                    .bind::<Text, _>(&id)
                    .bind::<Text, _>(&user.email)
                    .bind::<Text, _>(&user.name)
                    .execute(&mut *db)
                    .await?
            }
        };
        Ok((inserted == 1).then_some(user))
    }

    /// Every user, oldest first.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn list(&self) -> Result<Vec<User>, AutumnError> {
        let rows: Vec<Row> = match self.pool.backend() {
            DbBackend::Sqlite => {
                let mut db = Db::<SqliteConnection>::from_pool(&self.pool).await?;
                diesel::sql_query(LIST).load(&mut *db).await?
            }
            _ => {
                let mut db = Db::<PgConnection>::from_pool(&self.pool).await?;
                diesel::sql_query(LIST).load(&mut *db).await?
            }
        };
        rows.into_iter().map(User::try_from).collect()
    }

    /// The user with this id, if any.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn find(&self, id: Uuid) -> Result<Option<User>, AutumnError> {
        let id = id.to_string();
        let rows: Vec<Row> = match self.pool.backend() {
            DbBackend::Sqlite => {
                let mut db = Db::<SqliteConnection>::from_pool(&self.pool).await?;
                diesel::sql_query(FIND_SQLITE)
                    .bind::<Text, _>(&id)
                    .load(&mut *db)
                    .await?
            }
            _ => {
                let mut db = Db::<PgConnection>::from_pool(&self.pool).await?;
                diesel::sql_query(FIND_POSTGRES)
                    .bind::<Text, _>(&id)
                    .load(&mut *db)
                    .await?
            }
        };
        rows.into_iter().next().map(User::try_from).transpose()
    }

    async fn ensure_table(pool: &DbPool, table: &UsersTable) -> Result<(), AutumnError> {
        table
            .0
            .get_or_try_init(|| async {
                match pool.backend() {
                    DbBackend::Sqlite => {
                        let mut db = Db::<SqliteConnection>::from_pool(pool).await?;
                        db.batch_execute(SQLITE_TABLE).await?;
                    }
                    _ => {
                        let mut db = Db::<PgConnection>::from_pool(pool).await?;
                        db.batch_execute(POSTGRES_TABLE).await?;
                    }
                }
                Ok::<_, AutumnError>(())
            })
            .await?;
        Ok(())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Users {
    type Rejection = AutumnError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let table = parts
            .extensions
            .get::<UsersTable>()
            .cloned()
            .ok_or_else(|| AutumnError::internal("the saas app was built without its state"))?;
        let pool = parts.extensions.get::<DbPool>().cloned().ok_or_else(|| {
            AutumnError::internal(
                "users are kept in the app database; set database.url (AUTUMN_DATABASE__URL)",
            )
        })?;
        Self::ensure_table(&pool, &table).await?;
        Ok(Self { pool })
    }
}
