//! The PostgreSQL connection the app's pool hands out: diesel-async's
//! `AsyncPgConnection`, plus one rule for pools without a statement cache.
//!
//! Behind a transaction pooler (PgBouncer in transaction mode) a statement
//! that runs outside a transaction is not one message to the server but
//! several, each ending in its own `Sync`: diesel-async prepares it (a
//! named statement), then binds and executes it, then closes it. The pooler
//! may give each of those to a different server connection, where the
//! statement is unknown ("prepared statement s12 does not exist"), or worse,
//! is another client's statement of the same name. So on such a pool a
//! statement issued outside a transaction runs in a transaction of its own,
//! which keeps every message of it on one server connection. Inside a
//! transaction (`Db::tx`, the framework's own operations), and on pools that
//! keep a statement cache, statements go straight through.

use diesel::QueryResult;
use diesel::connection::{CacheSize, Instrumentation};
use diesel::query_builder::{AsQuery, QueryFragment, QueryId};
use diesel_async::{
    AnsiTransactionManager, AsyncConnection, AsyncConnectionCore, AsyncPgConnection,
    SimpleAsyncConnection, TransactionManager as _,
};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt as _, StreamExt as _, TryStreamExt as _};

/// A pooled PostgreSQL connection: an `AsyncPgConnection` that, on a pool
/// made with `statement_cache = false`, runs each statement issued outside a
/// transaction in a transaction of its own, so that it is safe behind
/// PgBouncer in transaction pooling mode.
///
/// Use it as any diesel-async connection (`RunQueryDsl`, `transaction`).
/// [`async_pg`](Self::async_pg) reaches the `AsyncPgConnection` inside, for
/// what only it offers (`build_transaction()`); statements sent through it
/// skip that rule.
pub struct PgConnection {
    inner: AsyncPgConnection,
    /// A statement outside a transaction runs in one of its own.
    own_transactions: bool,
    /// Closing such a transaction failed: the session may still be in it,
    /// so the pool must not hand the connection out again.
    broken: bool,
}

impl std::fmt::Debug for PgConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConnection")
            .field("own_transactions", &self.own_transactions)
            .finish_non_exhaustive()
    }
}

impl PgConnection {
    /// Wraps `inner`; with `own_transactions`, statements outside a
    /// transaction run in one of their own, and `inner` keeps no prepared
    /// statements.
    pub(crate) fn new(mut inner: AsyncPgConnection, own_transactions: bool) -> Self {
        if own_transactions {
            inner.set_prepared_statement_cache_size(CacheSize::Disabled);
        }
        Self {
            inner,
            own_transactions,
            broken: false,
        }
    }

    /// Whether statements outside a transaction run in one of their own
    /// (the connection comes from a pool without a statement cache).
    pub fn own_transactions(&self) -> bool {
        self.own_transactions
    }

    /// The diesel-async connection inside. A statement sent through it
    /// outside a transaction does not get a transaction of its own: fine
    /// without a pooler, unsafe behind PgBouncer in transaction mode.
    pub fn async_pg(&mut self) -> &mut AsyncPgConnection {
        &mut self.inner
    }

    /// Whether the next statement needs a transaction of its own: on a pool
    /// without a statement cache, when none is open. A transaction manager
    /// in an error state lets the statement through, to fail as it would.
    fn wraps_next_statement(&mut self) -> bool {
        self.own_transactions
            && matches!(
                AnsiTransactionManager::transaction_manager_status_mut(&mut self.inner)
                    .transaction_depth(),
                Ok(None)
            )
    }
}

/// Runs `statement` (built but not yet started) between `BEGIN` and
/// `COMMIT` on `conn`, or `ROLLBACK` when it fails; `broken` is set when the
/// transaction could not be closed.
async fn in_own_transaction<T>(
    conn: &AsyncPgConnection,
    broken: &mut bool,
    statement: impl Future<Output = QueryResult<T>> + Send,
) -> QueryResult<T> {
    let mut shared = conn;
    shared.batch_execute("BEGIN").await?;
    let outcome = statement.await;
    let end = if outcome.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    match shared.batch_execute(end).await {
        Ok(()) => outcome,
        Err(error) => {
            *broken = true;
            // The statement's own error says more than a failed rollback.
            outcome.and(Err(error))
        }
    }
}

impl SimpleAsyncConnection for PgConnection {
    // One simple-protocol message, however many statements it holds: the
    // pooler gives it to one server connection.
    async fn batch_execute(&mut self, query: &str) -> QueryResult<()> {
        self.inner.batch_execute(query).await
    }
}

type Inner = AsyncPgConnection;

impl AsyncConnectionCore for PgConnection {
    type ExecuteFuture<'conn, 'query> = BoxFuture<'conn, QueryResult<usize>>;
    type LoadFuture<'conn, 'query> = BoxFuture<'conn, QueryResult<Self::Stream<'conn, 'query>>>;
    type Stream<'conn, 'query> = <Inner as AsyncConnectionCore>::Stream<'conn, 'query>;
    type Row<'conn, 'query> = <Inner as AsyncConnectionCore>::Row<'conn, 'query>;
    type Backend = diesel::pg::Pg;

    fn load<'conn, 'query, T>(&'conn mut self, source: T) -> Self::LoadFuture<'conn, 'query>
    where
        T: AsQuery + 'query,
        T::Query: QueryFragment<Self::Backend> + QueryId + 'query,
    {
        if !self.wraps_next_statement() {
            return self.inner.load(source);
        }
        let Self { inner, broken, .. } = self;
        let shared: &'conn AsyncPgConnection = inner;
        // Built now (diesel-async turns the query into SQL and binds before
        // its future starts, so `T` need not be `Send`), sent after BEGIN.
        let load = (&mut &*shared).load(source);
        async move {
            let rows = in_own_transaction(shared, broken, async move {
                // Every row is read before COMMIT; dropping the stream
                // first closes the statement inside the transaction.
                let stream = load.await?;
                stream.try_collect::<Vec<_>>().await
            })
            .await?;
            Ok(futures_util::stream::iter(rows.into_iter().map(Ok)).boxed())
        }
        .boxed()
    }

    fn execute_returning_count<'conn, 'query, T>(
        &'conn mut self,
        source: T,
    ) -> Self::ExecuteFuture<'conn, 'query>
    where
        T: QueryFragment<Self::Backend> + QueryId + 'query,
    {
        if !self.wraps_next_statement() {
            return self.inner.execute_returning_count(source);
        }
        let Self { inner, broken, .. } = self;
        let shared: &'conn AsyncPgConnection = inner;
        let execute = (&mut &*shared).execute_returning_count(source);
        async move { in_own_transaction(shared, broken, execute).await }.boxed()
    }
}

impl AsyncConnection for PgConnection {
    type TransactionManager = AnsiTransactionManager;

    /// Connects through [`PgConnector`](super::PgConnector), so the URL's
    /// `sslmode` and `sslrootcert` apply as they do in the pool.
    async fn establish(database_url: &str) -> diesel::ConnectionResult<Self> {
        let connector = super::PgConnector::from_url(database_url)
            .map_err(|e| diesel::ConnectionError::InvalidConnectionUrl(e.to_string()))?;
        Ok(Self::new(connector.establish().await?, false))
    }

    fn transaction_state(&mut self) -> &mut AnsiTransactionManager {
        self.inner.transaction_state()
    }

    fn instrumentation(&mut self) -> &mut dyn Instrumentation {
        self.inner.instrumentation()
    }

    fn set_instrumentation(&mut self, instrumentation: impl Instrumentation) {
        self.inner.set_instrumentation(instrumentation);
    }

    fn set_prepared_statement_cache_size(&mut self, size: CacheSize) {
        self.inner.set_prepared_statement_cache_size(size);
    }
}

impl diesel_async::pooled_connection::PoolableConnection for PgConnection {
    fn is_broken(&mut self) -> bool {
        self.broken
            || diesel_async::pooled_connection::PoolableConnection::is_broken(&mut self.inner)
    }
}
