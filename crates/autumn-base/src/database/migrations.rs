//! `FRAMEWORK_MIGRATIONS`: the tables Autumn itself needs, embedded in the
//! binary and run at startup (idempotently: applied ones are skipped).

use diesel_migrations::{EmbeddedMigrations, MigrationHarness as _, embed_migrations};

use super::{DbError, DbPool};

/// The advisory lock key that serialises framework migrations ("autumn" in
/// ASCII).
#[cfg(feature = "postgres")]
const MIGRATION_LOCK: i64 = 0x6175_7475_6d6e;

#[cfg(feature = "postgres")]
const POSTGRES: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");
#[cfg(feature = "sqlite")]
const SQLITE: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");

/// The framework's own migrations, one set per backend.
#[derive(Debug, Clone, Copy)]
pub struct FrameworkMigrations {
    _private: (),
}

/// The framework's own migrations: the `autumn_idempotency_keys`,
/// `autumn_sessions`, `autumn_api_tokens` and `autumn_commit_jobs` tables.
pub const FRAMEWORK_MIGRATIONS: FrameworkMigrations = FrameworkMigrations { _private: () };

impl FrameworkMigrations {
    /// Applies every framework migration not yet applied to `pool`'s database.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the database cannot be reached or a migration fails.
    pub async fn run(&self, pool: &DbPool) -> Result<(), DbError> {
        let conn = pool.get().await?;
        // Migrations use diesel's synchronous API: run them on the blocking
        // pool, over the pooled connection.
        let applied = tokio::task::spawn_blocking(move || run_blocking(conn))
            .await
            .map_err(|e| DbError::Migration(e.to_string()))??;
        // Logged here rather than on the blocking thread, which does not
        // carry the caller's subscriber.
        if applied.is_empty() {
            tracing::info!("framework migrations: none pending");
        } else {
            tracing::info!("framework migrations applied: {}", applied.join(", "));
        }
        Ok(())
    }
}

/// Why the migrations failed, inside the migration transaction (which
/// needs an error type that a failed `BEGIN` or `COMMIT` converts into):
/// the error itself, made text only for `DbError::Migration`.
#[cfg(feature = "postgres")]
#[derive(Debug)]
struct MigrationError(Box<dyn std::error::Error + Send + Sync>);

#[cfg(feature = "postgres")]
impl From<diesel::result::Error> for MigrationError {
    fn from(error: diesel::result::Error) -> Self {
        Self(Box::new(error))
    }
}

/// Runs the pending migrations; the versions applied.
fn run_blocking(conn: super::DbConnection) -> Result<Vec<String>, DbError> {
    #[cfg(feature = "postgres")]
    use diesel::connection::{Connection as _, SimpleConnection as _};
    use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
    match conn {
        #[cfg(feature = "postgres")]
        super::DbConnection::Postgres(object) => {
            let conn = diesel_async::pooled_connection::deadpool::Object::take(object);
            let mut wrapper: AsyncConnectionWrapper<super::PgConnection> = conn.into();
            // Replicas starting together would race to create the same
            // tables. All pending migrations run in one transaction that
            // first takes a transaction-level advisory lock: one replica
            // migrates while the others wait on the lock, and once they get
            // it they read the applied set again (it is read after the lock)
            // and find nothing pending. PostgreSQL DDL is transactional, so
            // a failed migration leaves nothing half done. A transaction, not
            // a session lock, because behind a transaction pooler
            // (PgBouncer) consecutive statements outside one may reach
            // different server connections: the lock would be taken on one,
            // the migrations run on another, and the lock left behind on a
            // pooled server connection. The lock ends with the transaction.
            let applied = wrapper.transaction::<_, MigrationError, _>(|conn| {
                conn.batch_execute(&format!("SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
                    .map_err(MigrationError::from)?;
                conn.run_pending_migrations(POSTGRES)
                    .map(|versions| versions.iter().map(ToString::to_string).collect())
                    .map_err(MigrationError)
            });
            applied.map_err(|MigrationError(error)| DbError::Migration(error.to_string()))
        }
        #[cfg(feature = "sqlite")]
        super::DbConnection::Sqlite(object) => {
            let conn = diesel_async::pooled_connection::deadpool::Object::take(object);
            let mut wrapper: AsyncConnectionWrapper<super::SqliteConnection> = conn.into();
            let applied = wrapper
                .run_pending_migrations(SQLITE)
                .map_err(|e| DbError::Migration(e.to_string()))?;
            Ok(applied.iter().map(ToString::to_string).collect())
        }
    }
}
