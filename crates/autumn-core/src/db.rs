//! The `Db` extractor: a pooled connection to the app database, with
//! transactions written as scoped futures.
//!
//! ```no_run
//! # #[cfg(feature = "postgres")] mod demo {
//! use autumn_core::db::Db;
//! use autumn_core::AutumnResult;
//! use diesel_async::RunQueryDsl as _;
//! use scoped_futures::ScopedFutureExt as _;
//!
//! async fn count(mut db: Db) -> AutumnResult<String> {
//!     let rows = db
//!         .tx(|conn| {
//!             async move { diesel::sql_query("SELECT 1").execute(conn).await }.scope_boxed()
//!         })
//!         .await?;
//!     Ok(rows.to_string())
//! }
//! # }
//! ```

use std::ops::{Deref, DerefMut};

use autumn_base::database::{DbPool, PooledConnection};
use autumn_idempotency::database::{IdempotencyConnection, TxConnection};
use axum::extract::FromRequestParts;
use http::request::Parts;
use scoped_futures::ScopedBoxFuture;

#[cfg(feature = "postgres")]
pub use autumn_base::database::PgConnection;
#[cfg(feature = "sqlite")]
pub use autumn_base::database::SqliteConnection;
pub use autumn_base::database::{DbBackend, DbError};

use crate::AutumnError;

/// The connection type `Db` uses when none is named: PostgreSQL when that
/// backend is compiled in, SQLite otherwise.
#[cfg(feature = "postgres")]
pub type DefaultConnection = PgConnection;
/// The connection type `Db` uses when none is named.
#[cfg(all(feature = "sqlite", not(feature = "postgres")))]
pub type DefaultConnection = SqliteConnection;

/// A connection from the app's pool (`[database] url`), returned to the pool
/// when dropped. Dereferences to the diesel-async connection.
///
/// An app on SQLite with both backends compiled in names it:
/// `Db<SqliteConnection>`.
///
/// On a PostgreSQL pool with `[database] statement_cache = false` (behind
/// PgBouncer in transaction mode), each statement sent outside
/// [`tx`](Self::tx) runs in a transaction of its own, so that its
/// preparation and execution reach one server connection; statements
/// inside `tx` share its transaction. State meant to outlive one
/// transaction (`SET` without `LOCAL`, session advisory locks, temporary
/// tables) does not survive such a pooler.
pub struct Db<C: PooledConnection = DefaultConnection> {
    conn: C::Pooled,
}

impl<C: PooledConnection> std::fmt::Debug for Db<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").finish_non_exhaustive()
    }
}

impl<C: PooledConnection> Db<C> {
    /// Takes a connection from `pool`.
    ///
    /// # Errors
    ///
    /// [`AutumnError`] 500 when `pool` is of another backend, 503 when no
    /// connection can be had.
    pub async fn from_pool(pool: &DbPool) -> Result<Self, AutumnError> {
        let Some(checkout) = C::checkout(pool) else {
            return Err(AutumnError::internal(format!(
                "Db<{}> was asked for, but database.url is a {:?} database",
                std::any::type_name::<C>(),
                pool.backend()
            )));
        };
        match checkout.await {
            Ok(conn) => Ok(Self { conn }),
            Err(error) => {
                tracing::warn!(%error, "no database connection");
                Err(AutumnError::unavailable(
                    "the database is unavailable; retry later",
                ))
            }
        }
    }

    /// Runs `f` in a transaction: committed when it returns `Ok`, rolled
    /// back when it returns `Err` (or panics).
    ///
    /// # Errors
    ///
    /// What `f` returns, or the database's error converted into `E`.
    pub async fn tx<'a, R, E, F>(&'a mut self, f: F) -> Result<R, E>
    where
        F: for<'r> FnOnce(&'r mut C) -> ScopedBoxFuture<'a, 'r, Result<R, E>> + Send + 'a,
        E: From<diesel::result::Error> + Send + 'a,
        R: Send + 'a,
    {
        C::transaction(&mut *self.conn, f).await
    }
}

impl<C: PooledConnection> Deref for Db<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.conn
    }
}

impl<C: PooledConnection> DerefMut for Db<C> {
    fn deref_mut(&mut self) -> &mut C {
        &mut self.conn
    }
}

impl<S: Send + Sync, C: PooledConnection> FromRequestParts<S> for Db<C> {
    type Rejection = AutumnError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let Some(pool) = parts.extensions.get::<DbPool>().cloned() else {
            return Err(AutumnError::internal(
                "a handler takes Db, but no database is configured; set database.url (AUTUMN_DATABASE__URL)",
            ));
        };
        Self::from_pool(&pool).await
    }
}

impl<C: PooledConnection + IdempotencyConnection> IdempotencyConnection for Db<C> {
    fn idempotency_connection(&mut self) -> Option<TxConnection<'_>> {
        self.conn.idempotency_connection()
    }
}

/// A connection to one shard of an app that shards its data, from a pool of
/// its own: queries and transactions work as on [`Db`].
///
/// The idempotency key's row lives on the primary database, not on a shard:
/// `IdempotencyTx`'s `commit`, `set_recovery_point` and `recovery_point` on
/// a `ShardedDb` connection give 500, saying to use the primary.
///
/// ```no_run
/// # #[cfg(feature = "postgres")] mod demo {
/// use autumn_core::db::ShardedDb;
/// use autumn_base::database::DbPool;
/// use autumn_core::AutumnResult;
/// use diesel_async::RunQueryDsl as _;
/// use scoped_futures::ScopedFutureExt as _;
///
/// async fn archive(shard_pool: &DbPool) -> AutumnResult<usize> {
///     let mut shard: ShardedDb = ShardedDb::from_pool(shard_pool).await?;
///     shard
///         .tx(|conn| {
///             async move { diesel::sql_query("SELECT 1").execute(&mut **conn).await }
///                 .scope_boxed()
///         })
///         .await
///         .map_err(Into::into)
/// }
/// # }
/// ```
pub struct ShardedDb<C: PooledConnection = DefaultConnection> {
    conn: C::Pooled,
}

impl<C: PooledConnection> std::fmt::Debug for ShardedDb<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedDb").finish_non_exhaustive()
    }
}

impl<C: PooledConnection> ShardedDb<C> {
    /// Takes a connection from the shard's `pool`.
    ///
    /// # Errors
    ///
    /// As [`Db::from_pool`].
    pub async fn from_pool(pool: &DbPool) -> Result<Self, AutumnError> {
        let db = Db::<C>::from_pool(pool).await?;
        Ok(Self { conn: db.conn })
    }

    /// Runs `f` in a transaction on the shard, handing it this connection
    /// (so it stays a shard's): committed when it returns `Ok`, rolled back
    /// when it returns `Err`.
    ///
    /// # Errors
    ///
    /// What `f` returns, or the database's error converted into `E`.
    pub async fn tx<'a, R, E, F>(&'a mut self, f: F) -> Result<R, E>
    where
        F: for<'r> FnOnce(&'r mut Self) -> ScopedBoxFuture<'a, 'r, Result<R, E>> + Send + 'a,
        E: From<diesel::result::Error> + Send + 'a,
        R: Send + 'a,
    {
        use diesel_async::TransactionManager as _;
        type Manager<C> = <C as diesel_async::AsyncConnection>::TransactionManager;
        Manager::<C>::begin_transaction(&mut *self.conn).await?;
        match f(&mut *self).await {
            Ok(value) => {
                Manager::<C>::commit_transaction(&mut *self.conn).await?;
                Ok(value)
            }
            Err(error) => {
                // The caller's error says more than a failed rollback; a
                // connection left in a transaction is not reused by the pool.
                let _rolled_back = Manager::<C>::rollback_transaction(&mut *self.conn).await;
                Err(error)
            }
        }
    }
}

impl<C: PooledConnection> Deref for ShardedDb<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.conn
    }
}

impl<C: PooledConnection> DerefMut for ShardedDb<C> {
    fn deref_mut(&mut self) -> &mut C {
        &mut self.conn
    }
}

impl<C: PooledConnection> IdempotencyConnection for ShardedDb<C> {
    fn idempotency_connection(&mut self) -> Option<TxConnection<'_>> {
        None
    }
}
