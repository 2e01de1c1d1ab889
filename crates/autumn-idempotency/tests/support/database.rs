//! Real databases for the store tests: a fresh PostgreSQL schema (dropped
//! when the test drops it) or a fresh SQLite file per store, with the
//! framework migrations applied, so tests run in parallel without seeing
//! each other's rows. The servers and the schema itself are
//! `autumn_testkit::postgres`'s; this adds the migrations and the store.

use std::sync::Arc;
use std::time::Duration;

use autumn_base::clock::ManualClock;
use autumn_base::database::{DbPool, FRAMEWORK_MIGRATIONS};
use autumn_idempotency::database::DbIdempotencyStore;
#[cfg(feature = "postgres")]
pub use autumn_testkit::postgres::{PgBouncer, PgSchema, PrivatePostgres, RoundTrips};

/// A new schema with the framework tables, dropped with the returned value
/// (which derefs to a URL whose connections use the schema).
#[cfg(feature = "postgres")]
pub fn fresh_postgres_schema() -> PgSchema {
    let schema = PgSchema::create();
    migrate(schema.url());
    schema
}

/// A new, empty schema, dropped with the returned value.
#[cfg(feature = "postgres")]
pub fn empty_postgres_schema() -> PgSchema {
    PgSchema::create()
}

/// [`PgBouncer`] databases with the framework tables.
#[cfg(feature = "postgres")]
pub trait FreshDatabase {
    /// A new database with the framework tables, made directly on the
    /// server; its URL through PgBouncer.
    fn fresh_database(&self) -> String;
}

#[cfg(feature = "postgres")]
impl FreshDatabase for PgBouncer {
    fn fresh_database(&self) -> String {
        let url = self.empty_database();
        migrate(&self.direct(&url));
        url
    }
}

/// A new SQLite file with the framework tables; the directory lives as long
/// as the process (tests are short).
#[cfg(feature = "sqlite")]
pub fn fresh_sqlite_file() -> String {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    let url = format!("sqlite://{}", dir.join("autumn.db").display());
    migrate(&url);
    // Applying them twice is a no-op: startup runs them every time.
    migrate(&url);
    url
}

/// Runs the framework migrations on `url`.
fn migrate(url: &str) {
    let url = url.to_owned();
    autumn_testkit::on_own_runtime(move || async move {
        let pool = DbPool::new(&url, 1, Duration::from_secs(5)).expect("pool");
        FRAMEWORK_MIGRATIONS.run(&pool).await.expect("migrations");
    });
}

/// A store on `url` reading time from `clock`.
pub fn store(url: &str, clock: ManualClock) -> DbIdempotencyStore {
    let pool = DbPool::new(url, 8, Duration::from_secs(5)).expect("pool");
    DbIdempotencyStore::new(pool).with_clock(Arc::new(clock))
}
