//! Where accounts are kept: the app database (`[database] url`, PostgreSQL
//! or SQLite), its tables created on first use.
//!
//! - `users`: one row per account, with its Argon2 password hash;
//! - `avatars`: at most one picture per user, replaced by a new upload;
//! - `logins` and `avatar_uploads`: one row each time `POST /login` signed
//!   someone in or `POST /account/profile` stored a picture. They make "the
//!   handler ran once" observable from outside (`GET /stats.json`), which is
//!   what the tests check after a double-click.

use std::borrow::Cow;
use std::sync::Arc;

use autumn_web::AutumnError;
use autumn_web::db::{Db, DbBackend, DbPool, PgConnection, SqliteConnection};
use autumn_web::mail::Mailer;
use autumn_web::reexports::diesel::sql_types::{BigInt, Binary, Text};
use autumn_web::reexports::diesel::{self, QueryableByName};
use autumn_web::reexports::diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;
use axum::extract::FromRequestParts;
use http::request::Parts;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use uuid::Uuid;

use crate::mails::SignupConfirmation;

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

/// A user's picture, as uploaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Avatar {
    /// The image's media type, such as `image/png`.
    pub content_type: String,
    /// The image.
    pub bytes: Vec<u8>,
}

/// How many rows each table holds, as served by `GET /stats.json`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stats {
    /// Accounts.
    pub users: i64,
    /// Times `POST /login` signed someone in.
    pub logins: i64,
    /// Pictures stored by `POST /account/profile`.
    pub avatar_uploads: i64,
    /// Users with a picture now.
    pub avatars: i64,
}

/// Request extension: whether the tables were made in this app's database.
#[derive(Debug, Clone, Default)]
pub(crate) struct UsersTable(Arc<OnceCell<()>>);

/// The accounts, as an extractor: the app database, with its tables made.
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

#[derive(QueryableByName)]
struct PasswordRow {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Text)]
    email: String,
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    password_hash: String,
}

#[derive(QueryableByName)]
struct AvatarRow {
    #[diesel(sql_type = Text)]
    content_type: String,
    #[diesel(sql_type = Binary)]
    bytes: Vec<u8>,
}

#[derive(QueryableByName)]
struct StatsRow {
    #[diesel(sql_type = BigInt)]
    users: i64,
    #[diesel(sql_type = BigInt)]
    logins: i64,
    #[diesel(sql_type = BigInt)]
    avatar_uploads: i64,
    #[diesel(sql_type = BigInt)]
    avatars: i64,
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

/// The schema, one statement per table. A database made by an earlier
/// version of the example (a `users` table without passwords) gets the
/// column added by [`ADD_PASSWORD_POSTGRES`] / [`SQLITE_HAS_PASSWORD`].
const POSTGRES_SCHEMA: &str = "\
    CREATE TABLE IF NOT EXISTS users (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, \
        email TEXT NOT NULL UNIQUE, name TEXT NOT NULL, password_hash TEXT NOT NULL DEFAULT ''); \
    CREATE TABLE IF NOT EXISTS avatars (user_id TEXT PRIMARY KEY REFERENCES users (id), \
        content_type TEXT NOT NULL, bytes BYTEA NOT NULL); \
    CREATE TABLE IF NOT EXISTS logins (seq BIGSERIAL PRIMARY KEY, user_id TEXT NOT NULL); \
    CREATE TABLE IF NOT EXISTS avatar_uploads (seq BIGSERIAL PRIMARY KEY, user_id TEXT NOT NULL); \
    CREATE TABLE IF NOT EXISTS invoices (id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, \
        total_cents BIGINT NOT NULL); \
    CREATE TABLE IF NOT EXISTS line_items (id BIGSERIAL PRIMARY KEY, \
        invoice_id BIGINT NOT NULL REFERENCES invoices (id), description TEXT NOT NULL, \
        quantity INTEGER NOT NULL, unit_cents BIGINT NOT NULL); \
    CREATE TABLE IF NOT EXISTS outbox (id BIGSERIAL PRIMARY KEY, invoice_id BIGINT NOT NULL UNIQUE, \
        recipient TEXT NOT NULL, subject TEXT NOT NULL, attempt INTEGER NOT NULL);";
const SQLITE_SCHEMA: &str = "\
    CREATE TABLE IF NOT EXISTS users (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, \
        email TEXT NOT NULL UNIQUE, name TEXT NOT NULL, password_hash TEXT NOT NULL DEFAULT ''); \
    CREATE TABLE IF NOT EXISTS avatars (user_id TEXT PRIMARY KEY REFERENCES users (id), \
        content_type TEXT NOT NULL, bytes BLOB NOT NULL); \
    CREATE TABLE IF NOT EXISTS logins (seq INTEGER PRIMARY KEY AUTOINCREMENT, user_id TEXT NOT NULL); \
    CREATE TABLE IF NOT EXISTS avatar_uploads (seq INTEGER PRIMARY KEY AUTOINCREMENT, user_id TEXT NOT NULL); \
    CREATE TABLE IF NOT EXISTS invoices (id INTEGER PRIMARY KEY AUTOINCREMENT, customer TEXT NOT NULL, \
        total_cents BIGINT NOT NULL); \
    CREATE TABLE IF NOT EXISTS line_items (id INTEGER PRIMARY KEY AUTOINCREMENT, \
        invoice_id BIGINT NOT NULL REFERENCES invoices (id), description TEXT NOT NULL, \
        quantity INTEGER NOT NULL, unit_cents BIGINT NOT NULL); \
    CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, invoice_id BIGINT NOT NULL UNIQUE, \
        recipient TEXT NOT NULL, subject TEXT NOT NULL, attempt INTEGER NOT NULL);";
const ADD_PASSWORD_POSTGRES: &str =
    "ALTER TABLE users ADD COLUMN IF NOT EXISTS password_hash TEXT NOT NULL DEFAULT ''";
// SQLite has no `ADD COLUMN IF NOT EXISTS`: ask first.
const SQLITE_HAS_PASSWORD: &str =
    "SELECT count(*) AS n FROM pragma_table_info('users') WHERE name = 'password_hash'";
const ADD_PASSWORD_SQLITE: &str =
    "ALTER TABLE users ADD COLUMN password_hash TEXT NOT NULL DEFAULT ''";

const LIST: &str = "SELECT id, email, name FROM users ORDER BY seq";
// `ON CONFLICT DO NOTHING` (SQLite 3.24+, PostgreSQL 9.5+): a taken email
// inserts no row instead of failing, even when two signups race.
const INSERT: &str = "INSERT INTO users (id, email, name, password_hash) VALUES (?, ?, ?, ?) \
    ON CONFLICT (email) DO NOTHING";
const FIND: &str = "SELECT id, email, name FROM users WHERE id = ?";
const FIND_BY_EMAIL: &str = "SELECT id, email, name, password_hash FROM users WHERE email = ?";
const RENAME: &str = "UPDATE users SET name = ? WHERE id = ?";
const SET_PASSWORD: &str = "UPDATE users SET password_hash = ? WHERE id = ?";
const RECORD_LOGIN: &str = "INSERT INTO logins (user_id) VALUES (?)";
// One picture per user: a new upload replaces the old one.
const STORE_AVATAR: &str = "INSERT INTO avatars (user_id, content_type, bytes) VALUES (?, ?, ?) \
    ON CONFLICT (user_id) DO UPDATE SET content_type = excluded.content_type, bytes = excluded.bytes";
const RECORD_UPLOAD: &str = "INSERT INTO avatar_uploads (user_id) VALUES (?)";
const FIND_AVATAR: &str = "SELECT content_type, bytes FROM avatars WHERE user_id = ?";
const STATS: &str = "SELECT (SELECT count(*) FROM users) AS users, \
    (SELECT count(*) FROM logins) AS logins, \
    (SELECT count(*) FROM avatar_uploads) AS avatar_uploads, \
    (SELECT count(*) FROM avatars) AS avatars";

/// The job queue: the hooks' rows and the mails', each with the ones still
/// to run.
const HOOK_JOBS: &str = "SELECT \
    count(CASE WHEN hook <> 'autumn.mail' THEN 1 END) AS jobs, \
    count(CASE WHEN hook <> 'autumn.mail' AND state = 'pending' THEN 1 END) AS pending, \
    count(CASE WHEN hook = 'autumn.mail' THEN 1 END) AS mails, \
    count(CASE WHEN hook = 'autumn.mail' AND state = 'pending' THEN 1 END) AS mails_pending \
    FROM autumn_commit_jobs";

/// `sql` for the pool's backend: the statements above are written with
/// SQLite's `?` placeholders, which PostgreSQL spells `$1`, `$2`, ...
/// (No statement here has a `?` inside a string literal.)
fn dialect(backend: DbBackend, sql: &str) -> Cow<'_, str> {
    if backend == DbBackend::Sqlite {
        return Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Runs `$body` with `$db` a connection of the pool's backend and `$sql` a
/// function giving a statement in its dialect: the same code, compiled once
/// per connection type.
macro_rules! with_db {
    ($pool:expr, |$db:ident, $sql:ident| $body:expr) => {{
        let backend = $pool.backend();
        let $sql = |statement: &'static str| dialect(backend, statement).into_owned();
        match backend {
            DbBackend::Sqlite => {
                let mut $db = Db::<SqliteConnection>::from_pool($pool).await?;
                $body
            }
            _ => {
                let mut $db = Db::<PgConnection>::from_pool($pool).await?;
                $body
            }
        }
    }};
}

impl Users {
    /// Creates a user with an already hashed password and queues their
    /// sign-up confirmation in the same transaction; `None` when the email
    /// is already registered (and nothing is queued). Call
    /// `mailer.committed()` after, to have it sent at once.
    ///
    /// # Errors
    ///
    /// When the database fails, or the mail cannot be queued (nothing is
    /// created then).
    pub async fn create(
        &self,
        email: &str,
        name: &str,
        password_hash: &str,
        mailer: &Mailer,
    ) -> Result<Option<User>, AutumnError> {
        let user = User {
            id: Uuid::new_v4(),
            email: email.to_owned(),
            name: name.to_owned(),
        };
        let id = user.id.to_string();
        let inserted = with_db!(&self.pool, |db, sql| {
            let (user, id) = (&user, &id);
            db.tx(|conn| {
                async move {
                    let inserted = diesel::sql_query(sql(INSERT))
                        .bind::<Text, _>(id)
                        .bind::<Text, _>(&user.email)
                        .bind::<Text, _>(&user.name)
                        .bind::<Text, _>(password_hash)
                        .execute(&mut *conn)
                        .await?;
                    if inserted == 1 {
                        let confirmation = SignupConfirmation {
                            id,
                            email: &user.email,
                            name: &user.name,
                        };
                        mailer.deliver_later_in(conn, &confirmation).await?;
                    }
                    Ok::<_, AutumnError>(inserted)
                }
                .scope_boxed()
            })
            .await?
        });
        Ok((inserted == 1).then_some(user))
    }

    /// Every user, oldest first.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn list(&self) -> Result<Vec<User>, AutumnError> {
        let rows: Vec<Row> = with_db!(&self.pool, |db, sql| {
            diesel::sql_query(sql(LIST)).load(&mut *db).await?
        });
        rows.into_iter().map(User::try_from).collect()
    }

    /// The user with this id, if any.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn find(&self, id: Uuid) -> Result<Option<User>, AutumnError> {
        let id = id.to_string();
        let rows: Vec<Row> = with_db!(&self.pool, |db, sql| {
            diesel::sql_query(sql(FIND))
                .bind::<Text, _>(&id)
                .load(&mut *db)
                .await?
        });
        rows.into_iter().next().map(User::try_from).transpose()
    }

    /// The user registered with `email` (trimmed and lowercased already),
    /// with their password hash.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn find_with_password(
        &self,
        email: &str,
    ) -> Result<Option<(User, String)>, AutumnError> {
        let rows: Vec<PasswordRow> = with_db!(&self.pool, |db, sql| {
            diesel::sql_query(sql(FIND_BY_EMAIL))
                .bind::<Text, _>(email)
                .load(&mut *db)
                .await?
        });
        let Some(row) = rows.into_iter().next() else {
            return Ok(None);
        };
        let user = User::try_from(Row {
            id: row.id,
            email: row.email,
            name: row.name,
        })?;
        Ok(Some((user, row.password_hash)))
    }

    /// Notes that `user` signed in through the login form.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn record_login(&self, user: Uuid) -> Result<(), AutumnError> {
        let user = user.to_string();
        with_db!(&self.pool, |db, sql| {
            diesel::sql_query(sql(RECORD_LOGIN))
                .bind::<Text, _>(&user)
                .execute(&mut *db)
                .await?
        });
        Ok(())
    }

    /// Gives `user` a new display name.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn rename(&self, user: Uuid, name: &str) -> Result<(), AutumnError> {
        let user = user.to_string();
        with_db!(&self.pool, |db, sql| {
            diesel::sql_query(sql(RENAME))
                .bind::<Text, _>(name)
                .bind::<Text, _>(&user)
                .execute(&mut *db)
                .await?
        });
        Ok(())
    }

    /// Replaces `user`'s password hash with `password_hash`, a PHC string
    /// from `password::hash`.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn set_password(&self, user: Uuid, password_hash: &str) -> Result<(), AutumnError> {
        let user = user.to_string();
        with_db!(&self.pool, |db, sql| {
            diesel::sql_query(sql(SET_PASSWORD))
                .bind::<Text, _>(password_hash)
                .bind::<Text, _>(&user)
                .execute(&mut *db)
                .await?
        });
        Ok(())
    }

    /// Stores `avatar` as `user`'s picture, replacing any earlier one, and
    /// counts the upload.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn store_avatar(&self, user: Uuid, avatar: &Avatar) -> Result<(), AutumnError> {
        let user = user.to_string();
        with_db!(&self.pool, |db, sql| {
            diesel::sql_query(sql(STORE_AVATAR))
                .bind::<Text, _>(&user)
                .bind::<Text, _>(&avatar.content_type)
                .bind::<Binary, _>(&avatar.bytes)
                .execute(&mut *db)
                .await?;
            diesel::sql_query(sql(RECORD_UPLOAD))
                .bind::<Text, _>(&user)
                .execute(&mut *db)
                .await?
        });
        Ok(())
    }

    /// `user`'s picture, if they uploaded one.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn avatar(&self, user: Uuid) -> Result<Option<Avatar>, AutumnError> {
        let user = user.to_string();
        let rows: Vec<AvatarRow> = with_db!(&self.pool, |db, sql| {
            diesel::sql_query(sql(FIND_AVATAR))
                .bind::<Text, _>(&user)
                .load(&mut *db)
                .await?
        });
        Ok(rows.into_iter().next().map(|row| Avatar {
            content_type: row.content_type,
            bytes: row.bytes,
        }))
    }

    /// How many rows each table holds.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn stats(&self) -> Result<Stats, AutumnError> {
        let rows: Vec<StatsRow> = with_db!(&self.pool, |db, sql| {
            diesel::sql_query(sql(STATS)).load(&mut *db).await?
        });
        let row = rows
            .into_iter()
            .next()
            .ok_or_else(|| AutumnError::internal("the counts query returned no row"))?;
        Ok(Stats {
            users: row.users,
            logins: row.logins,
            avatar_uploads: row.avatar_uploads,
            avatars: row.avatars,
        })
    }

    /// How many commit-hook jobs and mails were queued, and how many of
    /// each are still to run: once none is pending, nothing more can happen.
    pub async fn hook_jobs(&self) -> Result<[i64; 4], AutumnError> {
        #[derive(QueryableByName)]
        struct Jobs {
            #[diesel(sql_type = BigInt)]
            jobs: i64,
            #[diesel(sql_type = BigInt)]
            pending: i64,
            #[diesel(sql_type = BigInt)]
            mails: i64,
            #[diesel(sql_type = BigInt)]
            mails_pending: i64,
        }
        let rows: Vec<Jobs> = with_db!(&self.pool, |db, sql| {
            diesel::sql_query(sql(HOOK_JOBS)).load(&mut *db).await?
        });
        let row = rows
            .into_iter()
            .next()
            .ok_or_else(|| AutumnError::internal("the queue count returned no row"))?;
        Ok([row.jobs, row.pending, row.mails, row.mails_pending])
    }

    async fn ensure_tables(pool: &DbPool, table: &UsersTable) -> Result<(), AutumnError> {
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        table
            .0
            .get_or_try_init(|| async {
                match pool.backend() {
                    DbBackend::Sqlite => {
                        let mut db = Db::<SqliteConnection>::from_pool(pool).await?;
                        db.batch_execute(SQLITE_SCHEMA).await?;
                        let has: Vec<Count> = diesel::sql_query(SQLITE_HAS_PASSWORD)
                            .load(&mut *db)
                            .await?;
                        if has.iter().all(|count| count.n == 0) {
                            db.batch_execute(ADD_PASSWORD_SQLITE).await?;
                        }
                    }
                    _ => {
                        let mut db = Db::<PgConnection>::from_pool(pool).await?;
                        db.batch_execute(POSTGRES_SCHEMA).await?;
                        db.batch_execute(ADD_PASSWORD_POSTGRES).await?;
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
        Self::ensure_tables(&pool, &table).await?;
        Ok(Self { pool })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_numbers_its_placeholders() {
        assert_eq!(
            dialect(DbBackend::Postgres, "INSERT INTO t (a, b) VALUES (?, ?)"),
            "INSERT INTO t (a, b) VALUES ($1, $2)"
        );
        assert_eq!(dialect(DbBackend::Sqlite, "a = ?"), "a = ?");
    }
}
