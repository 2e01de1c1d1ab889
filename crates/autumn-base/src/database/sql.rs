//! What every framework table's SQL shares: statements prepared once per
//! connection, and sweeping expired rows in bounded batches, one replica at a
//! time.

use std::time::Duration;

#[cfg(feature = "postgres")]
use diesel::QueryableByName;
#[cfg(feature = "postgres")]
use diesel::sql_types::Bool;
use diesel::sql_types::{BigInt, Nullable};
use diesel_async::RunQueryDsl as _;

use super::{DbConnection, DbError, DbPool};

/// A raw statement the connection may prepare once and reuse: what
/// [`CachedExt::cached`] makes.
///
/// diesel marks every raw SQL statement as unsafe to cache, since it cannot
/// know the text is fixed; the framework's are (parameters are bound, never
/// spliced), so caching them by their text saves a prepare round trip per
/// statement.
#[derive(Debug, Clone, Copy)]
pub struct Cacheable<Q>(Q);

impl<Q, DB> diesel::query_builder::QueryFragment<DB> for Cacheable<Q>
where
    Q: diesel::query_builder::QueryFragment<DB>,
    DB: diesel::backend::Backend,
{
    fn walk_ast<'b>(
        &'b self,
        pass: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> diesel::QueryResult<()> {
        self.0.walk_ast(pass)
    }

    fn is_safe_to_cache_prepared(&self, _backend: &DB) -> diesel::QueryResult<bool> {
        Ok(true)
    }
}

impl<Q> diesel::query_builder::QueryId for Cacheable<Q> {
    type QueryId = ();
    // No type to key the cache by: it is keyed by the SQL text instead.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: diesel::query_builder::Query> diesel::query_builder::Query for Cacheable<Q> {
    type SqlType = Q::SqlType;
}

/// `.cached()` on a bound raw statement whose text never changes.
///
/// ```
/// use autumn_base::database::CachedExt as _;
/// use diesel::sql_types::Text;
///
/// let statement = diesel::sql_query("SELECT record FROM my_table WHERE key = $1")
///     .bind::<Text, _>("k")
///     .cached();
/// # let _ = statement;
/// ```
pub trait CachedExt: Sized {
    /// The statement, marked as safe to prepare once per connection.
    fn cached(self) -> Cacheable<Self> {
        Cacheable(self)
    }
}

impl<Q> CachedExt for Q {}

/// Opens the transaction a framework operation runs in on a pool without a
/// statement cache (`uncached`), so that preparing, running and closing its
/// statements reach one server connection even through a transaction
/// pooler; does nothing otherwise. Close it with [`end_uncached`]. A
/// connection given back to the pool with the transaction still open (an
/// early return on an error) counts as broken and is not reused.
///
/// # Errors
///
/// The `BEGIN`'s error.
#[cfg(feature = "postgres")]
pub async fn begin_uncached(
    conn: &mut super::PgConnection,
    uncached: bool,
) -> Result<(), diesel::result::Error> {
    use diesel_async::{AnsiTransactionManager, TransactionManager as _};
    if uncached {
        AnsiTransactionManager::begin_transaction(conn).await?;
    }
    Ok(())
}

/// Commits what [`begin_uncached`] opened; does nothing when it opened
/// nothing. A statement that failed inside makes PostgreSQL roll back.
///
/// # Errors
///
/// The `COMMIT`'s error: the operation's writes may then be lost, so it is
/// the operation's error too.
#[cfg(feature = "postgres")]
pub async fn end_uncached(
    conn: &mut super::PgConnection,
    uncached: bool,
) -> Result<(), diesel::result::Error> {
    use diesel_async::{AnsiTransactionManager, TransactionManager as _};
    if uncached {
        AnsiTransactionManager::commit_transaction(conn).await?;
    }
    Ok(())
}

/// Stands for the database's own time, in milliseconds since the epoch, in
/// a framework statement; [`postgres_sql`] and [`sqlite_params`] put each
/// backend's expression in its place. Expiry is decided by this time, so
/// replicas whose clocks disagree still agree on what has expired. A
/// statement writes `COALESCE($N, {store_now})`, binding `$N` to the time
/// of a clock that overrides the store's (a test's manual clock, see
/// [`store_time_override`](crate::clock::store_time_override)) or to NULL.
///
/// Each backend's time stays the same throughout one statement, so a
/// statement that reads it several times sees one `now`: PostgreSQL's
/// `statement_timestamp()` (not `now()`, which is the transaction's start
/// and would age with an app transaction that writes a record), SQLite's
/// `'now'` (the host's clock: SQLite runs in the process).
///
/// ```
/// use autumn_base::database::{STORE_NOW, postgres_sql, sqlite_params};
///
/// let sql = format!("DELETE FROM t WHERE expires_at <= COALESCE($1, {STORE_NOW})");
/// assert!(postgres_sql(&sql).contains("statement_timestamp()"));
/// assert!(sqlite_params(&sql).contains("COALESCE(?1, "));
/// ```
pub const STORE_NOW: &str = "{store_now}";

/// PostgreSQL's time, whole milliseconds since the epoch, as in Redis's `TIME`
/// (floored).
const POSTGRES_NOW: &str = "floor(extract(epoch from statement_timestamp()) * 1000)::bigint";

/// SQLite's `'now'` has millisecond resolution: rounding undoes the float.
const SQLITE_NOW: &str = "CAST(round(unixepoch('subsec') * 1000) AS INTEGER)";

/// A framework statement as PostgreSQL runs it: [`STORE_NOW`] made
/// PostgreSQL's time.
///
/// ```
/// use autumn_base::database::postgres_sql;
///
/// assert_eq!(postgres_sql("DELETE FROM t WHERE a = $1"), "DELETE FROM t WHERE a = $1");
/// ```
pub fn postgres_sql(sql: &str) -> String {
    sql.replace(STORE_NOW, POSTGRES_NOW)
}

/// A statement written with PostgreSQL's `$N` parameters, in SQLite's `?N`
/// (and [`STORE_NOW`] made SQLite's time).
///
/// ```
/// use autumn_base::database::sqlite_params;
///
/// assert_eq!(sqlite_params("DELETE FROM t WHERE a = $1"), "DELETE FROM t WHERE a = ?1");
/// ```
pub fn sqlite_params(sql: &str) -> String {
    sql.replace(STORE_NOW, SQLITE_NOW).replace('$', "?")
}

/// A framework table whose expired rows are deleted in the background, and
/// the statement that deletes one batch of them.
///
/// `delete_batch` takes `$1` the time to compare with (milliseconds since the
/// epoch; NULL from [`sweep_at`](Self::sweep_at) when the database's own
/// time decides, which the statement then reads as
/// `COALESCE($1, {store_now})`, see [`STORE_NOW`]) and `$2` the most rows to
/// delete, and deletes expired rows only. It should select them
/// through an index (so each batch is an index range scan) and, on
/// PostgreSQL, with `FOR UPDATE SKIP LOCKED`, so that a sweep never waits for
/// a request that holds a row.
///
/// ```
/// use autumn_base::database::ExpiringTable;
///
/// const MY_TABLE: ExpiringTable = ExpiringTable {
///     table: "my_table",
///     delete_batch: "DELETE FROM my_table WHERE key IN ( \
///         SELECT key FROM my_table WHERE expires_at <= $1 LIMIT $2)",
///     delete_batch_sqlite: None,
/// };
/// # let _ = MY_TABLE;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ExpiringTable {
    /// The table's name (unqualified: the connection's schema).
    pub table: &'static str,
    /// The batch delete, with PostgreSQL's `$N` parameters.
    pub delete_batch: &'static str,
    /// The batch delete for SQLite when it differs by more than its
    /// parameters (`?N`, which [`sqlite_params`] makes of `$N`). Run as it
    /// is, but for [`STORE_NOW`], which becomes SQLite's time.
    pub delete_batch_sqlite: Option<&'static str>,
}

#[cfg(feature = "postgres")]
#[derive(QueryableByName)]
struct SweepLock {
    #[diesel(sql_type = Bool)]
    acquired: bool,
}

impl ExpiringTable {
    /// Rows deleted per statement by [`sweep`](Self::sweep) when the
    /// caller has no reason to choose.
    pub const SWEEP_BATCH: u64 = 1000;

    /// One batch: deletes at most `limit` rows expired at `now_millis`;
    /// returns how many went. No sweep lock is taken: batches from several
    /// replicas skip each other's rows.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the database fails.
    pub async fn delete_batch(
        &self,
        pool: &DbPool,
        now_millis: u64,
        limit: u64,
    ) -> Result<u64, DbError> {
        if limit == 0 {
            return Ok(0);
        }
        let (now, limit) = (Some(as_i64(now_millis)), as_i64(limit));
        match pool.get().await? {
            #[cfg(feature = "postgres")]
            DbConnection::Postgres(mut conn) => {
                let uncached = !pool.statement_cache();
                begin_uncached(&mut conn, uncached).await?;
                let deleted = self.postgres_batch(&mut conn, now, limit).await?;
                end_uncached(&mut conn, uncached).await?;
                Ok(deleted)
            }
            #[cfg(feature = "sqlite")]
            DbConnection::Sqlite(mut conn) => self.sqlite_batch(&mut conn, now, limit).await,
        }
    }

    /// Deletes every row expired at `now_millis`, `batch` rows per
    /// statement (at least one), until a batch comes back short; returns how
    /// many went. Each batch is a short transaction of its own, so a large
    /// backlog never holds locks on many rows, or writes one huge
    /// transaction, while requests are being served.
    ///
    /// On PostgreSQL one replica sweeps a table at a time, under an advisory
    /// lock keyed by the table's oid (so apps in other schemas of the same
    /// database sweep independently): a replica that finds another sweeping
    /// returns `Ok(0)` and leaves the work to it. SQLite has no such lock and
    /// needs none: one process owns the file.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the database fails.
    pub async fn sweep(&self, pool: &DbPool, now_millis: u64, batch: u64) -> Result<u64, DbError> {
        self.sweep_at(pool, Some(now_millis), batch).await
    }

    /// [`sweep`](Self::sweep) by the time `now_millis`, or by the database's
    /// own time when `None` (the table's `delete_batch` then says
    /// `COALESCE($1, {store_now})`): what a store shared by replicas uses,
    /// so that no replica's clock decides what has expired.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the database fails.
    pub async fn sweep_at(
        &self,
        pool: &DbPool,
        now_millis: Option<u64>,
        batch: u64,
    ) -> Result<u64, DbError> {
        let now = now_millis.map(as_i64);
        let batch = as_i64(batch.max(1));
        let mut swept = 0;
        match pool.get().await? {
            #[cfg(feature = "postgres")]
            DbConnection::Postgres(mut conn) if !pool.statement_cache() => {
                // Behind a transaction pooler a session lock could be taken
                // on one server connection and released on another: each
                // batch is a transaction holding a transaction-level lock.
                let key = self.lock_key();
                loop {
                    begin_uncached(&mut conn, true).await?;
                    let locked: Vec<SweepLock> = diesel::sql_query(format!(
                        "SELECT pg_try_advisory_xact_lock({key}) AS acquired"
                    ))
                    .load(&mut *conn)
                    .await?;
                    if !locked.iter().any(|row| row.acquired) {
                        end_uncached(&mut conn, true).await?;
                        return Ok(swept);
                    }
                    let deleted = self.postgres_batch(&mut conn, now, batch).await?;
                    end_uncached(&mut conn, true).await?;
                    swept += deleted;
                    if as_i64(deleted) < batch {
                        break;
                    }
                }
            }
            #[cfg(feature = "postgres")]
            DbConnection::Postgres(object) => {
                // The sweep's session lock must never go back to the pool
                // with the connection (a cancelled sweep would leave it
                // held): the connection leaves the pool and closes after,
                // which also releases the lock if anything below fails.
                let mut conn = diesel_async::pooled_connection::deadpool::Object::take(object);
                let key = self.lock_key();
                let locked: Vec<SweepLock> =
                    diesel::sql_query(format!("SELECT pg_try_advisory_lock({key}) AS acquired"))
                        .load(&mut conn)
                        .await?;
                if !locked.iter().any(|row| row.acquired) {
                    return Ok(0);
                }
                loop {
                    let deleted = self.postgres_batch(&mut conn, now, batch).await?;
                    swept += deleted;
                    if as_i64(deleted) < batch {
                        break;
                    }
                }
                // Released now rather than when the server notices the
                // closed connection, so the next sweep need not skip.
                diesel::sql_query(format!("SELECT pg_advisory_unlock({key})"))
                    .execute(&mut conn)
                    .await?;
            }
            #[cfg(feature = "sqlite")]
            DbConnection::Sqlite(mut conn) => loop {
                let deleted = self.sqlite_batch(&mut conn, now, batch).await?;
                swept += deleted;
                if as_i64(deleted) < batch {
                    break;
                }
            },
        }
        Ok(swept)
    }

    /// The advisory lock key of this table's sweep: "autu" and the table's
    /// oid.
    #[cfg(feature = "postgres")]
    fn lock_key(&self) -> String {
        format!(
            "(1635087477::bigint << 32) | '{}'::regclass::oid::bigint",
            self.table
        )
    }

    #[cfg(feature = "postgres")]
    async fn postgres_batch(
        &self,
        conn: &mut super::PgConnection,
        now: Option<i64>,
        limit: i64,
    ) -> Result<u64, DbError> {
        let deleted = diesel::sql_query(postgres_sql(self.delete_batch))
            .bind::<Nullable<BigInt>, _>(now)
            .bind::<BigInt, _>(limit)
            .cached()
            .execute(conn)
            .await?;
        Ok(deleted as u64)
    }

    #[cfg(feature = "sqlite")]
    async fn sqlite_batch(
        &self,
        conn: &mut super::SqliteConnection,
        now: Option<i64>,
        limit: i64,
    ) -> Result<u64, DbError> {
        let sql = self.delete_batch_sqlite.map_or_else(
            || sqlite_params(self.delete_batch),
            |sql| sql.replace(STORE_NOW, SQLITE_NOW),
        );
        let deleted = diesel::sql_query(sql)
            .bind::<Nullable<BigInt>, _>(now)
            .bind::<BigInt, _>(limit)
            .cached()
            .execute(conn)
            .await?;
        Ok(deleted as u64)
    }
}

/// Runs `sweep` every `every` on a background task, for as long as the
/// runtime lives, logging what it swept (as `what`) and any failure. The
/// first sweep waits a whole period: at launch the startup check may still
/// be creating the table. Call it from within a tokio runtime.
///
/// ```no_run
/// use std::time::Duration;
/// use autumn_base::database::{DbPool, ExpiringTable, spawn_sweeper};
///
/// # const MY_TABLE: ExpiringTable = ExpiringTable {
/// #     table: "t", delete_batch: "", delete_batch_sqlite: None };
/// # async fn start(pool: DbPool) {
/// let sweeper = spawn_sweeper(Duration::from_secs(60), "my rows", move || {
///     let pool = pool.clone();
///     async move { MY_TABLE.sweep(&pool, 0, ExpiringTable::SWEEP_BATCH).await }
/// });
/// # let _ = sweeper;
/// # }
/// ```
pub fn spawn_sweeper<F, Fut, E>(
    every: Duration,
    what: &'static str,
    mut sweep: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<u64, E>> + Send,
    E: std::fmt::Display,
{
    tokio::spawn(async move {
        let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            match sweep().await {
                Ok(0) => {}
                Ok(swept) => tracing::debug!(swept, what, "swept expired rows"),
                Err(error) => tracing::warn!(%error, what, "sweeping expired rows failed"),
            }
        }
    })
}

fn as_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
