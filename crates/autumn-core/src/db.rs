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

use autumn_idempotency::database::{DbPool, PooledConnection};
use axum::extract::FromRequestParts;
use http::request::Parts;
use scoped_futures::ScopedBoxFuture;

#[cfg(feature = "postgres")]
pub use autumn_idempotency::database::PgConnection;
#[cfg(feature = "sqlite")]
pub use autumn_idempotency::database::SqliteConnection;
pub use autumn_idempotency::database::{DbBackend, DbError};

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
