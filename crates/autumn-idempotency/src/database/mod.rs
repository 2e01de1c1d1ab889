//! The database idempotency store, and writing a request's record in the
//! app's own transaction.
//!
//! The pool, its connections, the SQL every framework table shares and the
//! framework's migrations are `autumn_base::database`'s; the names below
//! that point there are deprecated and go in the next release.

mod store;
mod tx;

pub use store::DbIdempotencyStore;
pub use tx::{COMMIT_BODY_LIMIT, IdempotencyConnection, TxConnection, TxError};

/// The error of a pool whose backend this crate was built without
/// (`autumn-base` has the backend's feature, `autumn-idempotency` not).
fn no_driver() -> autumn_base::database::DbError {
    autumn_base::database::DbError::Connect(
        "the database pool's backend is not enabled for the idempotency store (enable autumn-idempotency's `postgres` or `sqlite` feature)".to_owned(),
    )
}

/// Deprecated: moved to `autumn_base::database`.
#[cfg(feature = "sqlite")]
#[deprecated(note = "moved to autumn_base::database")]
#[doc(no_inline)]
pub use autumn_base::database::SqliteConnection;
/// Deprecated: moved to `autumn_base::database`.
#[deprecated(note = "moved to autumn_base::database")]
#[doc(no_inline)]
pub use autumn_base::database::{
    Cacheable, CachedExt, DbBackend, DbConnection, DbError, DbPool, ExpiringTable,
    FRAMEWORK_MIGRATIONS, FrameworkMigrations, PooledConnection, spawn_sweeper, sqlite_params,
};
/// Deprecated: moved to `autumn_base::database`.
#[cfg(feature = "postgres")]
#[deprecated(note = "moved to autumn_base::database")]
#[doc(no_inline)]
pub use autumn_base::database::{PgConnection, PgPool, begin_uncached, end_uncached};
