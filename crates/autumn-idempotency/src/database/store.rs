//! `DbIdempotencyStore`: locks and records in the `autumn_idempotency_keys`
//! table, on PostgreSQL or SQLite.
//!
//! Every write is one conditional upsert or update, so the database decides
//! who holds a lock; expiry compares against the database's own time (see
//! [`STORE_NOW`](autumn_base::database::STORE_NOW)), never a replica's, so a
//! replica whose clock runs ahead cannot take over a live lock. A store built
//! with a clock that overrides the store's time (a test's `ManualClock`)
//! binds that clock's `now` instead. On PostgreSQL a first-time request costs two round
//! trips (claim, finish) and a replay one (claim): each statement is
//! prepared once per connection and reused.

use std::sync::Arc;
use std::time::Duration;

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Binary, Bool, Nullable, Text};
use diesel_async::RunQueryDsl as _;

use crate::record::{IdempotencyEntry, IdempotencyRecord};
use crate::store::{
    Claim, IdempotencyFuture, IdempotencyStore, KeyState, StoreError, StoreOperation, check_ttl,
};
use autumn_base::clock::{SharedClock, SystemClock, store_time_override};
#[cfg(feature = "sqlite")]
use autumn_base::database::SqliteConnection;
#[cfg(feature = "postgres")]
use autumn_base::database::postgres_sql;
#[cfg(feature = "sqlite")]
use autumn_base::database::sqlite_params as sqlite;
use autumn_base::database::{CachedExt as _, DbConnection, DbError, DbPool, ExpiringTable};

/// An [`IdempotencyStore`] in the app database, shared by every replica that
/// uses the same database.
///
/// The table comes from [`FRAMEWORK_MIGRATIONS`](autumn_base::database::FRAMEWORK_MIGRATIONS).
/// Expired rows are deleted by [`sweep_expired`](Self::sweep_expired), which
/// [`spawn_sweeper`](Self::spawn_sweeper) runs in the background.
#[derive(Clone)]
pub struct DbIdempotencyStore {
    pool: DbPool,
    clock: SharedClock,
}

impl std::fmt::Debug for DbIdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIdempotencyStore")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Nullable<BigInt>)]
    lock_expires_at: Option<i64>,
    #[diesel(sql_type = Nullable<Binary>)]
    record: Option<Vec<u8>>,
    /// The fingerprint; the column keeps the name the migrations gave it,
    /// as renaming it would need a migration of every existing table.
    #[diesel(sql_type = Nullable<Binary>)]
    body_hash: Option<Vec<u8>>,
    #[diesel(sql_type = Nullable<BigInt>)]
    record_expires_at: Option<i64>,
    /// The time the statement compared with: what decides, in Rust, whether
    /// the deadlines above are live.
    #[diesel(sql_type = BigInt)]
    now: i64,
}

#[derive(QueryableByName)]
struct InspectRow {
    #[diesel(embed)]
    found: Row,
    /// NULL for a lock taken before the column was added.
    #[diesel(sql_type = Nullable<BigInt>)]
    lock_taken_at: Option<i64>,
}

#[cfg(feature = "postgres")]
#[derive(QueryableByName)]
struct ClaimRow {
    #[diesel(sql_type = BigInt)]
    acquired: i64,
    #[diesel(embed)]
    row: Row,
}

#[cfg(feature = "sqlite")]
#[derive(QueryableByName)]
struct Acquired {
    #[diesel(sql_type = BigInt)]
    #[allow(dead_code)]
    acquired: i64,
}

/// Every statement below that compares deadlines takes the time override:
/// a test clock's now, or NULL for the database's own time (`{store_now}`,
/// see [`STORE_NOW`](autumn_base::database::STORE_NOW)). Deadlines are
/// written as that time plus a TTL, so they are in the database's time too.
///
/// $1 key, $2 time override.
const GET: &str = "SELECT lock_expires_at, record, body_hash, record_expires_at, \
       COALESCE($2, {store_now}) AS now \
     FROM autumn_idempotency_keys WHERE storage_key = $1";

/// $1 key, $2 time override. What [`GET`] reads and when the lock was
/// taken, for an operator's inspect (the claim path does not read it).
const INSPECT: &str = "SELECT lock_expires_at, record, body_hash, record_expires_at, \
       COALESCE($2, {store_now}) AS now, lock_taken_at \
     FROM autumn_idempotency_keys WHERE storage_key = $1";

/// $1 key. The whole row: its lock, its record and its recovery point.
const EVICT: &str = "DELETE FROM autumn_idempotency_keys WHERE storage_key = $1";

/// $1 key, $2 owner, $3 time override (the lock is taken then), $4 lock TTL (ms).
const TRY_LOCK: &str = "INSERT INTO autumn_idempotency_keys \
       (storage_key, lock_owner, lock_expires_at, lock_taken_at) \
     VALUES ($1, $2, COALESCE($3, {store_now}) + $4, COALESCE($3, {store_now})) \
     ON CONFLICT (storage_key) DO UPDATE SET lock_owner = excluded.lock_owner, \
       lock_expires_at = excluded.lock_expires_at, lock_taken_at = excluded.lock_taken_at, \
       record = NULL, body_hash = NULL, \
       record_owner = NULL, record_expires_at = NULL \
     WHERE (autumn_idempotency_keys.lock_expires_at IS NULL \
         OR autumn_idempotency_keys.lock_expires_at <= COALESCE($3, {store_now})) \
       AND (autumn_idempotency_keys.record_expires_at IS NULL \
         OR autumn_idempotency_keys.record_expires_at <= COALESCE($3, {store_now}))";

/// $1 key, $2 owner, $3 record, $4 hash, $5 time override, $6 record TTL
/// (ms), $7 unlock.
const SET: &str = "INSERT INTO autumn_idempotency_keys \
       (storage_key, record, body_hash, record_owner, record_expires_at) \
     VALUES ($1, $3, $4, $2, COALESCE($5, {store_now}) + $6) \
     ON CONFLICT (storage_key) DO UPDATE SET record = excluded.record, \
       body_hash = excluded.body_hash, record_owner = excluded.record_owner, \
       record_expires_at = excluded.record_expires_at, \
       lock_owner = CASE WHEN $7 AND autumn_idempotency_keys.lock_owner = $2 \
         THEN NULL ELSE autumn_idempotency_keys.lock_owner END, \
       lock_expires_at = CASE WHEN $7 AND autumn_idempotency_keys.lock_owner = $2 \
         THEN NULL ELSE autumn_idempotency_keys.lock_expires_at END, \
       lock_taken_at = CASE WHEN $7 AND autumn_idempotency_keys.lock_owner = $2 \
         THEN NULL ELSE autumn_idempotency_keys.lock_taken_at END \
     WHERE NOT (autumn_idempotency_keys.lock_owner IS NOT NULL \
         AND autumn_idempotency_keys.lock_owner <> $2 \
         AND autumn_idempotency_keys.lock_expires_at > COALESCE($5, {store_now})) \
       AND NOT (autumn_idempotency_keys.record_owner IS NOT NULL \
         AND autumn_idempotency_keys.record_owner <> $2 \
         AND autumn_idempotency_keys.record_expires_at > COALESCE($5, {store_now}))";

/// $1 key, $2 owner.
const UNLOCK: &str = "UPDATE autumn_idempotency_keys SET lock_owner = NULL, lock_expires_at = NULL, \
       lock_taken_at = NULL \
     WHERE storage_key = $1 AND lock_owner = $2";

/// $1 key, $2 time override: drop the row once nothing in it is live (a
/// recovery point included).
const DROP_DEAD: &str = "DELETE FROM autumn_idempotency_keys WHERE storage_key = $1 \
     AND (lock_expires_at IS NULL OR lock_expires_at <= COALESCE($2, {store_now})) \
     AND (record_expires_at IS NULL OR record_expires_at <= COALESCE($2, {store_now})) \
     AND (recovery_expires_at IS NULL OR recovery_expires_at <= COALESCE($2, {store_now}))";

/// $1 key, $2 owner, $3 time override, $4 lock TTL (ms). Keeps when the lock
/// was taken (an operator sees how long its run has held it). Never shortens the lock:
/// `IdempotencyTx::commit` may have extended it to the record's lifetime
/// (a session change still to be saved), and the heartbeat must not undo that.
const RENEW: &str = "UPDATE autumn_idempotency_keys SET lock_expires_at = \
       CASE WHEN lock_expires_at > COALESCE($3, {store_now}) + $4 THEN lock_expires_at \
         ELSE COALESCE($3, {store_now}) + $4 END \
     WHERE storage_key = $1 AND lock_owner = $2 AND lock_expires_at > COALESCE($3, {store_now})";

/// $1 time override, $2 batch size: deletes at most one batch of rows whose lock and
/// record have both expired. The predicate is the indexed expression (see
/// the migration), so each batch is an index range scan (the database's
/// time is the same all through a statement, so it is a scan key); rows another
/// transaction holds (a claim re-taking an expired key) are skipped, and the
/// outer condition re-checks each row at delete time.
const PG_SWEEP_BATCH: &str = "DELETE FROM autumn_idempotency_keys WHERE storage_key IN ( \
       SELECT storage_key FROM autumn_idempotency_keys \
       WHERE GREATEST(COALESCE(lock_expires_at, 0), COALESCE(record_expires_at, 0), \
         COALESCE(recovery_expires_at, 0)) <= COALESCE($1, {store_now}) \
       LIMIT $2 FOR UPDATE SKIP LOCKED) \
     AND GREATEST(COALESCE(lock_expires_at, 0), COALESCE(record_expires_at, 0), \
       COALESCE(recovery_expires_at, 0)) <= COALESCE($1, {store_now})";

/// [`PG_SWEEP_BATCH`] in SQLite's words (its expression index uses the
/// multi-argument `MAX`); SQLite runs one writer at a time, so nothing to
/// skip.
const SQLITE_SWEEP_BATCH: &str = "DELETE FROM autumn_idempotency_keys WHERE storage_key IN ( \
       SELECT storage_key FROM autumn_idempotency_keys \
       WHERE MAX(COALESCE(lock_expires_at, 0), COALESCE(record_expires_at, 0), \
         COALESCE(recovery_expires_at, 0)) <= COALESCE(?1, {store_now}) \
       LIMIT ?2) \
     AND MAX(COALESCE(lock_expires_at, 0), COALESCE(record_expires_at, 0), \
       COALESCE(recovery_expires_at, 0)) <= COALESCE(?1, {store_now})";

/// The table, swept one replica at a time (see [`ExpiringTable::sweep`]).
const KEYS_TABLE: ExpiringTable = ExpiringTable {
    table: "autumn_idempotency_keys",
    delete_batch: PG_SWEEP_BATCH,
    delete_batch_sqlite: Some(SQLITE_SWEEP_BATCH),
};

/// PostgreSQL claims in one statement that reads first and writes only when
/// nothing live is there. `prior` is the row as the statement's snapshot
/// sees it; when it is live (a replay, or a request in flight) the insert
/// selects no row, so the statement takes no row lock and writes nothing:
/// replays stay plain reads and never queue behind each other. Otherwise the
/// upsert takes the lock, its `WHERE` re-checking the row as it is now (a
/// row committed since the snapshot was taken is seen there, so two claims
/// never both win).
///
/// $1 key, $2 owner, $3 time override, $4 lock TTL (ms), as [`TRY_LOCK`].
#[cfg(feature = "postgres")]
const PG_CLAIM: &str = "WITH prior AS ( \
       SELECT lock_expires_at, record, body_hash, record_expires_at \
       FROM autumn_idempotency_keys WHERE storage_key = $1), \
     claimed AS ( \
       INSERT INTO autumn_idempotency_keys \
         (storage_key, lock_owner, lock_expires_at, lock_taken_at) \
       SELECT $1, $2, COALESCE($3, {store_now}) + $4, COALESCE($3, {store_now}) \
       WHERE NOT EXISTS (SELECT 1 FROM prior \
         WHERE lock_expires_at > COALESCE($3, {store_now}) \
           OR record_expires_at > COALESCE($3, {store_now})) \
       ON CONFLICT (storage_key) DO UPDATE SET lock_owner = excluded.lock_owner, \
         lock_expires_at = excluded.lock_expires_at, lock_taken_at = excluded.lock_taken_at, \
         record = NULL, body_hash = NULL, \
         record_owner = NULL, record_expires_at = NULL \
       WHERE (autumn_idempotency_keys.lock_expires_at IS NULL \
           OR autumn_idempotency_keys.lock_expires_at <= COALESCE($3, {store_now})) \
         AND (autumn_idempotency_keys.record_expires_at IS NULL \
           OR autumn_idempotency_keys.record_expires_at <= COALESCE($3, {store_now})) \
       RETURNING 1) \
     SELECT (SELECT count(*) FROM claimed) AS acquired, \
       p.lock_expires_at, p.record, p.body_hash, p.record_expires_at, \
       COALESCE($3, {store_now}) AS now \
     FROM (SELECT 1) AS one LEFT JOIN prior p ON true";

fn millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

fn as_i64(millis: u64) -> i64 {
    i64::try_from(millis).unwrap_or(i64::MAX)
}

/// Runs `$body` with `$conn` bound to the backend's connection and `$sql`
/// turning a statement into the backend's dialect. On a PostgreSQL pool
/// without a statement cache, in a transaction of its own (see
/// [`begin_uncached`](autumn_base::database::begin_uncached)).
macro_rules! on_backend {
    ($store:expr, $connection:expr, |$conn:ident, $sql:ident| $body:expr) => {
        match $connection {
            #[cfg(feature = "postgres")]
            DbConnection::Postgres(mut object) => {
                let uncached = !$store.pool.statement_cache();
                // `return`, not `?`: the error type is the caller's, which
                // `?` would have to infer through `From`.
                if let Err(error) =
                    autumn_base::database::begin_uncached(&mut object, uncached).await
                {
                    return Err(FromDb::from_db(error));
                }
                let value = {
                    let $conn = &mut *object;
                    let $sql = postgres_sql;
                    $body
                };
                if let Err(error) = autumn_base::database::end_uncached(&mut object, uncached).await
                {
                    return Err(FromDb::from_db(error));
                }
                value
            }
            #[cfg(feature = "sqlite")]
            DbConnection::Sqlite(mut object) => {
                let $conn = &mut *object;
                let $sql = sqlite;
                $body
            }
            #[allow(unreachable_patterns)]
            _ => return Err(FromDb::no_driver()),
        }
    };
}

impl DbIdempotencyStore {
    /// Rows deleted per statement by [`sweep_expired`](Self::sweep_expired).
    pub const SWEEP_BATCH: usize = 1000;

    /// A store on `pool`. Run [`FRAMEWORK_MIGRATIONS`](autumn_base::database::FRAMEWORK_MIGRATIONS)
    /// first.
    pub fn new(pool: DbPool) -> Self {
        Self {
            pool,
            clock: Arc::new(SystemClock),
        }
    }

    /// The same store built with `clock`. Expiry follows the database's own
    /// time unless `clock` [overrides the store's
    /// time](autumn_base::clock::Clock::overrides_store_time), as a test's
    /// [`ManualClock`](autumn_base::clock::ManualClock) does: then it
    /// follows `clock`, so tests expire locks and records without sleeping.
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The pool the store uses.
    pub fn pool(&self) -> &DbPool {
        &self.pool
    }

    /// The time expiry is decided by, bound to a statement's time override:
    /// the clock's when it overrides the store's time (a test's), else
    /// `None` (NULL), the database's own.
    pub(crate) fn time_override(&self) -> Option<i64> {
        store_time_override(&*self.clock).map(as_i64)
    }

    async fn conn(&self) -> Result<DbConnection, StoreError> {
        self.pool.get().await.map_err(StoreError::new)
    }

    /// Deletes rows whose lock and record have both expired, in batches of
    /// [`SWEEP_BATCH`](Self::SWEEP_BATCH); returns how many.
    ///
    /// On PostgreSQL one replica sweeps a table at a time: a replica that
    /// finds another sweeping returns `Ok(0)` and leaves the work to it.
    /// SQLite has no such lock and needs none: one process owns the file.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn sweep_expired(&self) -> Result<usize, StoreError> {
        self.sweep_expired_in_batches(Self::SWEEP_BATCH).await
    }

    /// [`sweep_expired`](Self::sweep_expired) with `batch` rows per
    /// statement (at least one): each batch is a short transaction of its
    /// own, so a large backlog never holds locks on many rows, or writes one
    /// huge transaction, while requests are being served.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn sweep_expired_in_batches(&self, batch: usize) -> Result<usize, StoreError> {
        let batch = u64::try_from(batch).unwrap_or(u64::MAX);
        let swept = KEYS_TABLE
            .sweep_at(&self.pool, store_time_override(&*self.clock), batch)
            .await
            .map_err(StoreError::new)?;
        Ok(usize::try_from(swept).unwrap_or(usize::MAX))
    }

    /// Sweeps expired rows every `every` on a background task, for as long
    /// as the runtime lives. Call it from within a tokio runtime.
    pub fn spawn_sweeper(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        autumn_base::database::spawn_sweeper(every, "idempotency rows", move || {
            let store = store.clone();
            async move { store.sweep_expired().await.map(|swept| swept as u64) }
        })
    }

    /// The entry `row` holds, live by the time the statement compared with.
    fn entry(&self, row: Row) -> Result<Option<IdempotencyEntry>, StoreError> {
        let now = row.now;
        let locked = row.lock_expires_at.is_some_and(|at| at > now);
        let record = match (row.record, row.body_hash, row.record_expires_at) {
            (Some(record), Some(hash), Some(at)) if at > now => Some((
                IdempotencyRecord::decode(&record).map_err(StoreError::new)?,
                hash,
            )),
            _ => None,
        };
        Ok(match record {
            Some((record, hash)) => Some(IdempotencyEntry::completed(record, hash).locked(locked)),
            None if locked => Some(IdempotencyEntry::in_flight()),
            None => None,
        })
    }

    async fn write_record(
        &self,
        key: &str,
        owner: &str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
        unlock: bool,
    ) -> Result<bool, StoreError> {
        check_ttl(ttl, StoreOperation::Set)?;
        let now = self.time_override();
        let bytes = record.encode();
        let (bytes, fingerprint) = (&bytes, &fingerprint);
        self.retrying_a_lost_connection(move |connection| async move {
            on_backend!(self, connection, |conn, sql| {
                let written = diesel::sql_query(sql(SET))
                    .bind::<Text, _>(key)
                    .bind::<Text, _>(owner)
                    .bind::<Binary, _>(bytes)
                    .bind::<Binary, _>(fingerprint)
                    .bind::<Nullable<BigInt>, _>(now)
                    .bind::<BigInt, _>(millis(ttl))
                    .bind::<Bool, _>(unlock)
                    .cached()
                    .execute(&mut *conn)
                    .await;
                match written {
                    Ok(rows) => Ok(rows == 1),
                    Err(error) => Err(Failed::on(conn, error).await),
                }
            })
        })
        .await
    }

    /// Runs `write` on a pooled connection and, when that connection turns
    /// out to be dead (the server restarted since it was pooled: the first
    /// statement on it fails), once more on a connection made after the
    /// failure. Only for the owner-checked writes that end a request
    /// (record, unlock): repeating one is harmless, while losing it would
    /// drop the response and, once the lock lapses, let a retry run again.
    async fn retrying_a_lost_connection<T, W, F>(&self, write: W) -> Result<T, StoreError>
    where
        W: Fn(DbConnection) -> F,
        F: Future<Output = Result<T, Failed>>,
    {
        match write(self.conn().await?).await {
            Err(Failed {
                error,
                connection_lost: true,
            }) => {
                tracing::debug!(%error, "database connection lost; writing again on a new one");
                let connection = self
                    .pool
                    .get_made_after(std::time::Instant::now())
                    .await
                    .map_err(StoreError::new)?;
                write(connection)
                    .await
                    .map_err(|failed| query_error(failed.error))
            }
            outcome => outcome.map_err(|failed| query_error(failed.error)),
        }
    }
}

fn query_error(error: diesel::result::Error) -> StoreError {
    StoreError::new(DbError::from(error))
}

/// The error an operation reports when its transaction (on a pool without
/// a statement cache) cannot begin or commit. Only PostgreSQL pools go
/// without one.
trait FromDb {
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    fn from_db(error: diesel::result::Error) -> Self;

    /// The pool's backend is one this crate was built without.
    fn no_driver() -> Self;
}

impl FromDb for StoreError {
    fn from_db(error: diesel::result::Error) -> Self {
        query_error(error)
    }

    fn no_driver() -> Self {
        StoreError::new(super::no_driver())
    }
}

impl FromDb for Failed {
    fn from_db(error: diesel::result::Error) -> Self {
        use diesel::result::DatabaseErrorKind::{ClosedConnection, UnableToSendCommand};
        let connection_lost = matches!(
            error,
            diesel::result::Error::DatabaseError(ClosedConnection | UnableToSendCommand, _)
        );
        Self {
            error,
            connection_lost,
        }
    }
    fn no_driver() -> Self {
        Self {
            error: diesel::result::Error::QueryBuilderError(super::no_driver().into()),
            connection_lost: false,
        }
    }
}

/// A statement that failed, and whether its connection died with it.
struct Failed {
    error: diesel::result::Error,
    connection_lost: bool,
}

impl Failed {
    /// Whether the failure was the connection's (closed, reset, or ended by
    /// a server restart; the server then reports "terminating connection"
    /// as the statement's error) rather than the statement's own.
    async fn on<C>(conn: &mut C, error: diesel::result::Error) -> Self
    where
        C: diesel_async::pooled_connection::PoolableConnection,
    {
        use diesel::result::DatabaseErrorKind::{ClosedConnection, UnableToSendCommand};
        let mut connection_lost = matches!(
            error,
            diesel::result::Error::DatabaseError(ClosedConnection | UnableToSendCommand, _)
        );
        if !connection_lost {
            // The connection's own task may still be reading the close that
            // came with the error: let it run before asking.
            tokio::task::yield_now().await;
            connection_lost = conn.is_broken();
        }
        Self {
            error,
            connection_lost,
        }
    }
}

impl DbIdempotencyStore {
    /// The key's row, if any (at most one).
    async fn rows(&self, key: &str) -> Result<Vec<Row>, StoreError> {
        let now = self.time_override();
        Ok(on_backend!(self, self.conn().await?, |conn, sql| {
            diesel::sql_query(sql(GET))
                .bind::<Text, _>(key)
                .bind::<Nullable<BigInt>, _>(now)
                .cached()
                .load(conn)
                .await
                .map_err(query_error)?
        }))
    }
}

impl IdempotencyStore for DbIdempotencyStore {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn get<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<IdempotencyEntry>> {
        Box::pin(async move {
            let rows = self.rows(key).await?;
            match rows.into_iter().next() {
                Some(row) => self.entry(row),
                None => Ok(None),
            }
        })
    }

    /// The row [`get`](Self::get) reads, keeping its deadlines and when
    /// its lock was taken.
    fn inspect<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<KeyState>> {
        Box::pin(async move {
            let now = self.time_override();
            let rows: Vec<InspectRow> = on_backend!(self, self.conn().await?, |conn, sql| {
                diesel::sql_query(sql(INSPECT))
                    .bind::<Text, _>(key)
                    .bind::<Nullable<BigInt>, _>(now)
                    .cached()
                    .load(conn)
                    .await
                    .map_err(query_error)?
            });
            let Some(InspectRow {
                found: row,
                lock_taken_at,
            }) = rows.into_iter().next()
            else {
                return Ok(None);
            };
            let now = row.now;
            let at = |millis: i64| u64::try_from(millis).unwrap_or_default();
            let mut state = KeyState::observed(at(now));
            if let Some(expires) = row.lock_expires_at.filter(|&at| at > now) {
                state = state
                    .locked_until(Some(at(expires)))
                    .lock_taken(lock_taken_at.map(at));
            }
            if let (Some(record), Some(_), Some(expires)) = (
                row.record,
                row.body_hash,
                row.record_expires_at.filter(|&at| at > now),
            ) {
                let record = IdempotencyRecord::decode(&record).map_err(StoreError::new)?;
                state = state.recorded(record, Some(at(expires)));
            }
            Ok((state.locked || state.record.is_some()).then_some(state))
        })
    }

    /// Deletes the key's row, recovery point included.
    fn evict<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, bool> {
        Box::pin(async move {
            on_backend!(self, self.conn().await?, |conn, sql| {
                diesel::sql_query(sql(EVICT))
                    .bind::<Text, _>(key)
                    .cached()
                    .execute(conn)
                    .await
                    .map(|rows| rows > 0)
                    .map_err(query_error)
            })
        })
    }

    fn set<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        Box::pin(self.write_record(key, owner, record, fingerprint, ttl, false))
    }

    fn try_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        Box::pin(async move {
            check_ttl(ttl, StoreOperation::TryLock)?;
            let now = self.time_override();
            on_backend!(self, self.conn().await?, |conn, sql| {
                diesel::sql_query(sql(TRY_LOCK))
                    .bind::<Text, _>(key)
                    .bind::<Text, _>(owner)
                    .bind::<Nullable<BigInt>, _>(now)
                    .bind::<BigInt, _>(millis(ttl))
                    .cached()
                    .execute(conn)
                    .await
                    .map(|rows| rows == 1)
                    .map_err(query_error)
            })
        })
    }

    fn unlock<'a>(&'a self, key: &'a str, owner: &'a str) -> IdempotencyFuture<'a, ()> {
        Box::pin(async move {
            let now = self.time_override();
            self.retrying_a_lost_connection(move |connection| async move {
                on_backend!(self, connection, |conn, sql| {
                    let unlocked = diesel::sql_query(sql(UNLOCK))
                        .bind::<Text, _>(key)
                        .bind::<Text, _>(owner)
                        .cached()
                        .execute(&mut *conn)
                        .await;
                    if let Err(error) = unlocked {
                        return Err(Failed::on(conn, error).await);
                    }
                    let dropped = diesel::sql_query(sql(DROP_DEAD))
                        .bind::<Text, _>(key)
                        .bind::<Nullable<BigInt>, _>(now)
                        .cached()
                        .execute(&mut *conn)
                        .await;
                    match dropped {
                        Ok(_) => Ok(()),
                        Err(error) => Err(Failed::on(conn, error).await),
                    }
                })
            })
            .await
        })
    }

    fn renew_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        Box::pin(async move {
            check_ttl(ttl, StoreOperation::RenewLock)?;
            let now = self.time_override();
            on_backend!(self, self.conn().await?, |conn, sql| {
                diesel::sql_query(sql(RENEW))
                    .bind::<Text, _>(key)
                    .bind::<Text, _>(owner)
                    .bind::<Nullable<BigInt>, _>(now)
                    .bind::<BigInt, _>(millis(ttl))
                    .cached()
                    .execute(conn)
                    .await
                    .map(|rows| rows == 1)
                    .map_err(query_error)
            })
        })
    }

    fn claim<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        in_flight_ttl: Duration,
    ) -> IdempotencyFuture<'a, Claim> {
        Box::pin(async move {
            check_ttl(in_flight_ttl, StoreOperation::Get)?;
            let now = self.time_override();
            let lock_ttl = millis(in_flight_ttl);
            let (acquired, prior) = match self.conn().await? {
                #[cfg(feature = "postgres")]
                DbConnection::Postgres(mut conn) => {
                    let uncached = !self.pool.statement_cache();
                    autumn_base::database::begin_uncached(&mut conn, uncached)
                        .await
                        .map_err(query_error)?;
                    let rows: Vec<ClaimRow> = diesel::sql_query(postgres_sql(PG_CLAIM))
                        .bind::<Text, _>(key)
                        .bind::<Text, _>(owner)
                        .bind::<Nullable<BigInt>, _>(now)
                        .bind::<BigInt, _>(lock_ttl)
                        .cached()
                        .load(&mut *conn)
                        .await
                        .map_err(query_error)?;
                    autumn_base::database::end_uncached(&mut conn, uncached)
                        .await
                        .map_err(query_error)?;
                    match rows.into_iter().next() {
                        Some(row) => (row.acquired > 0, Some(row.row)),
                        None => (false, None),
                    }
                }
                // Read first: a replay or a key in flight is answered by a
                // plain read, which in WAL mode never waits for the writer.
                // Only a key with nothing live takes SQLite's one write lock
                // (all in-process, no network).
                #[cfg(feature = "sqlite")]
                DbConnection::Sqlite(mut conn) => {
                    let get = sqlite(GET);
                    let read = |conn: &mut SqliteConnection| {
                        diesel::sql_query(get.clone())
                            .bind::<Text, _>(key)
                            .bind::<Nullable<BigInt>, _>(now)
                            .cached()
                            .load::<Row>(conn)
                    };
                    let prior = read(&mut conn)
                        .await
                        .map_err(query_error)?
                        .into_iter()
                        .next();
                    let live = prior.as_ref().is_some_and(|row| {
                        row.lock_expires_at.is_some_and(|at| at > row.now)
                            || row.record_expires_at.is_some_and(|at| at > row.now)
                    });
                    if live {
                        (false, prior)
                    } else {
                        let locked: Vec<Acquired> = diesel::sql_query(format!(
                            "{} RETURNING 1 AS acquired",
                            sqlite(TRY_LOCK)
                        ))
                        .bind::<Text, _>(key)
                        .bind::<Text, _>(owner)
                        .bind::<Nullable<BigInt>, _>(now)
                        .bind::<BigInt, _>(lock_ttl)
                        .cached()
                        .load(&mut *conn)
                        .await
                        .map_err(query_error)?;
                        if locked.is_empty() {
                            // Taken since the read: look again.
                            let rows = read(&mut conn).await.map_err(query_error)?;
                            (false, rows.into_iter().next())
                        } else {
                            (true, None)
                        }
                    }
                }
                #[allow(unreachable_patterns)]
                _ => return Err(StoreError::no_driver()),
            };
            if acquired {
                return Ok(Claim::Acquired);
            }
            // Nothing readable but no lock either: someone took it between
            // our write and our read; they are in flight.
            Ok(match prior {
                Some(row) => self.entry(row)?.map_or(Claim::InFlight, Claim::from_entry),
                None => Claim::InFlight,
            })
        })
    }

    fn finish<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        Box::pin(self.write_record(key, owner, record, fingerprint, ttl, true))
    }
}
