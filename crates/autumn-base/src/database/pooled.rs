//! Checking a connection of a given backend out of a [`DbPool`].

use diesel_async::pooled_connection::deadpool::Object;

#[cfg(feature = "postgres")]
use super::PgConnection;
#[cfg(feature = "sqlite")]
use super::SqliteConnection;
use super::{DbError, DbPool};

/// A connection type a [`DbPool`] can hand out: implemented for
/// [`PgConnection`] and [`SqliteConnection`], so code generic over the
/// connection (the `Db` extractor) finds the pool of its backend.
pub trait PooledConnection: diesel_async::AsyncConnection + Send + 'static {
    /// A connection checked out of the pool; back to the pool on drop.
    type Pooled: std::ops::DerefMut<Target = Self> + Send + 'static;

    /// Checks a connection out of `pool`; `None` when `pool` is of another
    /// backend.
    fn checkout(
        pool: &DbPool,
    ) -> Option<impl Future<Output = Result<Self::Pooled, DbError>> + Send + '_>;
}

#[cfg(feature = "postgres")]
impl PooledConnection for PgConnection {
    type Pooled = Object<PgConnection>;

    fn checkout(
        pool: &DbPool,
    ) -> Option<impl Future<Output = Result<Self::Pooled, DbError>> + Send + '_> {
        #[allow(unreachable_patterns)]
        match pool {
            DbPool::Postgres(pool) => {
                Some(async move { pool.get().await.map_err(|e| super::pool_error(&e)) })
            }
            _ => None,
        }
    }
}

#[cfg(feature = "sqlite")]
impl PooledConnection for SqliteConnection {
    type Pooled = Object<SqliteConnection>;

    fn checkout(
        pool: &DbPool,
    ) -> Option<impl Future<Output = Result<Self::Pooled, DbError>> + Send + '_> {
        #[allow(unreachable_patterns)]
        match pool {
            DbPool::Sqlite(pool) => {
                Some(async move { pool.get().await.map_err(|e| super::pool_error(&e)) })
            }
            _ => None,
        }
    }
}
