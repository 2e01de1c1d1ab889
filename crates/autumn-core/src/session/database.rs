//! [`DbSessionStore`]: sessions in the app database's `autumn_sessions`
//! table, on PostgreSQL or SQLite.

use std::time::Duration;

use autumn_base::clock::SharedClock;
use autumn_base::database::{CachedExt as _, DbConnection, DbError, DbPool, ExpiringTable};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Binary, Bool, Nullable, Text};
use diesel_async::RunQueryDsl as _;

use crate::sql::on_backend;

use super::id::SessionId;
use super::store::{SaveOutcome, SessionFuture, SessionRecord, SessionStore, SessionStoreError};

/// $1 storage key, $2 now.
const LOAD: &str =
    "SELECT record, retired FROM autumn_sessions WHERE storage_key = $1 AND expires_at > $2";

/// $1 storage key, $2 record, $3 expiry, $4 retired, $5 principal.
const SAVE: &str = "INSERT INTO autumn_sessions \
       (storage_key, record, expires_at, retired, principal) \
     VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (storage_key) DO UPDATE SET record = excluded.record, \
       expires_at = excluded.expires_at, retired = excluded.retired, \
       principal = excluded.principal";

/// [`SAVE`], except over a retired row: the row's lock, taken by the
/// conflict, holds from the check to the write, so a retirement committed
/// meanwhile is seen and kept. Changes no row when the stored one is
/// retired. $1 storage key, $2 record, $3 expiry, $4 retired, $5 principal.
const SAVE_UNLESS_RETIRED: &str = "INSERT INTO autumn_sessions \
       (storage_key, record, expires_at, retired, principal) \
     VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (storage_key) DO UPDATE SET record = excluded.record, \
       expires_at = excluded.expires_at, retired = excluded.retired, \
       principal = excluded.principal \
     WHERE NOT autumn_sessions.retired";

/// Retires a principal's live sessions but one, through the
/// `autumn_sessions_principal` index; the retired column decides over the
/// record's own flag on load. $1 principal, $2 now, $3 the storage key
/// kept ('' for none).
const END_SESSIONS_OF: &str = "UPDATE autumn_sessions SET retired = TRUE, principal = NULL \
     WHERE principal = $1 AND NOT retired AND expires_at > $2 AND storage_key <> $3";

/// $1 storage key.
const DELETE: &str = "DELETE FROM autumn_sessions WHERE storage_key = $1";

/// The table and its batched delete ($1 now, $2 batch): an index range scan
/// on `autumn_sessions_expiry`; rows a request holds are skipped, and each
/// row is checked again at delete time (a session saved meanwhile stays).
const SESSIONS: ExpiringTable = ExpiringTable {
    table: "autumn_sessions",
    delete_batch: "DELETE FROM autumn_sessions WHERE storage_key IN ( \
           SELECT storage_key FROM autumn_sessions WHERE expires_at <= $1 \
           LIMIT $2 FOR UPDATE SKIP LOCKED) \
         AND expires_at <= $1",
    // SQLite runs one writer at a time: nothing to skip.
    delete_batch_sqlite: Some(
        "DELETE FROM autumn_sessions WHERE storage_key IN ( \
           SELECT storage_key FROM autumn_sessions WHERE expires_at <= ?1 LIMIT ?2) \
         AND expires_at <= ?1",
    ),
};

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Binary)]
    record: Vec<u8>,
    #[diesel(sql_type = Bool)]
    retired: bool,
}

/// Sessions in the app database (`[database] url`), shared by every replica
/// on that database.
///
/// Each session is one row of `autumn_sessions`, keyed by
/// [`SessionId::storage_key`] (a hash, never the id itself), holding the
/// [`SessionRecord::encode`]d record, its expiry on the app clock and
/// whether it is retired (a column of its own, so that
/// [`save_unless_retired`](SessionStore::save_unless_retired) is one
/// `INSERT .. ON CONFLICT .. DO UPDATE .. WHERE NOT retired`, checked and
/// written under the row's lock), and who it is signed in as (an indexed
/// column, so [`end_sessions_of`](SessionStore::end_sessions_of) is one
/// `UPDATE`). The table comes from the framework migrations
/// ([`FRAMEWORK_MIGRATIONS`](autumn_base::database::FRAMEWORK_MIGRATIONS)),
/// which launch runs. Every operation is one statement, prepared once per
/// connection. Expired rows are never loaded, and are deleted by
/// [`sweep_expired`](Self::sweep_expired), which
/// [`spawn_sweeper`](Self::spawn_sweeper) runs in the background.
///
/// ```no_run
/// use std::time::Duration;
/// use autumn_core::session::{DbSessionStore, SessionId, SessionRecord, SessionStore};
/// use autumn_base::database::DbPool;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = DbPool::new("postgres://postgres@127.0.0.1/app", 8, Duration::from_secs(5))?;
/// autumn_base::database::FRAMEWORK_MIGRATIONS.run(&pool).await?;
/// let store = DbSessionStore::new(pool);
/// let id = SessionId::generate();
/// store.save(&id, &SessionRecord::new(Default::default(), 61_000), 1_000).await?;
/// assert!(store.load(&id, 1_000).await?.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DbSessionStore {
    pool: DbPool,
}

impl DbSessionStore {
    /// Rows deleted per statement by [`sweep_expired`](Self::sweep_expired).
    pub const SWEEP_BATCH: u64 = ExpiringTable::SWEEP_BATCH;

    /// A store on `pool`. Run the framework migrations first (launch does).
    #[must_use]
    pub fn new(pool: DbPool) -> Self {
        Self { pool }
    }

    /// The pool the store uses.
    pub fn pool(&self) -> &DbPool {
        &self.pool
    }

    /// Deletes every session expired at `now_millis`, in batches of
    /// [`SWEEP_BATCH`](Self::SWEEP_BATCH); returns how many went.
    ///
    /// On PostgreSQL one replica sweeps the table at a time: a replica that
    /// finds another sweeping returns `Ok(0)` and leaves the work to it.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`] when the database fails.
    pub async fn sweep_expired(&self, now_millis: u64) -> Result<u64, SessionStoreError> {
        SESSIONS
            .sweep(&self.pool, now_millis, Self::SWEEP_BATCH)
            .await
            .map_err(|error| failed("sweep", &error))
    }

    /// Sweeps expired sessions every `every`, by `clock`, on a background
    /// task, for as long as the runtime lives. Call it from within a tokio
    /// runtime.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use autumn_core::session::DbSessionStore;
    /// use autumn_base::clock::SystemClock;
    /// use autumn_base::database::DbPool;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = DbPool::new("sqlite://app.db", 4, Duration::from_secs(5))?;
    /// let sweeper = DbSessionStore::new(pool)
    ///     .spawn_sweeper(Duration::from_secs(60), Arc::new(SystemClock));
    /// # let _ = sweeper;
    /// # Ok(())
    /// # }
    /// ```
    pub fn spawn_sweeper(
        &self,
        every: Duration,
        clock: SharedClock,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        autumn_base::database::spawn_sweeper(every, "sessions", move || {
            let (store, now) = (store.clone(), clock.now_millis());
            async move { store.sweep_expired(now).await }
        })
    }

    /// Runs `statement`, one of the two saves, for `record` under `id`;
    /// the number of rows it changed.
    async fn upsert(
        &self,
        statement: &'static str,
        id: &SessionId,
        record: &SessionRecord,
    ) -> Result<usize, SessionStoreError> {
        let key = id.storage_key();
        let bytes = record.encode();
        // A retired record leaves the principal's index.
        let principal = record.principal.as_deref().filter(|_| !record.retired);
        let changed = on_backend!(self, "save", statement, |conn, sql| {
            diesel::sql_query(sql)
                .bind::<Text, _>(&key)
                .bind::<Binary, _>(&bytes)
                .bind::<BigInt, _>(as_i64(record.expires_at_millis))
                .bind::<Bool, _>(record.retired)
                .bind::<Nullable<Text>, _>(principal)
                .cached()
                .execute(conn)
                .await
                .map_err(query_failed("save"))?
        });
        Ok(changed)
    }

    async fn conn(&self, operation: &str) -> Result<DbConnection, SessionStoreError> {
        self.pool
            .get()
            .await
            .map_err(|error| failed(operation, &error))
    }
}

/// A database failure during `operation`; passwords in the message masked.
fn failed(operation: &str, error: &DbError) -> SessionStoreError {
    SessionStoreError::new(autumn_base::redact_passwords(&format!(
        "the database failed to {operation} a session: {error}"
    )))
}

fn unsupported_backend() -> SessionStoreError {
    SessionStoreError::new(
        "the database pool's backend is not enabled for sessions (enable autumn-core's `postgres` or `sqlite` feature)",
    )
}

fn query_failed(operation: &str) -> impl Fn(diesel::result::Error) -> SessionStoreError + '_ {
    move |error| failed(operation, &DbError::from(error))
}

fn as_i64(millis: u64) -> i64 {
    i64::try_from(millis).unwrap_or(i64::MAX)
}

impl SessionStore for DbSessionStore {
    fn load<'a>(
        &'a self,
        id: &'a SessionId,
        now_millis: u64,
    ) -> SessionFuture<'a, Option<SessionRecord>> {
        Box::pin(async move {
            let key = id.storage_key();
            let rows: Vec<Row> = on_backend!(self, "load", LOAD, |conn, sql| {
                diesel::sql_query(sql)
                    .bind::<Text, _>(&key)
                    .bind::<BigInt, _>(as_i64(now_millis))
                    .cached()
                    .load(conn)
                    .await
                    .map_err(query_failed("load"))?
            });
            match rows.into_iter().next() {
                Some(row) => {
                    let mut record = SessionRecord::decode(&row.record)?;
                    // A row ended by `end_sessions_of` is retired by its
                    // column alone: its record still holds the values.
                    if row.retired && !record.retired {
                        record = SessionRecord::retired(record.expires_at_millis);
                    }
                    // The row's expiry decided; the record's own agrees
                    // unless the row was written by hand.
                    Ok((record.expires_at_millis > now_millis).then_some(record))
                }
                None => Ok(None),
            }
        })
    }

    fn save<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        _now_millis: u64,
    ) -> SessionFuture<'a, ()> {
        Box::pin(async move {
            self.upsert(SAVE, id, record).await?;
            Ok(())
        })
    }

    fn save_unless_retired<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        _now_millis: u64,
    ) -> SessionFuture<'a, SaveOutcome> {
        Box::pin(async move {
            // The insert or the update changes one row; the update's
            // condition failing changes none.
            Ok(match self.upsert(SAVE_UNLESS_RETIRED, id, record).await? {
                0 => SaveOutcome::Retired,
                _ => SaveOutcome::Written,
            })
        })
    }

    fn delete<'a>(&'a self, id: &'a SessionId) -> SessionFuture<'a, ()> {
        Box::pin(async move {
            let key = id.storage_key();
            on_backend!(self, "delete", DELETE, |conn, sql| {
                diesel::sql_query(sql)
                    .bind::<Text, _>(&key)
                    .cached()
                    .execute(conn)
                    .await
                    .map_err(query_failed("delete"))?
            });
            Ok(())
        })
    }

    /// One statement through the `autumn_sessions_principal` index.
    fn end_sessions_of<'a>(
        &'a self,
        principal: &'a str,
        except: Option<&'a SessionId>,
        now_millis: u64,
    ) -> SessionFuture<'a, u64> {
        Box::pin(async move {
            // Storage keys are hex digests: '' names no row.
            let kept = except.map(SessionId::storage_key).unwrap_or_default();
            let ended = on_backend!(self, "end", END_SESSIONS_OF, |conn, sql| {
                diesel::sql_query(sql)
                    .bind::<Text, _>(principal)
                    .bind::<BigInt, _>(as_i64(now_millis))
                    .bind::<Text, _>(&kept)
                    .cached()
                    .execute(conn)
                    .await
                    .map_err(query_failed("end"))?
            });
            Ok(ended as u64)
        })
    }

    /// One batch of at most `limit` rows, through the expiry index; no
    /// sweep lock (batches from several replicas skip each other's rows).
    fn delete_expired(&self, now_millis: u64, limit: u64) -> SessionFuture<'_, u64> {
        Box::pin(async move {
            SESSIONS
                .delete_batch(&self.pool, now_millis, limit)
                .await
                .map_err(|error| failed("sweep", &error))
        })
    }
}
