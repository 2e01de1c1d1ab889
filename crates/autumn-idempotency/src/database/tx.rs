//! Writing a request's record, and its recovery points, inside the app's own
//! transaction: what `IdempotencyTx` (in `autumn_web::idempotency`) is
//! built on.
//!
//! The record is written with one owner-fenced statement on the key's row,
//! so it commits with the handler's writes or not at all. The row lock that
//! statement takes orders it against a claim of the same key by another
//! request: exactly one of them wins, and a commit that loses (its lock
//! lapsed and another request took the key, or the row is gone) changes no
//! row, so the caller answers 409 and its transaction rolls back.
//!
//! The lock is kept: the middleware still rewrites the record with the final
//! response (route layers' headers, the session's `Set-Cookie`) and releases
//! it in one owner-checked statement, as for any other route. Meanwhile a
//! retry gets 409, never a record that is not final.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Binary, Bool, Nullable, Text};
use diesel_async::RunQueryDsl as _;

use autumn_base::body::{Capped, read_capped};
#[cfg(feature = "postgres")]
use autumn_base::database::PgConnection;
#[cfg(feature = "sqlite")]
use autumn_base::database::SqliteConnection;
#[cfg(feature = "postgres")]
use autumn_base::database::postgres_sql;
#[cfg(feature = "sqlite")]
use autumn_base::database::sqlite_params;
use autumn_base::database::{CachedExt as _, DbConnection, DbError};

use super::DbIdempotencyStore;
use crate::context::IdempotencyContext;
use crate::first_run::HoldsLock as _;
use crate::record::IdempotencyRecord;

/// The largest response body [`IdempotencyContext::commit_in`] records.
pub const COMMIT_BODY_LIMIT: usize = 10 * 1024 * 1024;

/// A connection the record can be written on: the app database's primary.
///
/// Implemented for [`PgConnection`] and [`SqliteConnection`] here, and by
/// Autumn for its `Db` extractor and `ShardedDb` (a shard, which answers
/// `None`: the key's row is not there).
pub trait IdempotencyConnection: Send {
    /// The connection to write on; `None` when this connection cannot hold
    /// the key's row.
    fn idempotency_connection(&mut self) -> Option<TxConnection<'_>>;
}

/// A connection to the database the key's row is in.
#[non_exhaustive]
pub enum TxConnection<'a> {
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(&'a mut PgConnection),
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(&'a mut SqliteConnection),
}

impl std::fmt::Debug for TxConnection<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxConnection").finish_non_exhaustive()
    }
}

#[cfg(feature = "postgres")]
impl IdempotencyConnection for PgConnection {
    fn idempotency_connection(&mut self) -> Option<TxConnection<'_>> {
        Some(TxConnection::Postgres(self))
    }
}

#[cfg(feature = "sqlite")]
impl IdempotencyConnection for SqliteConnection {
    fn idempotency_connection(&mut self) -> Option<TxConnection<'_>> {
        Some(TxConnection::Sqlite(self))
    }
}

/// Why a record or a recovery point could not be written or read in the
/// app's transaction.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxError {
    /// 409: this request no longer holds the key (its lock lapsed and
    /// another request took it, or the row was deleted). Roll back.
    #[error(
        "this request no longer holds its idempotency key (the in-flight lock lapsed and another request took it); its writes were rolled back"
    )]
    LockLost,
    /// 422: the key's recovery point belongs to a request with another body.
    #[error(
        "this Idempotency-Key was used with a different request; a recovery point belongs to the request that set it"
    )]
    FingerprintMismatch,
    /// 500: the response body is larger than [`COMMIT_BODY_LIMIT`].
    #[error("the response body is larger than the {limit} bytes a committed record may hold")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// 500: the response body failed while it was read.
    #[error("the response body failed while it was read: {0}")]
    Body(axum::Error),
    /// 500: the connection is a shard's; the key's row is on the primary.
    #[error(
        "IdempotencyTx was given a ShardedDb connection; the idempotency key's row is on the primary database, so use a Db connection"
    )]
    NotPrimary,
    /// 500: the database failed.
    #[error(transparent)]
    Query(#[from] DbError),
}

impl From<diesel::result::Error> for TxError {
    fn from(error: diesel::result::Error) -> Self {
        Self::Query(DbError::from(error))
    }
}

#[derive(QueryableByName)]
struct Recovery {
    #[diesel(sql_type = Nullable<Text>)]
    recovery_point: Option<String>,
    #[diesel(sql_type = Nullable<Binary>)]
    recovery_body_hash: Option<Vec<u8>>,
    #[diesel(sql_type = Nullable<BigInt>)]
    recovery_expires_at: Option<i64>,
    /// The time the read compared with (see [`GET_RECOVERY`]).
    #[diesel(sql_type = BigInt)]
    now: i64,
}

/// As in the store's statements, `now` is `COALESCE(override, {store_now})`:
/// a test clock's time, else the database's own (see
/// [`STORE_NOW`](autumn_base::database::STORE_NOW)); the statement reads one
/// `now` however often it names it, and deadlines are `now` plus a TTL.
///
/// $1 key, $2 owner, $3 record, $4 fingerprint, $5 time override, $6 record
/// TTL (ms), $7 hold the lock until the record's deadline. Fenced on the owner (not on
/// the lock's expiry: a lapsed lock nobody re-took is still this request's,
/// and a claim waits on this row until the transaction ends). A recovery
/// point set for another body blocks it; the record supersedes this one's.
const COMMIT: &str = "UPDATE autumn_idempotency_keys SET record = $3, body_hash = $4, \
       record_owner = $2, record_expires_at = COALESCE($5, {store_now}) + $6, \
       lock_expires_at = CASE WHEN $7 AND lock_expires_at < COALESCE($5, {store_now}) + $6 \
         THEN COALESCE($5, {store_now}) + $6 ELSE lock_expires_at END, \
       recovery_point = NULL, recovery_body_hash = NULL, recovery_expires_at = NULL \
     WHERE storage_key = $1 AND lock_owner = $2 \
       AND (recovery_body_hash IS NULL OR recovery_expires_at <= COALESCE($5, {store_now}) \
         OR recovery_body_hash = $4)";

/// $1 key, $2 owner, $3 point, $4 fingerprint, $5 time override, $6 TTL (ms).
const SET_RECOVERY: &str = "UPDATE autumn_idempotency_keys SET recovery_point = $3, \
       recovery_body_hash = $4, recovery_expires_at = COALESCE($5, {store_now}) + $6 \
     WHERE storage_key = $1 AND lock_owner = $2 \
       AND (recovery_body_hash IS NULL OR recovery_expires_at <= COALESCE($5, {store_now}) \
         OR recovery_body_hash = $4)";

/// $1 key, $2 time override: the point, and the time to judge it by.
const GET_RECOVERY: &str = "SELECT recovery_point, recovery_body_hash, recovery_expires_at, \
       COALESCE($2, {store_now}) AS now \
     FROM autumn_idempotency_keys WHERE storage_key = $1";

/// $1 this request's key, $2 owner, $3 the key to copy from, $4 time override. Copies
/// a live recovery point, with its body and expiry, onto this request's row
/// unless that has a live point of its own. The body stays bound: a retry
/// with another body still gets 422 from the copy.
const ADOPT_RECOVERY: &str = "UPDATE autumn_idempotency_keys SET \
       recovery_point = (SELECT f.recovery_point FROM autumn_idempotency_keys f WHERE f.storage_key = $3), \
       recovery_body_hash = (SELECT f.recovery_body_hash FROM autumn_idempotency_keys f WHERE f.storage_key = $3), \
       recovery_expires_at = (SELECT f.recovery_expires_at FROM autumn_idempotency_keys f WHERE f.storage_key = $3) \
     WHERE storage_key = $1 AND lock_owner = $2 \
       AND (recovery_point IS NULL OR recovery_expires_at <= COALESCE($4, {store_now})) \
       AND EXISTS (SELECT 1 FROM autumn_idempotency_keys f WHERE f.storage_key = $3 \
         AND f.recovery_point IS NOT NULL AND f.recovery_expires_at > COALESCE($4, {store_now}))";

/// Runs `$body` with `$conn` the backend's connection and `$sql` turning a
/// statement into its dialect.
macro_rules! on_tx_backend {
    ($connection:expr, |$conn:ident, $sql:ident| $body:expr) => {
        match $connection {
            #[cfg(feature = "postgres")]
            TxConnection::Postgres($conn) => {
                let $sql = postgres_sql;
                $body
            }
            #[cfg(feature = "sqlite")]
            TxConnection::Sqlite($conn) => {
                let $sql = sqlite_params;
                $body
            }
        }
    };
}

fn millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

/// The connection to write on, or [`TxError::NotPrimary`].
fn primary<C: IdempotencyConnection + ?Sized>(conn: &mut C) -> Result<TxConnection<'_>, TxError> {
    conn.idempotency_connection().ok_or(TxError::NotPrimary)
}

impl IdempotencyContext {
    /// The database store holding this request's lock, found by its type.
    fn database_store(&self) -> Option<&DbIdempotencyStore> {
        self.store().as_any()?.downcast_ref::<DbIdempotencyStore>()
    }

    /// Writes `response` as this request's record on `conn`, inside the
    /// caller's transaction, and returns the same response (its body read
    /// whole). A 4xx/5xx response, or a store that is not a
    /// [`DbIdempotencyStore`], is returned unchanged and nothing is written.
    ///
    /// The building block of `IdempotencyTx::commit`, which apps use.
    ///
    /// # Errors
    ///
    /// [`TxError::LockLost`] (roll back), [`TxError::FingerprintMismatch`],
    /// [`TxError::TooLarge`] past [`COMMIT_BODY_LIMIT`],
    /// [`TxError::NotPrimary`], or the database's error.
    pub async fn commit_in<C: IdempotencyConnection + ?Sized>(
        &self,
        conn: &mut C,
        response: Response,
    ) -> Result<Response, TxError> {
        let conn = primary(conn)?;
        let Some(store) = self.database_store() else {
            return Ok(response);
        };
        let status = response.status();
        if !(status.is_success() || status.is_redirection()) {
            return Ok(response);
        }
        let (parts, body) = response.into_parts();
        let body = match read_capped(body, COMMIT_BODY_LIMIT).await {
            Ok(Capped::Whole(body)) => body,
            Ok(Capped::Over(_)) => {
                return Err(TxError::TooLarge {
                    limit: COMMIT_BODY_LIMIT,
                });
            }
            Err(error) => return Err(TxError::Body(error)),
        };
        let record = self
            .held()
            .sealing
            .seal(IdempotencyRecord::from_parts(&parts, body.clone()))
            .encode();
        let (now, ttl) = (store.time_override(), millis(self.ttl()));
        // A session change already made is saved only after the handler
        // returns: until the middleware rewrites the record with its
        // Set-Cookie, the lock must outlive a crash, or the record would be
        // replayed without the cookie.
        let hold = self.finalize_pending();
        let (key, owner, fingerprint) = (self.storage_key(), self.owner(), self.fingerprint());
        let mut conn = conn;
        let written = on_tx_backend!(&mut conn, |conn, sql| {
            diesel::sql_query(sql(COMMIT))
                .bind::<Text, _>(key)
                .bind::<Text, _>(owner)
                .bind::<Binary, _>(&record)
                .bind::<Binary, _>(fingerprint)
                .bind::<Nullable<BigInt>, _>(now)
                .bind::<BigInt, _>(ttl)
                .bind::<Bool, _>(hold)
                .cached()
                .execute(&mut **conn)
                .await?
        });
        if written != 1 {
            return Err(self.why_not_written(&mut conn, store).await);
        }
        Ok(Response::from_parts(parts, Body::from(body)))
    }

    /// Records that the handler finished the step `name`, bound to this
    /// request's fingerprint, for the record's lifetime: a retry after a
    /// crash reads it with [`recovery_point_in`](Self::recovery_point_in)
    /// and skips what is done. Call it in the transaction that did the step.
    /// Without a [`DbIdempotencyStore`] nothing is written.
    ///
    /// # Errors
    ///
    /// [`TxError::LockLost`] (roll back), [`TxError::FingerprintMismatch`]
    /// when the point belongs to a request with another body,
    /// [`TxError::NotPrimary`], or the database's error.
    pub async fn set_recovery_point_in<C: IdempotencyConnection + ?Sized>(
        &self,
        conn: &mut C,
        name: &str,
    ) -> Result<(), TxError> {
        let mut conn = primary(conn)?;
        let Some(store) = self.database_store() else {
            return Ok(());
        };
        let (now, ttl) = (store.time_override(), millis(self.ttl()));
        let (key, owner, fingerprint) = (self.storage_key(), self.owner(), self.fingerprint());
        let written = on_tx_backend!(&mut conn, |conn, sql| {
            diesel::sql_query(sql(SET_RECOVERY))
                .bind::<Text, _>(key)
                .bind::<Text, _>(owner)
                .bind::<Text, _>(name)
                .bind::<Binary, _>(fingerprint)
                .bind::<Nullable<BigInt>, _>(now)
                .bind::<BigInt, _>(ttl)
                .cached()
                .execute(&mut **conn)
                .await?
        });
        if written != 1 {
            return Err(self.why_not_written(&mut conn, store).await);
        }
        Ok(())
    }

    /// The last recovery point a run of this request set (this one, or one
    /// that crashed before it), if it is still live. `None` without a
    /// [`DbIdempotencyStore`].
    ///
    /// # Errors
    ///
    /// [`TxError::FingerprintMismatch`] when the point belongs to a request
    /// with another body, [`TxError::NotPrimary`], or the database's error.
    pub async fn recovery_point_in<C: IdempotencyConnection + ?Sized>(
        &self,
        conn: &mut C,
    ) -> Result<Option<String>, TxError> {
        let mut conn = primary(conn)?;
        let Some(store) = self.database_store() else {
            return Ok(None);
        };
        match self.read_recovery(&mut conn, store).await? {
            Some(Recovery {
                recovery_point: Some(point),
                recovery_body_hash: Some(hash),
                recovery_expires_at: Some(at),
                now,
            }) if at > now => {
                if hash == self.fingerprint() {
                    Ok(Some(point))
                } else {
                    Err(TxError::FingerprintMismatch)
                }
            }
            _ => Ok(None),
        }
    }

    /// Copies the live recovery point kept under `from` onto this
    /// request's key, unless this key has a live one; returns whether it
    /// copied. For a retry whose session is gone: it runs under a new
    /// storage key, and `from` is the key it had under the old session, so
    /// it still skips the steps that are done. Runs on the store's own
    /// connection, before the handler's transactions. Without a
    /// [`DbIdempotencyStore`] nothing is copied.
    ///
    /// # Errors
    ///
    /// The database's error.
    pub async fn adopt_recovery_point(&self, from: &str) -> Result<bool, TxError> {
        let Some(store) = self.database_store() else {
            return Ok(false);
        };
        if from == self.storage_key() {
            return Ok(false);
        }
        let now = store.time_override();
        let (key, owner) = (self.storage_key(), self.owner());
        let copied = match store.pool().get().await? {
            #[cfg(feature = "postgres")]
            DbConnection::Postgres(mut conn) => {
                diesel::sql_query(postgres_sql(ADOPT_RECOVERY))
                    .bind::<Text, _>(key)
                    .bind::<Text, _>(owner)
                    .bind::<Text, _>(from)
                    .bind::<Nullable<BigInt>, _>(now)
                    .cached()
                    .execute(&mut *conn)
                    .await?
            }
            #[cfg(feature = "sqlite")]
            DbConnection::Sqlite(mut conn) => {
                diesel::sql_query(sqlite_params(ADOPT_RECOVERY))
                    .bind::<Text, _>(key)
                    .bind::<Text, _>(owner)
                    .bind::<Text, _>(from)
                    .bind::<Nullable<BigInt>, _>(now)
                    .cached()
                    .execute(&mut *conn)
                    .await?
            }
            #[allow(unreachable_patterns)]
            _ => return Err(super::no_driver().into()),
        };
        Ok(copied == 1)
    }

    /// The key's recovery point, with the time `store` judges it by.
    async fn read_recovery(
        &self,
        conn: &mut TxConnection<'_>,
        store: &DbIdempotencyStore,
    ) -> Result<Option<Recovery>, TxError> {
        let (key, now) = (self.storage_key(), store.time_override());
        let rows: Vec<Recovery> = on_tx_backend!(conn, |conn, sql| {
            diesel::sql_query(sql(GET_RECOVERY))
                .bind::<Text, _>(key)
                .bind::<Nullable<BigInt>, _>(now)
                .cached()
                .load(&mut **conn)
                .await?
        });
        Ok(rows.into_iter().next())
    }

    /// Why an owner-fenced write changed no row: a live recovery point of
    /// another body (422), else the lock is gone (409). Only read on that
    /// failure, so a write that succeeds costs its one statement.
    async fn why_not_written(
        &self,
        conn: &mut TxConnection<'_>,
        store: &DbIdempotencyStore,
    ) -> TxError {
        match self.read_recovery(conn, store).await {
            Ok(Some(Recovery {
                recovery_body_hash: Some(hash),
                recovery_expires_at: Some(at),
                now,
                ..
            })) if at > now && hash != self.fingerprint() => TxError::FingerprintMismatch,
            Ok(_) => TxError::LockLost,
            Err(error) => error,
        }
    }
}
