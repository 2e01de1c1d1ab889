//! Real databases for the store tests: a fresh PostgreSQL schema (dropped
//! when the test drops it) or a fresh SQLite file per store, with the
//! framework migrations applied, so tests run in parallel without seeing
//! each other's rows. The servers and the schema itself are
//! `autumn_testkit`'s, migrations included; this adds the store.

use std::sync::Arc;
use std::time::Duration;

use autumn_base::clock::ManualClock;
use autumn_base::database::DbPool;
use autumn_idempotency::database::DbIdempotencyStore;
#[cfg(feature = "sqlite")]
pub use autumn_testkit::framework::fresh_sqlite_file;
#[cfg(feature = "postgres")]
pub use autumn_testkit::framework::{FreshDatabase, empty_postgres_schema, fresh_postgres_schema};
pub use autumn_testkit::postgres::{PgBouncer, PgSchema, PrivatePostgres, RoundTrips};

/// A store on `url` reading time from `clock`.
pub fn store(url: &str, clock: ManualClock) -> DbIdempotencyStore {
    let pool = DbPool::new(url, 8, Duration::from_secs(5)).expect("pool");
    DbIdempotencyStore::new(pool).with_clock(Arc::new(clock))
}
