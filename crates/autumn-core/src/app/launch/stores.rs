//! Phase 1: the database pool and every store the configuration names
//! (idempotency, submit tokens, sessions), each refused here, with the key
//! to fix, when it cannot work: a memory store in production, a backend
//! this build lacks, a Redis URL that does not parse. Stores connect on
//! first use; what must answer before serving is left to [`Startup`].

use std::sync::Arc;

use autumn_base::clock::SharedClock;
use autumn_idempotency::seal::SecretKeys;
use autumn_idempotency::submit::SubmitTokenLayer;
use autumn_idempotency::{
    IdempotencyLayer, IdempotencyStore, MemoryIdempotencyStore, RecordSealing,
};

use super::super::error::LaunchError;
use super::{Database, Startup};
use crate::actuator::AppMetrics;
use crate::config::{AutumnConfig, Backend};
use crate::route::SharedLayers;

/// What the app was given in code, taking the place of what the
/// configuration would build.
pub(super) struct Given {
    /// `.idempotent()` was called.
    pub(super) idempotent: bool,
    /// `.with_idempotency_store(..)`.
    pub(super) idempotency_store: Option<Arc<dyn IdempotencyStore>>,
    /// `.with_session_store(..)`.
    pub(super) session_store: Option<Arc<dyn crate::session::SessionStore>>,
}

/// The stores built, as the layers that use them.
pub(super) struct Stores {
    /// The app's pool, when `[database] url` is set.
    pub(super) database: Option<Database>,
    /// The idempotency layer under `[idempotency]`'s policy, when the app
    /// is idempotent; each route narrows it to its own policy.
    pub(super) idempotency: Option<IdempotencyLayer>,
    /// The submit-token guard, when `[security.submit_token]` is on.
    submit: Option<SubmitTokenLayer>,
    /// The session layer, when `[session]` is on.
    pub(super) sessions: Option<crate::session::SessionLayer>,
}

impl Stores {
    /// Builds every store the configuration names, in the order later ones
    /// share earlier ones' connections: the pool, the idempotency store,
    /// the submit-token store (the idempotency store again when both name
    /// the same backend), the session store (on the Redis connection made
    /// before, if any).
    pub(super) fn build(
        config: &AutumnConfig,
        given: Given,
        clock: &SharedClock,
        metrics: &mut AppMetrics,
        startup: &mut Startup,
    ) -> Result<Self, LaunchError> {
        let database = database_pool(config, startup)?;
        let given_store = given.idempotency_store.is_some();
        let idempotency_store = if given.idempotent && config.idempotency.enabled {
            let store = match given.idempotency_store {
                Some(store) => store,
                None => build_store(
                    config,
                    config.idempotency.backend,
                    database.as_ref(),
                    clock,
                    startup,
                )?,
            };
            Some(store)
        } else {
            None
        };
        // Timed for the metrics, key administration's calls too.
        let timed = idempotency_store.clone().map(|store| {
            let backend = backend_label(config.idempotency.backend, given_store);
            metrics.timed_store("idempotency", backend, store)
        });
        metrics.idempotency_store.clone_from(&timed);
        let idempotency = timed
            .map(|store| idempotency_layer(config, store, clock, metrics))
            .transpose()?;
        let submit = submit_token_layer(
            config,
            idempotency_store.map(|store| (store, given_store)),
            database.as_ref(),
            clock,
            metrics,
            startup,
        )?;
        let sessions = session_layer(
            config,
            given.session_store,
            database.as_ref(),
            clock,
            startup,
        )?;
        // Last, so a store that cannot work is named before the key.
        let (idempotency, submit) = if idempotency.is_some() || submit.is_some() {
            let sealing = record_sealing(config)?;
            let idempotency = idempotency.map(|layer| layer.with_sealing(sealing.clone()));
            let submit = submit.map(|layer| layer.with_sealing(sealing));
            // One quota for both guards: tokens and records count together.
            match quota(config, clock, startup)? {
                Some(quota) => (
                    idempotency.map(|layer| layer.with_quota(quota.clone())),
                    submit.map(|layer| layer.with_quota(quota)),
                ),
                None => (idempotency, submit),
            }
        } else {
            (idempotency, submit)
        };
        Ok(Self {
            database,
            idempotency,
            submit,
            sessions,
        })
    }

    /// The layers every route gets, merged routers too: the submit-token
    /// guard, and the database pool and commit-hook queue for the handlers
    /// (see [`SharedLayers`] for how they are put on a route). The job
    /// worker starts once the startup checks passed.
    #[cfg(feature = "database")]
    pub(super) fn shared_layers(
        &self,
        commit_hooks: Option<crate::jobs::CommitHooks>,
        clock: &SharedClock,
        startup: &Startup,
        job_metrics: Option<Arc<crate::jobs::metrics::JobMetrics>>,
    ) -> SharedLayers {
        let (pool, queue) = match &self.database {
            Some(pool) => (
                Some(axum::Extension(pool.clone())),
                Some(crate::jobs::install(
                    pool,
                    clock,
                    commit_hooks,
                    startup.checked.subscribe(),
                    job_metrics,
                )),
            ),
            None => (None, None),
        };
        SharedLayers {
            pool,
            queue,
            submit: self.submit.clone(),
        }
    }

    /// The layers every route gets: without a database, the submit-token
    /// guard alone.
    #[cfg(not(feature = "database"))]
    pub(super) fn shared_layers(&self) -> SharedLayers {
        SharedLayers {
            pool: None,
            queue: None,
            submit: self.submit.clone(),
        }
    }
}

/// How the guards seal what they record: with `[security] secret_key` and
/// the keys it retired; without one, outside production, with a key made
/// for this process (and a warning, as replicas then cannot replay each
/// other's records that carry cookies).
fn record_sealing(config: &AutumnConfig) -> Result<RecordSealing, LaunchError> {
    let security = &config.security;
    let keys = match &security.secret_key {
        Some(secret) => SecretKeys::new(secret, &security.old_secret_keys).map_err(|error| {
            // The configuration check refuses short keys first.
            LaunchError::Config(crate::config::ConfigError::InvalidValue {
                key: "security.secret_key".to_owned(),
                origin: config.source("security.secret_key"),
                message: error.to_string(),
            })
        })?,
        None if config.profile.is_production() => {
            return Err(LaunchError::SecretKeyMissing {
                profile: config.profile.to_string(),
            });
        }
        None => {
            // A memory store's records die with the process that sealed
            // them: only a shared store loses replays to a per-process key.
            if config.idempotency.backend != Backend::Memory
                || config
                    .security
                    .submit_token
                    .effective_backend(&config.idempotency)
                    != Backend::Memory
            {
                tracing::warn!(
                    target: "autumn::security",
                    key = "security.secret_key",
                    "security.secret_key is not set: recorded session cookies are sealed with a key made for this process, so another replica, or this one after a restart, answers their retries with 409 instead of replaying them; set it, the same on every replica"
                );
            }
            SecretKeys::for_this_process()
        }
    };
    Ok(RecordSealing::new(keys).with_bodies(security.encrypt_recorded_bodies))
}

/// The idempotency layer on `store`, under `[idempotency]`'s policy.
fn idempotency_layer(
    config: &AutumnConfig,
    store: Arc<dyn IdempotencyStore>,
    clock: &SharedClock,
    metrics: &AppMetrics,
) -> Result<IdempotencyLayer, LaunchError> {
    warn_about_timeouts(config);
    IdempotencyLayer::new(store)
        .with_max_body_bytes(config.idempotency.max_body_bytes)
        .with_max_record_bytes(config.idempotency.max_record_bytes)
        .with_metrics(metrics.idempotency.clone())
        .with_clock(clock.clone())
        // The dev profile's 422 names the first JSON field that differs.
        .explain_mismatches(config.profile.name() == "dev")
        .with_policy(&config.idempotency.policy())
        .map_err(|error| LaunchError::InvalidIdempotencyPolicy {
            name: "[idempotency]".to_owned(),
            error,
        })
}

/// The app's pool when `[database] url` is set (connections are made on
/// first use; the startup check proves the database answers).
fn database_pool(
    config: &AutumnConfig,
    startup: &mut Startup,
) -> Result<Option<Database>, LaunchError> {
    let Some(url) = &config.database.url else {
        return Ok(None);
    };
    #[cfg(feature = "database")]
    {
        let pool = autumn_base::database::DbPool::with_statement_cache(
            url,
            config.database.pool_size as usize,
            std::time::Duration::from_millis(config.database.connect_timeout_ms),
            config.database.statement_cache,
        )
        .map_err(|e| LaunchError::Database {
            url: crate::config::redact(url),
            message: e.to_string(),
        })?;
        startup.database = Some(url.clone());
        Ok(Some(pool))
    }
    #[cfg(not(feature = "database"))]
    {
        let _ = startup;
        Err(LaunchError::Database {
            url: crate::config::redact(url),
            message: format!(
                "this build of autumn-web has no database; enable the autumn-web feature {}",
                database_feature(url)
            ),
        })
    }
}

/// The autumn-web feature a `database.url` needs, told by its scheme.
#[cfg_attr(feature = "database", allow(dead_code))]
fn database_feature(url: &str) -> &'static str {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        "`postgres`"
    } else if url.starts_with("sqlite:") || url.ends_with(".db") || url == ":memory:" {
        "`sqlite`"
    } else {
        "`postgres` or `sqlite`"
    }
}

/// Refuses a `idempotency.redis.url` that does not parse, before it is
/// taken for an unreachable server.
#[cfg(feature = "redis")]
fn check_redis_url(url: &str) -> Result<(), LaunchError> {
    autumn_base::redis::RedisConnection::check_url(url).map_err(|reason| {
        LaunchError::RedisUrlInvalid {
            url: crate::config::redact(url),
            reason,
        }
    })
}

/// The connection `[idempotency.redis]` describes (its URL and TLS files).
/// Every Redis store of the app goes through here: the one made first (the
/// idempotency store's, when there is one) is shared by the submit-token
/// and session stores, so they all use the same TLS settings and socket.
#[cfg(feature = "redis")]
fn redis_connection(
    config: &AutumnConfig,
    url: &str,
    startup: &mut Startup,
) -> Result<autumn_base::redis::RedisConnection, LaunchError> {
    check_redis_url(url)?;
    if let Some(store) = startup.live_redis.first() {
        return Ok(store.connection().clone());
    }
    let redis = &config.idempotency.redis;
    let connection = open_redis(redis, url)?;
    startup.redis_tls = redis.tls();
    Ok(connection)
}

/// A new connection to `url` with `redis`'s TLS files; a file that cannot
/// be used is an error naming its key.
#[cfg(feature = "redis")]
pub(crate) fn open_redis(
    redis: &crate::config::RedisConfig,
    url: &str,
) -> Result<autumn_base::redis::RedisConnection, LaunchError> {
    use autumn_base::redis::{RedisConnection, RedisError, TlsFile};
    let key = |file: TlsFile| match file {
        TlsFile::Ca => "idempotency.redis.tls_ca_file",
        TlsFile::Cert => "idempotency.redis.tls_cert_file",
        _ => "idempotency.redis.tls_key_file",
    };
    RedisConnection::with_tls(url, &redis.tls()).map_err(|error| match error {
        RedisError::TlsFile { file, path, reason } => LaunchError::RedisTlsFile {
            key: key(file),
            path: path.display().to_string(),
            reason,
        },
        RedisError::TlsIncomplete { missing } => LaunchError::InvalidSetting {
            key: key(missing),
            message: error.to_string(),
        },
        RedisError::TlsWithoutRediss { .. } => LaunchError::InvalidSetting {
            key: "idempotency.redis.url",
            message: error.to_string(),
        },
        other => LaunchError::Redis {
            url: crate::config::redact(url),
            // Worded as the Redis idempotency store's failures are.
            message: autumn_idempotency::StoreError::from(other).to_string(),
        },
    })
}

/// The store `[idempotency] backend` names, refusing what cannot work.
fn build_store(
    config: &AutumnConfig,
    backend: Backend,
    database: Option<&Database>,
    clock: &SharedClock,
    startup: &mut Startup,
) -> Result<Arc<dyn IdempotencyStore>, LaunchError> {
    let idempotency = &config.idempotency;
    match backend {
        Backend::Memory => {
            if config.profile.is_production() && !idempotency.allow_memory_in_production {
                return Err(LaunchError::MemoryInProduction {
                    profile: config.profile.name().to_owned(),
                });
            }
            Ok(Arc::new(memory_store(config, idempotency.ttl(), clock)?))
        }
        Backend::Redis => {
            let Some(url) = &idempotency.redis.url else {
                return Err(LaunchError::RedisUrlMissing);
            };
            #[cfg(feature = "redis")]
            {
                let store = autumn_idempotency::RedisIdempotencyStore::from_connection(
                    redis_connection(config, url, startup)?,
                    &idempotency.redis.key_prefix,
                )
                .with_clock(clock.clone());
                startup.redis = Some((url.clone(), idempotency.redis.key_prefix.clone()));
                let store = Arc::new(store);
                startup.live_redis.push(store.clone());
                Ok(store)
            }
            #[cfg(not(feature = "redis"))]
            {
                let _ = (url, startup);
                Err(LaunchError::BackendUnavailable {
                    backend: "redis".to_owned(),
                })
            }
        }
        Backend::Database => {
            let Some(pool) = database else {
                return Err(LaunchError::DatabaseMissing);
            };
            #[cfg(feature = "database")]
            {
                let store = autumn_idempotency::DbIdempotencyStore::new(pool.clone())
                    .with_clock(clock.clone());
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let _guard = runtime.enter();
                    store.spawn_sweeper(std::time::Duration::from_secs(60));
                }
                Ok(Arc::new(store))
            }
            #[cfg(not(feature = "database"))]
            match *pool {}
        }
        #[allow(unreachable_patterns)]
        backend => Err(LaunchError::BackendUnavailable {
            backend: backend.as_str().to_owned(),
        }),
    }
}

/// The app's `[rate_limit]` rules with their counts' backend, when any
/// rule is enforced: Redis shares the connection of the app's other Redis
/// stores, under `{idempotency.redis.key_prefix}:rl`.
pub(super) fn rate_limiter(
    config: &AutumnConfig,
    functions: &std::collections::HashMap<String, crate::rate_limit::RateLimitKeyFn>,
    clock: &SharedClock,
    startup: &mut Startup,
) -> Result<Option<Arc<crate::rate_limit::Limiter>>, LaunchError> {
    use crate::rate_limit::{Buckets, Limiter, MemoryBuckets};
    let settings = &config.rate_limit;
    if !settings.enabled || settings.rules.is_empty() {
        return Ok(None);
    }
    let buckets: Arc<dyn Buckets> = match settings.effective_backend(config.idempotency.backend) {
        Backend::Redis => {
            #[cfg(feature = "redis")]
            {
                let connection = counting_redis(config, "rate_limit.backend", startup)?;
                Arc::new(crate::rate_limit::RedisBuckets::new(
                    connection,
                    &format!("{}:rl", config.idempotency.redis.key_prefix),
                    clock.clone(),
                ))
            }
            #[cfg(not(feature = "redis"))]
            return Err(counting_redis(config, "rate_limit.backend", startup));
        }
        _ => Arc::new(MemoryBuckets::new(settings.max_clients, clock.clone())),
    };
    Limiter::new(
        settings,
        functions,
        buckets,
        clock.clone(),
        crate::app::client_of,
    )
    .map(|limiter| Some(Arc::new(limiter)))
    .map_err(|(key, message)| LaunchError::RateLimitRule { key, message })
}

/// The connection of a count kept on `[idempotency.redis]` (rate limits,
/// quotas), shared with the app's other Redis stores; `backend_key` is the
/// setting that chose Redis, named when no URL is set.
#[cfg(feature = "redis")]
fn counting_redis(
    config: &AutumnConfig,
    backend_key: &str,
    startup: &mut Startup,
) -> Result<autumn_base::redis::RedisConnection, LaunchError> {
    let Some(url) = &config.idempotency.redis.url else {
        return Err(no_counting_url(backend_key));
    };
    redis_connection(config, url, startup)
}

/// Without the `redis` feature: the error a count kept on Redis gets.
#[cfg(not(feature = "redis"))]
fn counting_redis(config: &AutumnConfig, backend_key: &str, _: &mut Startup) -> LaunchError {
    if config.idempotency.redis.url.is_none() {
        return no_counting_url(backend_key);
    }
    LaunchError::BackendUnavailable {
        backend: "redis".to_owned(),
    }
}

fn no_counting_url(backend_key: &str) -> LaunchError {
    LaunchError::InvalidSetting {
        key: "idempotency.redis.url",
        message: format!(
            "{backend_key} is \"redis\", which counts on the Redis [idempotency.redis] names: set its url"
        ),
    }
}

/// `[idempotency.quota]`'s limits with their counts' backend, when enabled:
/// Redis shares the connection of the app's other Redis stores, under
/// `{idempotency.redis.key_prefix}:quota`.
pub(super) fn quota(
    config: &AutumnConfig,
    clock: &SharedClock,
    startup: &mut Startup,
) -> Result<Option<autumn_idempotency::quota::Quota>, LaunchError> {
    use autumn_idempotency::quota::{MemoryQuotaLedger, Quota, QuotaLedger, QuotaLimits};
    let settings = &config.idempotency.quota;
    if !settings.enabled {
        return Ok(None);
    }
    let ledger: Arc<dyn QuotaLedger> = match settings.effective_backend(config.idempotency.backend)
    {
        Backend::Redis => {
            #[cfg(feature = "redis")]
            {
                let connection = counting_redis(config, "idempotency.quota.backend", startup)?;
                Arc::new(
                    autumn_idempotency::quota::RedisQuotaLedger::new(
                        connection,
                        &format!("{}:quota", config.idempotency.redis.key_prefix),
                    )
                    .with_clock(clock.clone()),
                )
            }
            #[cfg(not(feature = "redis"))]
            return Err(counting_redis(config, "idempotency.quota.backend", startup));
        }
        _ => Arc::new(MemoryQuotaLedger::new(settings.max_callers).with_clock(clock.clone())),
    };
    Ok(Some(Quota::new(
        ledger,
        QuotaLimits {
            max_records: settings.max_records,
            max_bytes: settings.max_bytes,
        },
    )))
}

/// The `backend` label of a store's timings: the configured backend, or
/// `custom` for a store given in code.
fn backend_label(backend: Backend, given: bool) -> &'static str {
    if given { "custom" } else { backend.as_str() }
}

/// The submit-token layer `[security.submit_token]` describes, on the
/// idempotency store (and whether it was given in code) when both name the
/// same backend.
fn submit_token_layer(
    config: &AutumnConfig,
    idempotency_store: Option<(Arc<dyn IdempotencyStore>, bool)>,
    database: Option<&Database>,
    clock: &SharedClock,
    metrics: &mut AppMetrics,
    startup: &mut Startup,
) -> Result<Option<SubmitTokenLayer>, LaunchError> {
    let tokens = &config.security.submit_token;
    if !tokens.enabled {
        return Ok(None);
    }
    let backend = tokens.effective_backend(&config.idempotency);
    if tokens.backend == Some(Backend::Memory) && config.profile.is_production() {
        return Err(LaunchError::SubmitTokenMemoryInProduction {
            profile: config.profile.name().to_owned(),
        });
    }
    // Inherited from `[idempotency]`, on a store of its own or on the one
    // `.idempotent()` shares: either way one process's memory.
    if backend == Backend::Memory && config.profile.is_production() {
        tracing::warn!(
            "submit tokens use a memory store in production profile `{}`: a double submit that reaches another replica runs twice; set idempotency.backend or security.submit_token.backend to \"redis\" or \"database\"",
            config.profile
        );
    }
    let (store, given): (Arc<dyn IdempotencyStore>, _) = match idempotency_store {
        Some((store, given)) if backend == config.idempotency.backend => (store, given),
        _ if backend == Backend::Memory => (
            Arc::new(memory_store(config, tokens_ttl(config), clock)?),
            false,
        ),
        _ => (
            build_store(config, backend, database, clock, startup)?,
            false,
        ),
    };
    metrics.submit_token_store = Some(store.clone());
    let store = metrics.timed_store("submit_token", backend_label(backend, given), store);
    Ok(Some(
        SubmitTokenLayer::new(store)
            .with_field_name(tokens.field_name.as_str())
            .with_ttl(tokens_ttl(config))
            .with_in_flight_ttl(std::time::Duration::from_secs(tokens.in_flight_ttl_secs))
            .with_exempt_paths(tokens.exempt_paths.clone())
            .with_max_form_bytes(tokens.max_form_bytes)
            .with_max_record_bytes(tokens.max_record_bytes)
            .with_in_flight_wait(std::time::Duration::from_millis(tokens.in_flight_wait_ms))
            .with_metrics(metrics.submit_token.clone()),
    ))
}

/// The most sessions the memory backend keeps.
const MEMORY_SESSIONS: usize = 100_000;

/// The session layer `[session]` describes, on the backend it names (or
/// `idempotency.backend`'s), sharing the app's connections.
fn session_layer(
    config: &AutumnConfig,
    given: Option<Arc<dyn crate::session::SessionStore>>,
    database: Option<&Database>,
    clock: &SharedClock,
    startup: &mut Startup,
) -> Result<Option<crate::session::SessionLayer>, LaunchError> {
    use crate::session::{MemorySessionStore, SessionLayer, SessionStore};
    let sessions = &config.session;
    if !sessions.enabled {
        return Ok(None);
    }
    let store: Arc<dyn SessionStore> = match given {
        Some(store) => store,
        None => match sessions.effective_backend(&config.idempotency) {
            Backend::Memory => {
                if config.profile.is_production() && !sessions.allow_memory_in_production {
                    return Err(LaunchError::SessionMemoryInProduction {
                        profile: config.profile.name().to_owned(),
                    });
                }
                let store: Arc<dyn SessionStore> =
                    Arc::new(MemorySessionStore::new(MEMORY_SESSIONS));
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let _guard = runtime.enter();
                    crate::session::spawn_sweeper(
                        store.clone(),
                        clock.clone(),
                        SESSION_SWEEP_EVERY,
                    );
                }
                store
            }
            Backend::Redis => redis_sessions(config, startup)?,
            Backend::Database => database_sessions(database, clock)?,
            #[allow(unreachable_patterns)]
            backend => {
                return Err(LaunchError::SessionBackendUnavailable {
                    backend: backend.as_str().to_owned(),
                });
            }
        },
    };
    Ok(Some(
        SessionLayer::new(store)
            // The layer names the cookie by the rule of
            // `SessionConfig::effective_cookie_name`, as the scope layer reads it.
            .with_cookie_name(sessions.cookie_name.as_str())
            .with_ttl(sessions.ttl())
            .with_absolute_ttl(sessions.absolute_ttl())
            .with_same_site(sessions.same_site)
            .with_secure(sessions.is_secure())
            .with_clock(clock.clone()),
    ))
}

/// Sessions in Redis, on the connection the idempotency or submit-token
/// store already has when there is one, under
/// `{idempotency.redis.key_prefix}:session`.
fn redis_sessions(
    config: &AutumnConfig,
    startup: &mut Startup,
) -> Result<Arc<dyn crate::session::SessionStore>, LaunchError> {
    let redis = &config.idempotency.redis;
    let Some(url) = &redis.url else {
        return Err(LaunchError::RedisUrlMissing);
    };
    #[cfg(feature = "redis")]
    {
        let connection = redis_connection(config, url, startup)?;
        if startup.redis.is_none() {
            startup.redis = Some((url.clone(), redis.key_prefix.clone()));
        }
        let prefix = format!("{}:session", redis.key_prefix);
        Ok(Arc::new(crate::session::RedisSessionStore::new(
            connection, &prefix,
        )))
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = (url, startup);
        Err(LaunchError::SessionBackendUnavailable {
            backend: "redis".to_owned(),
        })
    }
}

/// Sessions in the app database's `autumn_sessions` table, swept by one
/// replica at a time.
fn database_sessions(
    database: Option<&Database>,
    clock: &SharedClock,
) -> Result<Arc<dyn crate::session::SessionStore>, LaunchError> {
    let Some(pool) = database else {
        return Err(LaunchError::DatabaseMissing);
    };
    #[cfg(feature = "database")]
    {
        let store = crate::session::DbSessionStore::new(pool.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let _guard = runtime.enter();
            store.spawn_sweeper(SESSION_SWEEP_EVERY, clock.clone());
        }
        Ok(Arc::new(store))
    }
    #[cfg(not(feature = "database"))]
    {
        let _ = clock;
        match *pool {}
    }
}

/// How often expired sessions are removed from stores that keep them.
const SESSION_SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// A memory store within `[idempotency.memory]`'s limits.
fn memory_store(
    config: &AutumnConfig,
    ttl: std::time::Duration,
    clock: &SharedClock,
) -> Result<MemoryIdempotencyStore, LaunchError> {
    let limits = &config.idempotency.memory;
    let at_least_one = |key, value: usize| {
        if value == 0 {
            Err(LaunchError::InvalidSetting {
                key,
                message: "must be at least 1: a memory store with no room refuses every request"
                    .to_owned(),
            })
        } else {
            Ok(())
        }
    };
    at_least_one("idempotency.memory.max_entries", limits.max_entries)?;
    at_least_one("idempotency.memory.max_bytes", limits.max_bytes)?;
    Ok(MemoryIdempotencyStore::new(ttl)
        .with_clock(clock.clone())
        .with_max_entries(limits.max_entries)
        .with_max_bytes(limits.max_bytes))
}

fn tokens_ttl(config: &AutumnConfig) -> std::time::Duration {
    std::time::Duration::from_secs(config.security.submit_token.ttl_secs)
}

fn warn_about_timeouts(config: &AutumnConfig) {
    let in_flight = config.idempotency.in_flight_ttl();
    match config.server.request_timeout() {
        Some(timeout) if in_flight < timeout => tracing::warn!(
            "idempotency.in_flight_ttl_secs ({}s) is shorter than server.timeouts.request_timeout_ms ({}ms): running handlers renew their lock, but on a store that cannot (no renew_lock) a request still running when its lock lapses can run a second time",
            in_flight.as_secs(),
            timeout.as_millis()
        ),
        Some(_) => {}
        None => tracing::info!(
            "no server.timeouts.request_timeout_ms set: running handlers renew their lock, but on a store that cannot (no renew_lock) keep idempotency.in_flight_ttl_secs ({}s) longer than your slowest mutating request",
            in_flight.as_secs()
        ),
    }
}

#[cfg(test)]
mod feature_message_tests {
    //! The messages a build without a backend's feature gives. Test builds
    //! have every feature, so these check the text rather than the launch.

    use super::*;

    #[test]
    fn a_missing_backend_names_the_feature_to_enable() {
        let message = LaunchError::BackendUnavailable {
            backend: "redis".into(),
        }
        .to_string();
        assert!(
            message.contains("enable the autumn-web feature `redis`"),
            "{message}"
        );
        let message = LaunchError::SessionBackendUnavailable {
            backend: "redis".into(),
        }
        .to_string();
        assert!(
            message.contains("enable the autumn-web feature `redis`"),
            "{message}"
        );
        let message = LaunchError::SessionBackendUnavailable {
            backend: "database".into(),
        }
        .to_string();
        assert!(
            message.contains("enable the autumn-web feature `postgres` or `sqlite`"),
            "{message}"
        );
    }

    #[test]
    fn a_database_url_names_the_feature_its_scheme_needs() {
        assert_eq!(database_feature("postgres://u:p@db/app"), "`postgres`");
        assert_eq!(database_feature("postgresql://db/app"), "`postgres`");
        assert_eq!(database_feature("sqlite://data/app.db"), "`sqlite`");
        assert_eq!(database_feature("data/app.db"), "`sqlite`");
        assert_eq!(database_feature("mysql://db"), "`postgres` or `sqlite`");
    }
}
