//! The app database: a connection pool on PostgreSQL or SQLite, its
//! connections, the SQL every framework table shares, and the framework's
//! own migrations. (The database idempotency store, and writing a request's
//! record in the app's own transaction, are `autumn_idempotency::database`'s.)
//!
//! Both backends run on diesel-async: `AsyncPgConnection` for PostgreSQL (no
//! libpq needed), and SQLite's synchronous connection run on tokio's blocking
//! pool through `SyncConnectionWrapper` (SQLite itself is bundled).

mod app_migrations;
mod migrations;
#[cfg(feature = "postgres")]
mod pg;
mod pooled;
mod sql;
#[cfg(feature = "postgres")]
mod tls;

use std::time::Duration;

use diesel_async::pooled_connection::AsyncDieselConnectionManager;

use crate::redact::redact_passwords as redact;
use diesel_async::pooled_connection::deadpool::{Object, Pool};

pub use app_migrations::{AppMigrations, Migration, MigrationStatus};
pub use migrations::{FRAMEWORK_MIGRATIONS, FrameworkMigrations};
pub use pooled::PooledConnection;
pub use sql::{
    Cacheable, CachedExt, ExpiringTable, STORE_NOW, postgres_sql, spawn_sweeper, sqlite_params,
};
#[cfg(feature = "postgres")]
pub use sql::{begin_uncached, end_uncached};

#[cfg(feature = "postgres")]
pub use pg::PgConnection;
#[cfg(feature = "postgres")]
pub use tls::{PgConnector, SslMode};

/// A pooled SQLite connection.
#[cfg(feature = "sqlite")]
pub type SqliteConnection =
    diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>;

/// A PostgreSQL connection pool, and whether its connections keep the
/// statements they prepare (see [`DbPool::with_statement_cache`]). Derefs
/// to the deadpool pool.
#[cfg(feature = "postgres")]
#[derive(Clone)]
pub struct PgPool {
    pool: Pool<PgConnection>,
    statement_cache: bool,
}

#[cfg(feature = "postgres")]
impl PgPool {
    /// Whether connections keep prepared statements (the default), rather
    /// than running each framework statement in a transaction of its own.
    pub fn statement_cache(&self) -> bool {
        self.statement_cache
    }
}

#[cfg(feature = "postgres")]
impl std::ops::Deref for PgPool {
    type Target = Pool<PgConnection>;

    fn deref(&self) -> &Self::Target {
        &self.pool
    }
}

/// A connection pool on the app database.
///
/// Also a request extension: when `[database] url` is set, the framework's
/// per-route stack puts the app's pool on every request that reaches one of
/// the app's routes (merged routers included), and the `Db` extractor and
/// the repositories `#[repository]` generates take their connections from
/// it.
#[derive(Clone)]
#[non_exhaustive]
pub enum DbPool {
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(PgPool),
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(Pool<SqliteConnection>),
}

impl std::fmt::Debug for DbPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DbPool").field(&self.backend()).finish()
    }
}

/// Which database a pool talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DbBackend {
    /// PostgreSQL.
    Postgres,
    /// SQLite.
    Sqlite,
}

/// A connection taken from a [`DbPool`]; it goes back to the pool on drop.
// Short-lived and on the stack: boxing the larger variant would cost an
// allocation per store operation for nothing.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum DbConnection {
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(Object<PgConnection>),
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(Object<SqliteConnection>),
}

/// Why the database could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    /// The URL names no database this build supports.
    #[error(
        "database.url {url:?} is not a database this build supports (expected postgres://... or sqlite://path{})",
        if cfg!(all(feature = "postgres", feature = "sqlite")) { "" } else { "; enable the autumn-web feature for it" }
    )]
    UnsupportedUrl {
        /// The URL, password redacted.
        url: String,
    },
    /// The pool could not be built.
    #[error("cannot create the database pool for {url}: {message}")]
    Pool {
        /// The URL, password redacted.
        url: String,
        /// What failed.
        message: String,
    },
    /// No connection could be had.
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    /// TLS to PostgreSQL: a `sslmode` or `sslrootcert` that cannot be used
    /// (an unknown mode, an unreadable CA file), or a handshake that failed
    /// (which check: the certificate's chain, its host name, the server
    /// offering no TLS).
    #[error("TLS: {0}")]
    Tls(String),
    /// The PostgreSQL URL does not parse (an unknown parameter, a bad
    /// port).
    #[error("invalid PostgreSQL URL: {0}")]
    InvalidUrl(String),
    /// A query failed.
    #[error("database query failed: {0}")]
    Query(#[from] diesel::result::Error),
    /// A framework migration failed.
    #[error("framework migrations failed: {0}")]
    Migration(String),
}

impl DbPool {
    /// A pool of at most `size` connections to `url` (`postgres://...` or
    /// `sqlite://path`). Connections are made on first use; call
    /// [`health_check`](Self::health_check) to fail fast at startup.
    ///
    /// # Errors
    ///
    /// [`DbError::UnsupportedUrl`] for another scheme, [`DbError::Pool`] when
    /// the pool cannot be built; for PostgreSQL, [`DbError::Tls`] when the
    /// URL's `sslmode` or `sslrootcert` cannot be used (see
    /// [`PgConnector`]) and [`DbError::InvalidUrl`] when the rest of it
    /// does not parse.
    pub fn new(url: &str, size: usize, connect_timeout: Duration) -> Result<Self, DbError> {
        Self::with_statement_cache(url, size, connect_timeout, true)
    }

    /// [`new`](Self::new), choosing whether PostgreSQL connections keep the
    /// statements they prepare (`statement_cache`, the default) or prepare
    /// each statement for its one use and close it before the statement's
    /// transaction ends.
    ///
    /// Turn the cache off behind a pooler that hands each transaction
    /// whichever server connection is free (PgBouncer in transaction
    /// pooling mode, before 1.21): a statement prepared on one server
    /// connection is unknown on the next. Without the cache, every
    /// framework statement runs in a transaction of its own, so its
    /// preparation, execution and close all reach the same server. It costs
    /// round trips (see the cloud-native guide); SQLite ignores it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use autumn_base::database::DbPool;
    ///
    /// // Nothing connects until first use.
    /// let pool = DbPool::with_statement_cache(
    ///     "postgres://app@127.0.0.1:6432/app",
    ///     10,
    ///     Duration::from_secs(5),
    ///     false,
    /// )?;
    /// assert!(!pool.statement_cache());
    /// # Ok::<(), autumn_base::database::DbError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_statement_cache(
        url: &str,
        size: usize,
        connect_timeout: Duration,
        statement_cache: bool,
    ) -> Result<Self, DbError> {
        let pool_error = |error: &dyn std::fmt::Display| DbError::Pool {
            url: redact(url),
            message: error.to_string(),
        };
        // Only PostgreSQL keeps prepared statements.
        #[cfg(not(feature = "postgres"))]
        let _ = statement_cache;
        #[cfg(feature = "postgres")]
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            // Read (and its CA file loaded) now: a bad TLS setting fails
            // the pool, not each connection later.
            let connector = std::sync::Arc::new(PgConnector::from_url(url)?);
            let mut config = diesel_async::pooled_connection::ManagerConfig::default();
            // No test query on every checkout: it doubled the statements per
            // store operation. A dead connection fails its real query, which
            // the layer answers with 503 (fail closed), and is then dropped.
            config.recycling_method = diesel_async::pooled_connection::RecyclingMethod::Fast;
            // Every connection is made by the connector, whatever URL the
            // manager hands over (it is this one).
            use futures_util::FutureExt as _;
            config.custom_setup = Box::new(move |_url| {
                let connector = connector.clone();
                async move {
                    if statement_cache {
                        Ok(PgConnection::new(connector.establish().await?, false))
                    } else {
                        establish_without_statement_cache(&connector).await
                    }
                }
                .boxed()
            });
            let manager =
                AsyncDieselConnectionManager::<PgConnection>::new_with_config(url, config);
            let pool = Pool::builder(manager)
                .max_size(size.max(1))
                .runtime(deadpool::Runtime::Tokio1)
                .wait_timeout(Some(connect_timeout))
                .create_timeout(Some(connect_timeout))
                .build()
                .map_err(|e| pool_error(&e))?;
            return Ok(Self::Postgres(PgPool {
                pool,
                statement_cache,
            }));
        }
        #[cfg(feature = "sqlite")]
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            let manager = AsyncDieselConnectionManager::<SqliteConnection>::new_with_config(
                path,
                sqlite_manager_config(),
            );
            let pool = Pool::builder(manager)
                .max_size(size.max(1))
                .runtime(deadpool::Runtime::Tokio1)
                .wait_timeout(Some(connect_timeout))
                .create_timeout(Some(connect_timeout))
                .build()
                .map_err(|e| pool_error(&e))?;
            return Ok(Self::Sqlite(pool));
        }
        let _ = (size, connect_timeout, pool_error);
        Err(DbError::UnsupportedUrl { url: redact(url) })
    }

    /// Whether connections keep the statements they prepare: `false` only
    /// for a PostgreSQL pool made with
    /// [`with_statement_cache`](Self::with_statement_cache)`(.., false)`.
    pub fn statement_cache(&self) -> bool {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(pool) => pool.statement_cache(),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => true,
        }
    }

    /// Which database this pool talks to.
    pub fn backend(&self) -> DbBackend {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => DbBackend::Postgres,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => DbBackend::Sqlite,
        }
    }

    /// A connection from the pool.
    ///
    /// # Errors
    ///
    /// [`DbError::Connect`] when none can be had within the connect timeout;
    /// [`DbError::Tls`] when a PostgreSQL connection failed in TLS (the
    /// check that failed, such as the certificate's host name).
    pub async fn get(&self) -> Result<DbConnection, DbError> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(pool) => pool
                .get()
                .await
                .map(DbConnection::Postgres)
                .map_err(|e| pool_error(&e)),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(pool) => pool
                .get()
                .await
                .map(DbConnection::Sqlite)
                .map_err(|e| pool_error(&e)),
        }
    }

    /// A connection made after `since`. Idle connections made before it are
    /// closed first: once one connection turned out dead, the others pooled
    /// with it (say, before a server restart) are likely dead too.
    ///
    /// # Errors
    ///
    /// [`DbError::Connect`] when no new connection can be had within the
    /// connect timeout.
    pub async fn get_made_after(&self, since: std::time::Instant) -> Result<DbConnection, DbError> {
        /// One arm per backend: the pools differ only in their type.
        macro_rules! made_after {
            ($pool:expr, $variant:ident) => {{
                let pool = $pool;
                pool.retain(|_, metrics| metrics.created > since);
                // One checked out before `since` may come back to the pool
                // meanwhile: close it and ask again, at most once per slot.
                for _ in 0..=pool.status().max_size {
                    let object = pool.get().await.map_err(|e| pool_error(&e))?;
                    if Object::metrics(&object).created > since {
                        return Ok(DbConnection::$variant(object));
                    }
                    drop(Object::take(object));
                }
                Err(DbError::Connect(
                    "no new connection could be had from the pool".to_owned(),
                ))
            }};
        }
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(pool) => made_after!(pool, Postgres),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(pool) => made_after!(pool, Sqlite),
        }
    }

    /// Takes a connection and runs `SELECT 1` on it: the startup check.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the database cannot be reached or answer.
    pub async fn health_check(&self) -> Result<(), DbError> {
        use diesel_async::SimpleAsyncConnection as _;
        match self.get().await? {
            #[cfg(feature = "postgres")]
            DbConnection::Postgres(mut conn) => conn.batch_execute("SELECT 1").await?,
            #[cfg(feature = "sqlite")]
            DbConnection::Sqlite(mut conn) => conn.batch_execute("SELECT 1").await?,
        }
        Ok(())
    }
}

/// Why a pool gave no connection: [`DbError::Tls`] when the connection
/// failed in TLS (said in full, without the pool's wording around it), else
/// [`DbError::Connect`].
fn pool_error(
    error: &deadpool::managed::PoolError<diesel_async::pooled_connection::PoolError>,
) -> DbError {
    #[cfg(feature = "postgres")]
    {
        use deadpool::managed::PoolError as Pool;
        use diesel_async::pooled_connection::PoolError as Manager;
        if let Pool::Backend(Manager::ConnectionError(diesel::ConnectionError::BadConnection(
            message,
        ))) = error
            && let Some(tls) = message.strip_prefix(tls::TLS_FAILURE)
        {
            return DbError::Tls(tls.to_owned());
        }
    }
    DbError::Connect(error.to_string())
}

/// A PostgreSQL connection that prepares each statement for its one use
/// (see [`DbPool::with_statement_cache`]).
///
/// Making a connection runs two settings statements of diesel-async's own
/// (time zone, encoding), prepared and run outside any transaction: behind
/// a transaction pooler their preparation and execution could reach two
/// server connections. So the connection is made in a transaction, opened
/// before diesel-async sees it and committed after (the settings last for
/// the session: the pooler carries them over to whichever server
/// connection serves it next).
#[cfg(feature = "postgres")]
async fn establish_without_statement_cache(
    connector: &PgConnector,
) -> diesel::ConnectionResult<PgConnection> {
    use diesel_async::SimpleAsyncConnection as _;
    let bad =
        |error: tokio_postgres::Error| diesel::ConnectionError::BadConnection(error.to_string());
    let (client, connection) = connector.connect_raw().await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "a database connection ended");
        }
    });
    client.batch_execute("BEGIN").await.map_err(bad)?;
    let mut conn = diesel_async::AsyncPgConnection::try_from(client).await?;
    conn.batch_execute("COMMIT")
        .await
        .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
    Ok(PgConnection::new(conn, true))
}

/// SQLite waits for a busy database instead of failing at once, and uses
/// write-ahead logging so readers do not block the writer.
#[cfg(feature = "sqlite")]
fn sqlite_manager_config() -> diesel_async::pooled_connection::ManagerConfig<SqliteConnection> {
    use diesel_async::{AsyncConnection as _, SimpleAsyncConnection as _};
    use futures_util::FutureExt as _;
    let mut config = diesel_async::pooled_connection::ManagerConfig::default();
    config.recycling_method = diesel_async::pooled_connection::RecyclingMethod::Fast;
    config.custom_setup = Box::new(|url| {
        let url = url.to_owned();
        async move {
            let mut conn = SqliteConnection::establish(&url).await?;
            conn.batch_execute("PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL;")
                .await
                .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
            Ok(conn)
        }
        .boxed()
    });
    config
}

#[cfg(test)]
mod tests {
    use crate::redact::redact_passwords as redact;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert_eq!(redact("sqlite://data/app.db"), "sqlite://data/app.db");
    }
}
