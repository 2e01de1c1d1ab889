//! [`AppMigrations`]: the app's own migrations (its tables), embedded in
//! its binary by `autumn_web::migrations!`, applied after the framework's,
//! one replica at a time, each all or nothing.
//!
//! They are tracked in `autumn_app_migrations`, apart from diesel's
//! `__diesel_schema_migrations`, which holds the framework's: an app's
//! rollback can then never reach a framework table.

use diesel::QueryableByName;
use diesel::sql_types::Text;
use diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};

use super::{DbConnection, DbError, DbPool};

/// One migration: a folder `VERSION_NAME` of the app's `migrations/`, with
/// its `up.sql` and `down.sql`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// What orders it among the others (the folder name up to its first
    /// `_`, as diesel writes it: `2026-12-08-093000`).
    pub version: &'static str,
    /// The rest of the folder name.
    pub name: &'static str,
    /// The SQL that applies it.
    pub up: &'static str,
    /// The SQL that reverts it (empty: it cannot be reverted).
    pub down: &'static str,
}

/// The app's migrations, oldest first.
#[derive(Debug, Clone, Copy)]
pub struct AppMigrations {
    list: &'static [Migration],
}

/// One line of [`AppMigrations::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    /// The migration's version.
    pub version: &'static str,
    /// Its name.
    pub name: &'static str,
    /// Whether it is applied.
    pub applied: bool,
}

/// The table the applied versions are kept in.
const TABLE: &str = "CREATE TABLE IF NOT EXISTS autumn_app_migrations \
    (version TEXT PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)";

/// The advisory lock that lets one replica migrate at a time ("autumo").
#[cfg(feature = "postgres")]
const LOCK: i64 = 0x6175_7475_6d6f;

#[derive(QueryableByName)]
struct Applied {
    #[diesel(sql_type = Text)]
    version: String,
}

/// A version or name as a SQL string literal. They come from folder names
/// the macro checked (letters, digits, `-`, `_`), so this only guards.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Runs `$body` (an expression using `$conn`, the connection of either
/// backend) inside a transaction that holds the migration lock:
/// PostgreSQL's advisory lock (replicas starting together wait their
/// turn), SQLite's write lock (`BEGIN IMMEDIATE`). Committed when `$body`
/// is `Ok`, rolled back otherwise, so a migration that fails leaves nothing
/// of itself behind (DDL is transactional on both).
macro_rules! locked {
    ($pool:expr, |$conn:ident| $body:expr) => {{
        match $pool.get().await? {
            #[cfg(feature = "postgres")]
            DbConnection::Postgres(mut held) => {
                let $conn = &mut *held;
                $conn
                    .batch_execute(&format!("BEGIN; SELECT pg_advisory_xact_lock({LOCK})"))
                    .await
                    .map_err(|error| DbError::Migration(error.to_string()))?;
                let outcome = $body;
                let end = if outcome.is_ok() {
                    "COMMIT"
                } else {
                    "ROLLBACK"
                };
                $conn
                    .batch_execute(end)
                    .await
                    .map_err(|error| DbError::Migration(error.to_string()))?;
                outcome
            }
            #[cfg(feature = "sqlite")]
            DbConnection::Sqlite(mut held) => {
                let $conn = &mut *held;
                $conn
                    .batch_execute("BEGIN IMMEDIATE")
                    .await
                    .map_err(|error| DbError::Migration(error.to_string()))?;
                let outcome = $body;
                let end = if outcome.is_ok() {
                    "COMMIT"
                } else {
                    "ROLLBACK"
                };
                $conn
                    .batch_execute(end)
                    .await
                    .map_err(|error| DbError::Migration(error.to_string()))?;
                outcome
            }
        }
    }};
}

/// The applied versions, read on `$conn` (the table made first).
macro_rules! applied_on {
    ($conn:expr) => {{
        $conn
            .batch_execute(TABLE)
            .await
            .map_err(|error| DbError::Migration(error.to_string()))?;
        let rows: Vec<Applied> = diesel::sql_query("SELECT version FROM autumn_app_migrations")
            .load($conn)
            .await
            .map_err(|error| DbError::Migration(error.to_string()))?;
        rows.into_iter()
            .map(|row| row.version)
            .collect::<std::collections::BTreeSet<String>>()
    }};
}

impl AppMigrations {
    /// The migrations `list` holds, in order: what `migrations!` makes.
    pub const fn new(list: &'static [Migration]) -> Self {
        Self { list }
    }

    /// Every migration, oldest first.
    pub fn all(&self) -> &'static [Migration] {
        self.list
    }

    /// Each migration and whether it is applied.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the database cannot be used.
    pub async fn status(&self, pool: &DbPool) -> Result<Vec<MigrationStatus>, DbError> {
        let list = self.list;
        let applied: Result<_, DbError> = locked!(pool, |conn| Ok(applied_on!(conn)));
        let applied = applied?;
        Ok(list
            .iter()
            .map(|migration| MigrationStatus {
                version: migration.version,
                name: migration.name,
                applied: applied.contains(migration.version),
            })
            .collect())
    }

    /// The migrations not yet applied.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the database cannot be used.
    pub async fn pending(&self, pool: &DbPool) -> Result<Vec<&'static Migration>, DbError> {
        let status = self.status(pool).await?;
        Ok(self
            .list
            .iter()
            .zip(status)
            .filter(|(_, status)| !status.applied)
            .map(|(migration, _)| migration)
            .collect())
    }

    /// Applies every pending migration, oldest first, in one transaction
    /// under the migration lock; the versions applied. A replica that waited
    /// for the lock finds them applied and applies nothing.
    ///
    /// # Errors
    ///
    /// [`DbError::Migration`] naming the migration that failed and why;
    /// none of this run's migrations is applied then.
    pub async fn migrate(&self, pool: &DbPool) -> Result<Vec<&'static str>, DbError> {
        let list = self.list;
        locked!(pool, |conn| {
            let applied = applied_on!(conn);
            let mut done = Vec::new();
            let mut failed = None;
            for migration in list.iter().filter(|m| !applied.contains(m.version)) {
                let record = format!(
                    "INSERT INTO autumn_app_migrations (version, name, applied_at) \
                     VALUES ({}, {}, CURRENT_TIMESTAMP)",
                    literal(migration.version),
                    literal(migration.name)
                );
                let ran = match conn.batch_execute(migration.up).await {
                    Ok(()) => conn.batch_execute(&record).await,
                    Err(error) => Err(error),
                };
                if let Err(error) = ran {
                    failed = Some(DbError::Migration(format!(
                        "migration {}_{} failed, and nothing of this run was applied: {error}",
                        migration.version, migration.name
                    )));
                    break;
                }
                done.push(migration.version);
            }
            match failed {
                Some(error) => Err(error),
                None => Ok(done),
            }
        })
    }

    /// Reverts the newest applied migration with its `down.sql`; its
    /// version, or `None` when none is applied.
    ///
    /// # Errors
    ///
    /// [`DbError::Migration`] when its `down.sql` is empty or fails (the
    /// migration stays applied then).
    pub async fn rollback(&self, pool: &DbPool) -> Result<Option<&'static str>, DbError> {
        let list = self.list;
        locked!(pool, |conn| {
            let applied = applied_on!(conn);
            match list.iter().rev().find(|m| applied.contains(m.version)) {
                None => Ok(None),
                Some(migration) if migration.down.trim().is_empty() => {
                    Err(DbError::Migration(format!(
                        "migration {}_{} has no down.sql: it cannot be reverted",
                        migration.version, migration.name
                    )))
                }
                Some(migration) => {
                    let forget = format!(
                        "DELETE FROM autumn_app_migrations WHERE version = {}",
                        literal(migration.version)
                    );
                    let ran = match conn.batch_execute(migration.down).await {
                        Ok(()) => conn.batch_execute(&forget).await,
                        Err(error) => Err(error),
                    };
                    ran.map(|()| Some(migration.version)).map_err(|error| {
                        DbError::Migration(format!(
                            "reverting {}_{} failed, and it stays applied: {error}",
                            migration.version, migration.name
                        ))
                    })
                }
            }
        })
    }
}
