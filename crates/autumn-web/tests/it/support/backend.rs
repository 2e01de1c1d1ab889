//! The backends an app-level test runs on, and [`on_every_backend!`], which
//! runs a case once on each. Every run gets storage of its own (a Redis key
//! prefix, a PostgreSQL schema), so the runs go in parallel.
//!
//! A test file says `#[macro_use] mod support;` and `use support::backend;`.
//! A run's PostgreSQL schema is dropped with its [`Storage`]: keep the
//! storage for as long as the app runs.

use std::sync::Arc;
#[cfg(feature = "postgres")]
use std::time::Duration;

use autumn_web::config::AutumnConfig;
use autumn_web::session::{MemorySessionStore, SessionStore};

/// Where a test keeps its idempotency records, submit tokens and sessions.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Memory,
    #[cfg(feature = "redis")]
    Redis,
    #[cfg(feature = "postgres")]
    Postgres,
}

/// Fresh storage on one backend: the configuration that puts an app there,
/// and the means to build other stores beside it.
pub struct Storage {
    /// The `[idempotency]` (and `[database]`) part of `autumn.toml`.
    pub toml: String,
    /// Redis's URL and this run's key prefix.
    #[cfg(feature = "redis")]
    pub redis: Option<(String, String)>,
    /// The URL of this run's PostgreSQL schema.
    #[cfg(feature = "postgres")]
    pub database_url: Option<String>,
    /// This run's PostgreSQL schema, dropped with the storage.
    #[cfg(feature = "postgres")]
    schema: Option<super::database::PgSchema>,
}

impl Backend {
    /// New storage on this backend, failing with how to start its service
    /// when it does not answer.
    pub fn storage(self) -> Storage {
        let mut storage = Storage {
            toml: String::new(),
            #[cfg(feature = "redis")]
            redis: None,
            #[cfg(feature = "postgres")]
            database_url: None,
            #[cfg(feature = "postgres")]
            schema: None,
        };
        match self {
            Self::Memory => {}
            #[cfg(feature = "redis")]
            Self::Redis => {
                let url = super::redis_support::require_redis();
                let prefix = super::redis_support::unique_prefix();
                storage.toml = format!(
                    "[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\n"
                );
                storage.redis = Some((url, prefix));
            }
            #[cfg(feature = "postgres")]
            Self::Postgres => {
                let schema = super::database::fresh_postgres_schema();
                let url = schema.url().to_owned();
                storage.toml =
                    format!("[idempotency]\nbackend = \"database\"\n[database]\nurl = \"{url}\"\n");
                storage.database_url = Some(url);
                storage.schema = Some(schema);
            }
        }
        storage
    }
}

impl Storage {
    /// Leaves this run's PostgreSQL schema in place past the storage, for a
    /// helper that hands out an app but not the storage: a later run drops
    /// it an hour on.
    pub fn keep_schema(&mut self) {
        #[cfg(feature = "postgres")]
        if let Some(schema) = self.schema.take() {
            schema.keep();
        }
    }

    /// The app's configuration: `extra` (other sections), then this storage.
    pub fn config(&self, extra: &str) -> AutumnConfig {
        AutumnConfig::from_toml_str(&format!("{extra}\n{}", self.toml)).expect("a valid config")
    }

    /// A pool on this run's database, when the backend is one.
    #[cfg(feature = "postgres")]
    pub fn pool(&self) -> Option<autumn_web::db::DbPool> {
        self.database_url
            .as_ref()
            .map(|url| autumn_web::db::DbPool::new(url, 4, Duration::from_secs(5)).expect("a pool"))
    }

    /// What a dump of this run's storage would hand over: the values of every
    /// Redis key under its prefix, or every recorded response in its
    /// idempotency table. `None` on memory, which nothing outside the
    /// process can read.
    pub async fn dump(&self) -> Option<Vec<u8>> {
        #[cfg(feature = "redis")]
        if let Some((url, prefix)) = &self.redis {
            let mut connection = super::redis_support::plain_connection(url).await;
            let keys: Vec<String> = ::redis::cmd("KEYS")
                .arg(format!("{prefix}*"))
                .query_async(&mut connection)
                .await
                .expect("KEYS");
            let mut out = Vec::new();
            for key in keys {
                let kind: String = ::redis::cmd("TYPE")
                    .arg(&key)
                    .query_async(&mut connection)
                    .await
                    .expect("TYPE");
                let mut read = ::redis::cmd(if kind == "hash" { "HGETALL" } else { "GET" });
                read.arg(&key);
                let values: Vec<Vec<u8>> =
                    read.query_async(&mut connection).await.unwrap_or_default();
                out.extend(values.concat());
            }
            return Some(out);
        }
        #[cfg(feature = "postgres")]
        if let Some(url) = &self.database_url {
            let client = autumn_testkit::postgres::connect(url).await;
            let rows = client
                .query(
                    "SELECT record FROM autumn_idempotency_keys WHERE record IS NOT NULL",
                    &[],
                )
                .await
                .expect("the recorded responses");
            return Some(
                rows.iter()
                    .flat_map(|row| row.get::<_, Vec<u8>>(0))
                    .collect(),
            );
        }
        None
    }

    /// A session store where the app's own would be: what a test wraps to
    /// watch it.
    pub fn session_store(&self) -> Arc<dyn SessionStore> {
        #[cfg(feature = "redis")]
        if let Some((url, prefix)) = &self.redis {
            let connection =
                autumn_web::idempotency::RedisConnection::new(url).expect("a Redis URL");
            return Arc::new(autumn_web::session::RedisSessionStore::new(
                connection,
                &format!("{prefix}:session"),
            ));
        }
        #[cfg(feature = "postgres")]
        if let Some(pool) = self.pool() {
            return Arc::new(autumn_web::session::DbSessionStore::new(pool));
        }
        Arc::new(MemorySessionStore::new(1_000))
    }
}

/// Runs each listed case, an `async fn(Backend)` of the including file, as
/// a test on every backend of this build.
macro_rules! on_every_backend {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case(super::backend::Backend::Memory).await;
            })*
        }
        #[cfg(feature = "redis")]
        mod redis {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case(super::backend::Backend::Redis).await;
            })*
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case(super::backend::Backend::Postgres).await;
            })*
        }
    };
}
