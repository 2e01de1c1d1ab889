//! A database of the test's own: a PostgreSQL schema on the test server,
//! or a SQLite file in a temporary directory, gone when the test is done.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh, empty database for one test, removed when dropped. Give its
/// [`url`](Self::url) to the app as `[database] url` (or
/// `AUTUMN_DATABASE__URL` for a [`ServerProcess`](crate::ServerProcess));
/// the app's migrations then run on it at startup, as in production.
///
/// - [`TestDatabase::sqlite`]: a new SQLite file in a temporary directory,
///   deleted with the directory.
/// - [`TestDatabase::postgres`] (features `postgres`): a new schema on the
///   PostgreSQL named by `TEST_DATABASE_URL` (by default
///   `postgres://postgres@127.0.0.1:5432/test`), with a URL whose
///   connections use it (`search_path`); dropped with everything in it.
///
/// Each test gets its own, so tests run in parallel without seeing each
/// other's rows.
///
/// ```
/// use autumn_core::config::AutumnConfig;
/// use autumn_test::{TestApp, TestDatabase};
///
/// let database = TestDatabase::sqlite();
/// let config = AutumnConfig::from_toml_str(&database.config_toml()).expect("config");
/// # let _ = config;
/// // TestApp::from_builder(my_app()).with_config(config).build() ...
/// ```
#[derive(Debug)]
pub struct TestDatabase {
    url: String,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Sqlite {
        dir: PathBuf,
    },
    #[cfg(feature = "postgres")]
    Postgres {
        server: String,
        schema: String,
    },
}

impl TestDatabase {
    /// A new SQLite database in a temporary directory of its own.
    ///
    /// # Panics
    ///
    /// When the temporary directory cannot be made.
    pub fn sqlite() -> Self {
        let dir = std::env::temp_dir().join(unique_name("autumn-test-db"));
        if let Err(error) = std::fs::create_dir_all(&dir) {
            panic!("cannot make {} for a test database: {error}", dir.display());
        }
        let url = format!("sqlite://{}", dir.join("test.db").display());
        Self {
            url,
            kind: Kind::Sqlite { dir },
        }
    }

    /// A new, empty schema on the PostgreSQL named by `TEST_DATABASE_URL`
    /// (default `postgres://postgres@127.0.0.1:5432/test`). Schemas this
    /// makes are named `autumn_test_{unix seconds}_...`; one a crashed test
    /// run left behind is dropped by a later run an hour on.
    ///
    /// ```no_run
    /// use autumn_test::TestDatabase;
    ///
    /// let database = TestDatabase::postgres();
    /// assert!(database.url().contains("search_path"));
    /// ```
    ///
    /// # Panics
    ///
    /// When PostgreSQL does not answer, saying how to point the tests at one.
    #[cfg(feature = "postgres")]
    pub fn postgres() -> Self {
        let server = std::env::var("TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let schema = unique_name("autumn_test");
        let separator = if server.contains('?') { '&' } else { '?' };
        let url = format!("{server}{separator}options=-c%20search_path%3D{schema}");
        let (setup_server, setup_schema) = (server.clone(), schema.clone());
        let made = on_own_runtime(move || async move {
            // As the app will connect: the URL's sslmode and sslrootcert
            // apply here too.
            let client = connect(&setup_server).await.map_err(|error| {
                format!(
                    "PostgreSQL is not reachable at {} ({error}); start it, \
                     or set TEST_DATABASE_URL to a database this user may create \
                     schemas in",
                    autumn_base::redact_passwords(&setup_server)
                )
            })?;
            drop_stale_schemas(&client).await;
            client
                .batch_execute(&format!("CREATE SCHEMA {setup_schema}"))
                .await
                .map_err(|error| format!("cannot create schema {setup_schema}: {error}"))
        });
        match made {
            Some(Ok(())) => {}
            Some(Err(error)) => panic!("{error}"),
            None => panic!("the thread making the test schema panicked"),
        }
        Self {
            url,
            kind: Kind::Postgres { server, schema },
        }
    }

    /// The URL the app connects to: its `[database] url`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `[database]` with this database's `url`, as `autumn.toml` text to
    /// put before or after the rest of a test's configuration.
    pub fn config_toml(&self) -> String {
        format!("[database]\nurl = \"{}\"\n", self.url)
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        match &self.kind {
            Kind::Sqlite { dir } => {
                let _ = std::fs::remove_dir_all(dir);
            }
            #[cfg(feature = "postgres")]
            Kind::Postgres { server, schema } => {
                let (server, schema) = (server.clone(), schema.clone());
                // Never a panic in drop: a schema left behind goes with a
                // later run.
                let _ = on_own_runtime(move || async move {
                    let Ok(client) = connect(&server).await else {
                        return;
                    };
                    // A pool the test still holds may be mid-transaction:
                    // wait a little, not forever.
                    let _ = client
                        .batch_execute(&format!(
                            "SET lock_timeout = '5s'; DROP SCHEMA IF EXISTS {schema} CASCADE"
                        ))
                        .await;
                });
            }
        }
    }
}

/// `{prefix}_{unix seconds}_{process id}_{count}_{nanoseconds}`: unique
/// among concurrent test processes, and dated for the stale-schema sweep.
fn unique_name(prefix: &str) -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{prefix}_{}_{}_{}_{}",
        now.as_secs(),
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed),
        now.subsec_nanos()
    )
}

/// Runs `work`'s future on a runtime of its own, on a thread of its own (a
/// test may be inside a runtime, or in `Drop`); `None` when it panicked.
#[cfg(feature = "postgres")]
fn on_own_runtime<T, F>(work: impl FnOnce() -> F + Send + 'static) -> Option<T>
where
    T: Send + 'static,
    F: Future<Output = T>,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        Some(runtime.block_on(work()))
    })
    .join()
    .ok()
    .flatten()
}

/// A client on `url` through autumn-base's connector (TLS as the URL's
/// `sslmode` asks), driven on the current runtime.
#[cfg(feature = "postgres")]
async fn connect(url: &str) -> Result<tokio_postgres::Client, autumn_base::database::DbError> {
    autumn_base::database::PgConnector::from_url(url)?
        .connect()
        .await
}

/// Drops the schemas this type made more than an hour ago (a crashed run
/// leaves its own behind).
#[cfg(feature = "postgres")]
async fn drop_stale_schemas(client: &tokio_postgres::Client) {
    let Ok(rows) = client
        .query(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'autumn\\_test\\_%'",
            &[],
        )
        .await
    else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    for row in rows {
        let name: String = row.get(0);
        let created = name
            .split('_')
            .nth(2)
            .and_then(|secs| secs.parse::<u64>().ok());
        if created.is_some_and(|created| created + 3600 < now) {
            let _ = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                .await;
        }
    }
}
