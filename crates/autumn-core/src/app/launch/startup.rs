//! Phase 4: the checks against live services that must pass before
//! serving. The earlier phases only record what to check here; the caller
//! runs [`Startup::check`] on the runtime that will serve (or
//! [`Startup::check_blocking`] on one of its own).

#[cfg(feature = "redis")]
use std::sync::Arc;

use super::super::error::LaunchError;

/// What must be checked against live services before serving: done by
/// `run()` on its runtime, and by `into_router()`/`TestApp` on a runtime of
/// their own, always over connections of their own.
pub(crate) struct Startup {
    /// Redis URL and key prefix to ping.
    pub(super) redis: Option<(String, String)>,
    /// Database URL to health-check and migrate.
    pub(super) database: Option<String>,
    /// The app's own migrations, and whether to apply them (else only to
    /// refuse to start while one is pending).
    #[cfg(feature = "database")]
    pub(crate) app_migrations: Option<(autumn_base::database::AppMigrations, bool)>,
    /// The Redis stores the app serves with, connected by
    /// [`warm`](Self::warm) when serving on the same runtime.
    #[cfg(feature = "redis")]
    pub(super) live_redis: Vec<Arc<autumn_idempotency::RedisIdempotencyStore>>,
    /// The TLS files of the Redis connection, for the check's own
    /// connection to [`redis`](Self::redis).
    #[cfg(feature = "redis")]
    pub(super) redis_tls: autumn_base::redis::RedisTls,
    /// Set once the checks passed (the framework tables exist): what
    /// starts in the background and uses the database waits for it, so it
    /// never races the migrations (SQLite refuses a second writer then).
    pub(crate) checked: tokio::sync::watch::Sender<bool>,
}

impl Default for Startup {
    fn default() -> Self {
        Self {
            redis: None,
            database: None,
            #[cfg(feature = "database")]
            app_migrations: None,
            #[cfg(feature = "redis")]
            live_redis: Vec::new(),
            #[cfg(feature = "redis")]
            redis_tls: autumn_base::redis::RedisTls::new(),
            checked: tokio::sync::watch::channel(false).0,
        }
    }
}

impl Startup {
    /// Pings Redis, health-checks the database and applies the framework
    /// migrations. Clocks are not compared: locks and records expire by the
    /// store's own clock, so no replica's clock decides anything.
    pub(crate) async fn check(&self) -> Result<(), LaunchError> {
        let checked = self.check_services().await;
        if checked.is_ok() {
            self.checked.send_replace(true);
        }
        checked
    }

    async fn check_services(&self) -> Result<(), LaunchError> {
        // Each check exists only in builds with its backend.
        let (_redis, _database) = (&self.redis, &self.database);
        #[cfg(feature = "redis")]
        if let Some((url, prefix)) = &self.redis {
            let redis_error = |e: &dyn std::fmt::Display| LaunchError::Redis {
                url: crate::config::redact(url),
                message: e.to_string(),
            };
            let connection = autumn_base::redis::RedisConnection::with_tls(url, &self.redis_tls)
                .map_err(|e| redis_error(&autumn_idempotency::StoreError::from(e)))?;
            let store =
                autumn_idempotency::RedisIdempotencyStore::from_connection(connection, prefix);
            store.ping().await.map_err(|e| redis_error(&e))?;
        }
        #[cfg(feature = "database")]
        if let Some(url) = &self.database {
            use autumn_base::database::DbPool;
            let database_error = |e: &dyn std::fmt::Display| LaunchError::Database {
                url: crate::config::redact(url),
                message: e.to_string(),
            };
            let pool = DbPool::new(url, 1, std::time::Duration::from_secs(5))
                .map_err(|e| database_error(&e))?;
            pool.health_check().await.map_err(|e| database_error(&e))?;
            autumn_base::database::FRAMEWORK_MIGRATIONS
                .run(&pool)
                .await
                .map_err(|e| database_error(&e))?;
            if let Some((migrations, apply)) = &self.app_migrations {
                check_app_migrations(migrations, *apply, &pool)
                    .await
                    .map_err(|outcome| match outcome {
                        Err(pending) => pending,
                        Ok(message) => database_error(&message),
                    })?;
            }
        }
        Ok(())
    }

    /// Connects the Redis stores the app serves with, so the first requests
    /// do not wait for a connection. Only for a server on this runtime: a
    /// connection belongs to the runtime that made it. A failure is logged
    /// (the check just reached Redis); the store connects again on use.
    pub(crate) async fn warm(&self) {
        #[cfg(feature = "redis")]
        for store in &self.live_redis {
            if let Err(error) = store.ping().await {
                tracing::warn!(%error, "could not connect the Redis idempotency store before serving; it connects on first use");
            }
        }
    }

    /// [`check`](Self::check) from synchronous code: on a runtime of its own,
    /// on another thread, so it works inside or outside a runtime.
    pub(crate) fn check_blocking(&self) -> Result<(), LaunchError> {
        if self.redis.is_none() && self.database.is_none() {
            return Ok(());
        }
        let startup_check = |source| LaunchError::StartupCheck {
            keys: self.keys(),
            source,
        };
        // The caller's subscriber, so what the check logs goes where the
        // caller's logs go (a test capturing them included).
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tracing::dispatcher::with_default(&dispatch, || {
                        tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .map_err(startup_check)?
                            .block_on(self.check())
                    })
                })
                .join()
                .unwrap_or_else(|_| {
                    Err(startup_check(std::io::Error::other(
                        "the startup check panicked",
                    )))
                })
        })
    }

    /// The config keys naming the services [`check`](Self::check) reaches.
    fn keys(&self) -> String {
        let redis = self.redis.as_ref().map(|_| "idempotency.redis.url");
        let database = self.database.as_ref().map(|_| "database.url");
        redis
            .into_iter()
            .chain(database)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Applies the app's pending migrations (`apply`), or refuses to start
/// while one is pending: a schema older than the code fails at the first
/// request that needs the new table, which is worse than not starting.
/// Fails with the database's error (`Ok`) or the pending ones (`Err`).
#[cfg(feature = "database")]
async fn check_app_migrations(
    migrations: &autumn_base::database::AppMigrations,
    apply: bool,
    pool: &autumn_base::database::DbPool,
) -> Result<(), Result<String, LaunchError>> {
    if apply {
        let applied = migrations
            .migrate(pool)
            .await
            .map_err(|e| Ok(e.to_string()))?;
        if applied.is_empty() {
            tracing::info!("app migrations: none pending");
        } else {
            tracing::info!("app migrations applied: {}", applied.join(", "));
        }
        return Ok(());
    }
    let pending = migrations
        .pending(pool)
        .await
        .map_err(|e| Ok(e.to_string()))?;
    if pending.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = pending
        .iter()
        .map(|m| format!("{}_{}", m.version, m.name))
        .collect();
    Err(Err(LaunchError::MigrationsPending {
        count: names.len(),
        names: names.join(", "),
    }))
}
