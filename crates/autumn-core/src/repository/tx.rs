//! [`RepoDb`] and [`RepoTx`]: a repository's connection, on whichever
//! database the app runs, and the transaction its mutations share.

use autumn_base::database::DbPool;
#[cfg(feature = "postgres")]
use autumn_base::database::PgConnection;
#[cfg(feature = "sqlite")]
use autumn_base::database::SqliteConnection;
use autumn_idempotency::database::{IdempotencyConnection, TxConnection};
use scoped_futures::{ScopedBoxFuture, ScopedFutureExt as _};

use crate::db::Db;
use crate::jobs::MutationContext;
use crate::{AutumnError, AutumnResult};

/// A pooled connection to the app database, PostgreSQL or SQLite as
/// `[database] url` says: what a generated repository holds, so one
/// repository serves an app on either.
// One per handler, on its stack: boxing the PostgreSQL variant would cost
// an allocation per request for nothing (as `DbConnection`).
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum RepoDb {
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(Db<PgConnection>),
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(Db<SqliteConnection>),
}

impl std::fmt::Debug for RepoDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepoDb").finish_non_exhaustive()
    }
}

impl RepoDb {
    /// A connection from `pool`.
    ///
    /// # Errors
    ///
    /// 503 when no connection can be had; 500 for a backend this build has
    /// no driver for.
    pub async fn from_pool(pool: &DbPool) -> AutumnResult<Self> {
        match pool {
            #[cfg(feature = "postgres")]
            DbPool::Postgres(_) => Ok(Self::Postgres(Db::from_pool(pool).await?)),
            #[cfg(feature = "sqlite")]
            DbPool::Sqlite(_) => Ok(Self::Sqlite(Db::from_pool(pool).await?)),
            #[allow(unreachable_patterns)]
            _ => Err(AutumnError::internal(
                "database.url names a database this build of the repositories has no driver for",
            )),
        }
    }

    /// The connection, outside any transaction (reads).
    pub fn connection(&mut self) -> TxConnection<'_> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(db) => TxConnection::Postgres(db),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(db) => TxConnection::Sqlite(db),
        }
    }

    /// Runs `f` in a transaction whose mutations carry `context`: committed
    /// when it returns `Ok`, rolled back when it returns `Err`. After the
    /// commit the worker is woken for the hook rows `f` wrote.
    ///
    /// # Errors
    ///
    /// What `f` returns, or the database's error.
    pub async fn tx<'a, R, F>(&'a mut self, context: &'a MutationContext, f: F) -> AutumnResult<R>
    where
        F: for<'r> FnOnce(&'r mut RepoTx<'r>) -> ScopedBoxFuture<'a, 'r, AutumnResult<R>>
            + Send
            + 'a,
        R: Send + 'a,
    {
        let result = match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(db) => {
                db.tx(|conn| {
                    async move {
                        let mut tx = RepoTx::new(conn, context);
                        f(&mut tx).await
                    }
                    .scope_boxed()
                })
                .await
            }
            #[cfg(feature = "sqlite")]
            Self::Sqlite(db) => {
                db.tx(|conn| {
                    async move {
                        let mut tx = RepoTx::new(conn, context);
                        f(&mut tx).await
                    }
                    .scope_boxed()
                })
                .await
            }
        };
        if result.is_ok() {
            context.committed();
        }
        result
    }
}

/// A transaction on the app database and the [`MutationContext`] of the
/// mutations in it. Generated repositories' `create_in`, `update_in` and
/// `delete_in` take one, so several mutations (an invoice and its line
/// items) commit together with their hook rows, and with the request's
/// record: `IdempotencyTx::commit` takes a `RepoTx` too.
pub struct RepoTx<'c> {
    conn: &'c mut (dyn IdempotencyConnection + 'static),
    context: &'c MutationContext,
}

impl std::fmt::Debug for RepoTx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepoTx")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl<'c> RepoTx<'c> {
    /// `conn` (a `PgConnection` or `SqliteConnection` in a transaction the
    /// caller opened), with `context`.
    pub fn new(
        conn: &'c mut (dyn IdempotencyConnection + 'static),
        context: &'c MutationContext,
    ) -> Self {
        Self { conn, context }
    }

    /// The mutations' context.
    pub fn context(&self) -> &MutationContext {
        self.context
    }

    /// The connection, for queries of the caller's own; `None` when the
    /// transaction is on a connection that cannot hold the hook rows (a
    /// shard).
    pub fn connection(&mut self) -> Option<TxConnection<'_>> {
        self.conn.idempotency_connection()
    }
}

impl IdempotencyConnection for RepoTx<'_> {
    fn idempotency_connection(&mut self) -> Option<TxConnection<'_>> {
        self.connection()
    }
}
