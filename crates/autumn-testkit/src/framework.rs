//! Real databases with the framework tables: a fresh PostgreSQL schema
//! (dropped when the test drops it) or a fresh SQLite file, so tests run in
//! parallel without seeing each other's rows. The schema itself is
//! [`PgSchema`]'s; this adds autumn-base's migrations.

use std::time::Duration;

use autumn_base::database::{DbPool, FRAMEWORK_MIGRATIONS};

use crate::postgres::{PgBouncer, PgSchema};

/// `on_databases!(a, b)`: tests `a` and `b` (each an `async fn(String)`
/// taking a database URL) run once on a fresh PostgreSQL schema and once
/// on a fresh SQLite file, as `postgres::a`, `sqlite::a`, ... The schema is
/// dropped when the test ends.
#[macro_export]
macro_rules! on_databases {
    ($($test:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    let schema = $crate::framework::fresh_postgres_schema();
                    super::$test(schema.url().to_owned()).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test($crate::framework::fresh_sqlite_file()).await;
                }
            )*
        }
    };
}

/// A new schema with the framework tables, dropped with the returned value
/// (which derefs to a URL whose connections use the schema).
pub fn fresh_postgres_schema() -> PgSchema {
    let schema = PgSchema::create();
    migrate(schema.url());
    schema
}

/// A new, empty schema, dropped with the returned value.
pub fn empty_postgres_schema() -> PgSchema {
    PgSchema::create()
}

/// [`PgBouncer`] databases with the framework tables.
pub trait FreshDatabase {
    /// A new database with the framework tables, made directly on the
    /// server; its URL through PgBouncer.
    fn fresh_database(&self) -> String;
}

impl FreshDatabase for PgBouncer {
    fn fresh_database(&self) -> String {
        let url = self.empty_database();
        migrate(&self.direct(&url));
        url
    }
}

/// A new SQLite file with the framework tables; the directory lives as long
/// as the process (tests are short).
pub fn fresh_sqlite_file() -> String {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    let url = format!("sqlite://{}", dir.join("autumn.db").display());
    migrate(&url);
    url
}

/// Runs the framework migrations on `url` (applying them again is a no-op:
/// startup runs them every time).
pub fn migrate(url: &str) {
    let url = url.to_owned();
    crate::on_own_runtime(move || async move {
        let pool = DbPool::new(&url, 1, Duration::from_secs(5)).expect("pool");
        FRAMEWORK_MIGRATIONS.run(&pool).await.expect("migrations");
    });
}
