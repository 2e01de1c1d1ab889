//! Phase 4: the checks against live services that must pass before
//! serving. The earlier phases only record what to check here; the caller
//! runs [`Startup::check`] on the runtime that will serve (or
//! [`Startup::check_blocking`] on one of its own).

use std::sync::Arc;

use autumn_base::clock::{SharedClock, SystemClock};

use super::super::error::LaunchError;
use crate::config::AutumnConfig;

/// What must be checked against live services before serving: done by
/// `run()` on its runtime, and by `into_router()`/`TestApp` on a runtime of
/// their own, always over connections of their own.
pub(crate) struct Startup {
    /// Redis URL and key prefix to ping.
    pub(super) redis: Option<(String, String)>,
    /// Database URL to health-check and migrate.
    pub(super) database: Option<String>,
    /// The app clock, compared with the services' clocks (only Redis and
    /// PostgreSQL have one to compare with).
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    clock: SharedClock,
    /// `idempotency.in_flight_ttl_secs`: a clock difference past a tenth of
    /// it is warned about.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    in_flight_ttl: std::time::Duration,
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
            clock: Arc::new(SystemClock),
            in_flight_ttl: std::time::Duration::from_secs(60),
            #[cfg(feature = "redis")]
            live_redis: Vec::new(),
            #[cfg(feature = "redis")]
            redis_tls: autumn_base::redis::RedisTls::new(),
            checked: tokio::sync::watch::channel(false).0,
        }
    }
}

impl Startup {
    /// Nothing to check yet; the store phase adds the services it names.
    pub(super) fn new(config: &AutumnConfig, clock: SharedClock) -> Self {
        Self {
            clock,
            in_flight_ttl: config.idempotency.in_flight_ttl(),
            ..Self::default()
        }
    }

    /// Pings Redis, health-checks the database and applies the framework
    /// migrations; warns when a service's clock is far from the app's.
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
                autumn_idempotency::RedisIdempotencyStore::from_connection(connection, prefix)
                    .with_clock(self.clock.clone());
            store.ping().await.map_err(|e| redis_error(&e))?;
            match store.clock_offset_millis().await {
                Ok(ahead) => self.check_clock("Redis", &crate::config::redact(url), ahead),
                Err(error) => {
                    tracing::warn!(%error, "could not compare the app clock with Redis's")
                }
            }
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
            #[cfg(feature = "postgres")]
            match postgres_clock_offset(&pool, &self.clock).await {
                Ok(Some(ahead)) => {
                    self.check_clock("PostgreSQL", &crate::config::redact(url), ahead)
                }
                Ok(None) => {} // SQLite: the same host, the same clock.
                Err(error) => {
                    tracing::warn!(%error, "could not compare the app clock with PostgreSQL's");
                }
            }
        }
        Ok(())
    }

    /// Warns when the app clock is `ahead` ms ahead of (or behind) a
    /// service's by more than a tenth of the in-flight TTL. Expiry follows
    /// the app clock, so the service's clock decides nothing; but this
    /// host's clock being that far off means replicas likely disagree, and
    /// a replica whose clock runs ahead ends every other replica's locks
    /// early.
    #[cfg(any(feature = "redis", feature = "postgres"))]
    fn check_clock(&self, service: &str, url: &str, ahead: i64) {
        let limit = self.in_flight_ttl.as_millis() / 10;
        if u128::from(ahead.unsigned_abs()) > limit {
            let direction = if ahead > 0 { "ahead of" } else { "behind" };
            tracing::warn!(
                clock_skew_ms = ahead,
                "the app clock is {} ms {direction} {service} at {url}, more than a tenth of idempotency.in_flight_ttl_secs ({} s): locks and records expire by the app clock, so replicas whose clocks differ see locks end early or late; synchronise this host's clock (NTP), or raise idempotency.in_flight_ttl_secs",
                ahead.unsigned_abs(),
                self.in_flight_ttl.as_secs()
            );
        }
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

/// How far `clock` is ahead of PostgreSQL's `clock_timestamp()`, in ms
/// (negative: behind), against the middle of the round trip; `None` on
/// SQLite.
#[cfg(feature = "postgres")]
async fn postgres_clock_offset(
    pool: &autumn_base::database::DbPool,
    clock: &SharedClock,
) -> Result<Option<i64>, String> {
    use autumn_base::database::DbConnection;
    use diesel_async::RunQueryDsl as _;
    let DbConnection::Postgres(mut connection) = pool.get().await.map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let before = clock.now_millis();
    let database: i64 = diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
        "(extract(epoch from clock_timestamp()) * 1000)::bigint",
    ))
    .get_result(&mut *connection)
    .await
    .map_err(|e| e.to_string())?;
    let app = clock.now_millis() / 2 + before / 2;
    let offset = i128::from(app) - i128::from(database);
    Ok(Some(i64::try_from(offset).unwrap_or(if offset < 0 {
        i64::MIN
    } else {
        i64::MAX
    })))
}
