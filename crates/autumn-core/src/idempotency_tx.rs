//! `IdempotencyTx`: the stored response commits with the handler's own
//! database writes, and recovery points for handlers of several
//! transactions.
//!
//! ```no_run
//! # #[cfg(feature = "postgres")] mod demo {
//! use autumn_core::db::Db;
//! use autumn_core::idempotency_tx::IdempotencyTx;
//! use autumn_core::AutumnResult;
//! use axum::response::Response;
//! use diesel_async::RunQueryDsl as _;
//! use http::StatusCode;
//! use scoped_futures::ScopedFutureExt as _;
//!
//! async fn pay(idem: IdempotencyTx, mut db: Db) -> AutumnResult<Response> {
//!     db.tx(|conn| {
//!         async move {
//!             diesel::sql_query("INSERT INTO payments DEFAULT VALUES").execute(conn).await?;
//!             idem.commit(conn, (StatusCode::CREATED, "paid")).await
//!         }
//!         .scope_boxed()
//!     })
//!     .await
//! }
//! # }
//! ```

use autumn_idempotency::IdempotencyContext;
use autumn_idempotency::database::{IdempotencyConnection, TxError};
use autumn_idempotency::key::storage_key;
use axum::extract::{FromRequestParts, OriginalUri};
use axum::response::{IntoResponse, Response};
use http::request::Parts;

use crate::scope::GoneSessionScope;
use crate::{AutumnError, AutumnResult};

/// The extractor that writes a request's record in the handler's database
/// transaction, so the response and the writes commit together or not at
/// all (database backend).
///
/// Without an `Idempotency-Key`, or on another backend, every method leaves
/// the database alone: [`commit`](Self::commit) returns the response
/// unchanged and [`recovery_point`](Self::recovery_point) finds none, so the
/// same handler works on every backend. Autumn finds the database store by
/// its type: a store wrapping `DbIdempotencyStore` is "another backend".
///
/// Call the methods on a connection to the primary database (a [`Db`]
/// connection): on a [`ShardedDb`] connection they give 500.
///
/// [`Db`]: crate::db::Db
/// [`ShardedDb`]: crate::db::ShardedDb
#[derive(Debug, Clone)]
pub struct IdempotencyTx {
    context: Option<IdempotencyContext>,
}

impl IdempotencyTx {
    /// The request's idempotency context; `None` without a key.
    pub fn context(&self) -> Option<&IdempotencyContext> {
        self.context.as_ref()
    }

    /// Writes `response` as the request's record on `conn`, in the caller's
    /// transaction, fenced on this request's lock, and returns it: return
    /// that response from the handler. Only a 2xx/3xx response is written.
    /// The body is read whole.
    ///
    /// # Errors
    ///
    /// 409 when the request no longer holds its key (the lock lapsed and
    /// another request took it, or the row was deleted): return it, so the
    /// transaction rolls back. 422 when the key's recovery point belongs to
    /// a request with another body. 500 for a body over 10 MiB, a
    /// [`ShardedDb`](crate::db::ShardedDb) connection, or a database error.
    pub async fn commit<C>(
        &self,
        conn: &mut C,
        response: impl IntoResponse,
    ) -> AutumnResult<Response>
    where
        C: IdempotencyConnection + ?Sized,
    {
        let response = response.into_response();
        match &self.context {
            Some(context) => context
                .commit_in(conn, response)
                .await
                .map_err(autumn_error),
            None => {
                primary(conn)?;
                Ok(response)
            }
        }
    }

    /// Records that the step `name` is done, in the transaction that did it;
    /// a retry after a crash reads it with
    /// [`recovery_point`](Self::recovery_point) and skips the step. The
    /// point belongs to this request's body and lives as long as a record.
    ///
    /// # Errors
    ///
    /// As [`commit`](Self::commit): 409, 422, or 500.
    pub async fn set_recovery_point<C>(&self, conn: &mut C, name: &str) -> AutumnResult<()>
    where
        C: IdempotencyConnection + ?Sized,
    {
        match &self.context {
            Some(context) => context
                .set_recovery_point_in(conn, name)
                .await
                .map_err(autumn_error),
            None => primary(conn),
        }
    }

    /// The last recovery point set for this key and body, if any.
    ///
    /// # Errors
    ///
    /// 422 when it was set for a request with another body; 500 on a
    /// [`ShardedDb`](crate::db::ShardedDb) connection or a database error.
    pub async fn recovery_point<C>(&self, conn: &mut C) -> AutumnResult<Option<String>>
    where
        C: IdempotencyConnection + ?Sized,
    {
        match &self.context {
            Some(context) => context.recovery_point_in(conn).await.map_err(autumn_error),
            None => primary(conn).map(|()| None),
        }
    }
}

/// A shard is refused even without a key, so the mistake shows on the
/// first request rather than only on keyed ones.
fn primary<C: IdempotencyConnection + ?Sized>(conn: &mut C) -> AutumnResult<()> {
    match conn.idempotency_connection() {
        Some(_) => Ok(()),
        None => Err(AutumnError::internal(TxError::NotPrimary)),
    }
}

fn autumn_error(error: TxError) -> AutumnError {
    match error {
        TxError::LockLost => AutumnError::conflict(error.to_string()),
        TxError::FingerprintMismatch => AutumnError::unprocessable(error.to_string()),
        error => AutumnError::internal(error),
    }
}

/// Extracting it is when a retry whose session is gone (expired or
/// deleted) takes over the recovery point its first attempt set under the
/// old session's key: the retry runs under a new key, the one of a request
/// with an unknown session id, and the point is copied to it before the
/// handler runs, so the handler still skips the steps that are done.
///
/// Rejects with 503 when that copy fails: running the handler without the
/// point could redo a step.
impl<S: Send + Sync> FromRequestParts<S> for IdempotencyTx {
    type Rejection = AutumnError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let context = parts.extensions.get::<IdempotencyContext>().cloned();
        if let (Some(context), Some(GoneSessionScope(gone))) =
            (&context, parts.extensions.get::<GoneSessionScope>())
        {
            // The storage key as the middleware made it, under the old scope.
            let uri = match parts.extensions.get::<OriginalUri>() {
                Some(OriginalUri(original)) => original,
                None => &parts.uri,
            };
            let path = uri
                .path_and_query()
                .map_or_else(|| uri.path(), |p| p.as_str());
            let from = storage_key(parts.method.as_str(), path, gone.as_bytes(), context.key());
            if let Err(error) = context.adopt_recovery_point(&from).await {
                tracing::warn!(%error, "could not copy the recovery point of the gone session's key");
                return Err(AutumnError::unavailable(
                    "the idempotency store is unavailable; retry later",
                ));
            }
        }
        Ok(Self { context })
    }
}
