//! Real databases with the framework tables, from `autumn_testkit`'s
//! `framework` module (with its `on_databases!`), and the servers and
//! schemas of its `postgres` module.

pub use autumn_testkit::framework::{
    FreshDatabase, empty_postgres_schema, fresh_postgres_schema, fresh_sqlite_file,
};
pub use autumn_testkit::postgres::{PgBouncer, PgSchema, PrivatePostgres, RoundTrips};
