//! The one launch path shared by `run()`, `into_router()` and `TestApp`:
//! load and check the configuration, build the stores, check the routes,
//! assemble the request pipeline.

use std::collections::HashMap;
use std::sync::Arc;

use autumn_base::clock::{SharedClock, SystemClock};
use autumn_idempotency::submit::SubmitTokenLayer;
use autumn_idempotency::{IdempotencyLayer, MemoryIdempotencyStore, ReplayGuardLayer, ReplayMode};
use axum::Router;
use tower::ServiceBuilder;

use super::error::LaunchError;
use super::middleware::AppService;
use super::{AppBuilder, RawRouter};
use crate::actuator::{self, AppMetrics};
use crate::config::{AutumnConfig, Backend, TenantStrategy, redact};
use crate::cross_origin::CrossOriginLayer;
use crate::route::{Route, RouteIdempotency, RouteStack, SharedLayers};
use crate::scope;
use crate::tenancy::{self, TenancyLayer};

/// A built app.
pub(crate) struct Launched {
    /// The app as a router, for `into_router()` and `TestApp`.
    pub(crate) router: Router,
    /// The same app as the server calls it, without a router around it
    /// (whose fallback would clone the whole stack on every request).
    pub(crate) service: AppService,
    /// `/actuator/*` when `[actuator] port` serves it apart from the app.
    pub(crate) actuator: Option<Router>,
    /// The store of the idempotency layer, when it is on: the one key
    /// administration works on.
    pub(crate) idempotency_store: Option<Arc<dyn autumn_idempotency::IdempotencyStore>>,
    pub(crate) config: AutumnConfig,
    pub(crate) startup: Startup,
}

/// What must be checked against live services before serving: done by
/// `run()` on its runtime, and by `into_router()`/`TestApp` on a runtime of
/// their own, always over connections of their own.
pub(crate) struct Startup {
    /// Redis URL and key prefix to ping.
    redis: Option<(String, String)>,
    /// Database URL to health-check and migrate.
    database: Option<String>,
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
    live_redis: Vec<Arc<autumn_idempotency::RedisIdempotencyStore>>,
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
            checked: tokio::sync::watch::channel(false).0,
        }
    }
}

impl Startup {
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
                url: redact(url),
                message: e.to_string(),
            };
            let store = autumn_idempotency::RedisIdempotencyStore::new(url, prefix)
                .map_err(|e| redis_error(&e))?
                .with_clock(self.clock.clone());
            store.ping().await.map_err(|e| redis_error(&e))?;
            match store.clock_offset_millis().await {
                Ok(ahead) => self.check_clock("Redis", &redact(url), ahead),
                Err(error) => {
                    tracing::warn!(%error, "could not compare the app clock with Redis's")
                }
            }
        }
        #[cfg(feature = "database")]
        if let Some(url) = &self.database {
            use autumn_base::database::DbPool;
            let database_error = |e: &dyn std::fmt::Display| LaunchError::Database {
                url: redact(url),
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
                Ok(Some(ahead)) => self.check_clock("PostgreSQL", &redact(url), ahead),
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

impl AppBuilder {
    pub(crate) fn launch(self) -> Result<Launched, LaunchError> {
        let config = match self.config {
            Some(config) => config,
            None => AutumnConfig::load()?,
        };
        // A configuration built or changed in code has not been through loading's check.
        config.validate()?;
        for setting in config.effective_settings() {
            tracing::debug!(source = %setting.source, "{} = {}", setting.key, setting.value);
        }
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let mut metrics = AppMetrics::default();

        let mut startup = Startup {
            clock: clock.clone(),
            in_flight_ttl: config.idempotency.in_flight_ttl(),
            ..Startup::default()
        };
        let database = database_pool(&config, &mut startup)?;
        let mut idempotency_store = None;
        let given = actuator::Given {
            idempotency: (self.idempotent && config.idempotency.enabled)
                .then_some(self.store.is_some()),
            session: self.session_store.is_some(),
        };
        let idempotency = if self.idempotent && config.idempotency.enabled {
            let store = match self.store {
                Some(store) => store,
                None => build_store(
                    &config,
                    config.idempotency.backend,
                    database.as_ref(),
                    &clock,
                    &mut startup,
                )?,
            };
            idempotency_store = Some(store.clone());
            metrics.idempotency_store = Some(store.clone());
            warn_about_timeouts(&config);
            // The dev profile's 422 names the first JSON field that differs.
            let layer = IdempotencyLayer::new(store)
                .with_max_body_bytes(config.idempotency.max_body_bytes)
                .with_max_record_bytes(config.idempotency.max_record_bytes)
                .with_metrics(metrics.idempotency.clone())
                .with_clock(clock.clone())
                .explain_mismatches(config.profile.name() == "dev");
            let layer = layer
                .with_policy(&config.idempotency.policy())
                .map_err(|error| LaunchError::InvalidIdempotencyPolicy {
                    name: "[idempotency]".to_owned(),
                    error,
                })?;
            Some(layer)
        } else {
            None
        };

        let mut routes = self.routes;
        for (prefix, scoped) in self.scoped {
            routes.extend(scoped.into_iter().map(|mut route| {
                route.path = join(&prefix, &route.path).into();
                route
            }));
        }
        check_routes(&routes)?;
        if config.static_files.dir.is_some() {
            check_static_mount(&config.static_files.mount, &routes, &self.raw)?;
        }

        // On every route, merged routers too: the submit-token guard, with
        // the database pool and the commit-hook queue for the handlers (see
        // `SharedLayers` and `RouteStack` for how they are put on a route).
        let submit = submit_token_layer(
            &config,
            idempotency_store,
            database.as_ref(),
            &clock,
            &mut metrics,
            &mut startup,
        )?;
        #[cfg(feature = "database")]
        let (pool, queue) = match &database {
            Some(pool) => (
                Some(axum::Extension(pool.clone())),
                Some(crate::jobs::install(
                    pool,
                    &clock,
                    self.commit_hooks,
                    startup.checked.subscribe(),
                )),
            ),
            None => (None, None),
        };
        #[cfg(not(feature = "database"))]
        let (pool, queue) = (None, None);
        let shared = SharedLayers {
            pool,
            queue,
            submit,
        };
        let mut router = Router::new();
        for route in routes {
            let path = route.path.clone();
            // A macro route is replayed directly only while nothing runs
            // between the guard and its handler: with route-local layers (an
            // auth check, say) a direct replay would answer around them, so
            // such a route fails closed like a hand-built one.
            let kind = match route.idempotency {
                RouteIdempotency::Managed if route.layer_count() > 0 => RouteIdempotency::Opaque,
                kind => kind,
            };
            // Innermost first: the handler, the replay guard (so a forwarded
            // retry that nothing answered never reaches the handler, even
            // when a route-local layer rebuilt the request), the route's own
            // layers (a ReplayThroughInner route's replay layer among them),
            // then the idempotency layer.
            let idempotency = route_policy(&config, idempotency.as_ref(), &route, kind)?;
            let (guard, opaque_guard) = match (idempotency, kind) {
                (None, _) | (_, RouteIdempotency::Off) => (None, None),
                (Some(layer), RouteIdempotency::Managed) => {
                    (Some(layer.with_replay_mode(ReplayMode::Direct)), None)
                }
                (Some(layer), RouteIdempotency::ReplayThroughInner) => {
                    (Some(layer.with_replay_mode(ReplayMode::ThroughInner)), None)
                }
                // Opaque: a record marked for replay inside the route (made
                // before the route changed) would be forwarded into it with
                // nothing there to answer. A second guard refuses it (409)
                // before the route's own layers run, too.
                (Some(layer), _) => (
                    Some(layer.with_replay_mode(ReplayMode::FailClosed)),
                    Some(ReplayGuardLayer::for_route(path.clone())),
                ),
            };
            // All of the framework's layers in one call: each `layer` call
            // boxes the route once more, and each box is cloned per request.
            let stack = RouteStack {
                shared: shared.clone(),
                idempotency: guard,
                opaque_guard,
                inner_guard: ReplayGuardLayer::for_route(path.clone()),
            };
            let handler = if route.layer_count() == 0 {
                route.into_stacked(stack)
            } else {
                route.into_layered(stack)
            };
            router = router.route(&path, handler);
        }
        for raw in self.raw {
            let opaque = |raw: Router| {
                let raw = match &idempotency {
                    Some(layer) => {
                        raw.layer(layer.clone().with_replay_mode(ReplayMode::FailClosed))
                    }
                    None => raw,
                };
                if shared.is_empty() {
                    raw
                } else {
                    raw.layer(shared.layers())
                }
            };
            router = match raw {
                RawRouter::Merge(raw) => router.merge(opaque(raw)),
                RawRouter::Nest(path, raw) => router.nest(&path, opaque(raw)),
            };
        }
        let health = actuator::health(&config, database.as_ref(), given);
        super::startup_log::log_startup(&config, &health);
        let actuator = actuator_routes(&config, metrics.clone(), health);
        let actuator = match (actuator, config.actuator.port) {
            (Some(routes), None) => {
                router = router.merge(routes);
                None
            }
            (routes, _) => routes,
        };
        let sessions = session_layer(
            &config,
            self.session_store,
            database.as_ref(),
            &clock,
            &mut startup,
        )?;

        for layer in self.layers {
            router = layer(router);
        }
        // Outermost first: errors as each client expects them (every error
        // passes through, the timeout's 408 too), a panic outside the guards
        // caught inside them and answered 500, the timeout, the
        // cross-origin check (so a forged request reaches none of the app's
        // code and no store), then the session, the tenant and the scope
        // (an idempotency layer the app adds gets the same scope as
        // Autumn's; the tenant is resolved before the scope reads it, from
        // a session already there), and the app's state, outside the app's
        // layers so its middleware reads it too.
        let timeout = config
            .server
            .request_timeout()
            .map(super::timeout::RequestTimeoutLayer::new);
        let states = (!self.states.is_empty()).then(|| self.states.layer());
        let app = ServiceBuilder::new()
            .layer(self.error_pages.clone())
            .layer(crate::error_pages::catch_panic::CatchPanicLayer)
            .option_layer(timeout)
            .option_layer(cross_origin_layer(&config)?)
            .option_layer(sessions)
            .option_layer(TenancyLayer::from_config(&config, self.tenant_resolver)?)
            .layer(scope::layer(&config))
            .option_layer(states)
            // Once, here: a router served as a plain `Service` would
            // otherwise turn every handler and its layers into a route
            // again on each request (axum's own `serve` does the same
            // through `into_make_service`). Boxed: the router's future holds the request until it is
            // polled, and every layer above would otherwise copy those
            // few hundred bytes into its own future on every request.
            .service(AppService::new(router.with_state(())));
        let mut service = super::middleware::install(&config, app, &self.error_pages)?;
        if config.tenancy.enabled && config.tenancy.strategy == TenantStrategy::Path {
            // Before routing: the routes are matched below the tenant segment.
            let strip = tower::util::MapRequestLayer::new(tenancy::strip_path_tenant(&config));
            service = AppService::new(tower::Layer::layer(&strip, service));
        }
        Ok(Launched {
            router: Router::new().fallback_service(service.clone()),
            service,
            actuator,
            idempotency_store: metrics.idempotency_store.clone(),
            config,
            startup,
        })
    }
}

type Database = crate::pool::Pool;

/// `/actuator/*` unless `[actuator] enabled = false`; served apart from the
/// app when `[actuator] port` is set, so it is kept off the app's listener.
fn actuator_routes(
    config: &AutumnConfig,
    metrics: AppMetrics,
    health: actuator::Health,
) -> Option<Router> {
    let settings = &config.actuator;
    settings.enabled.then(|| {
        let admin = &config.idempotency.admin;
        let store = metrics
            .idempotency_store
            .clone()
            .filter(|_| admin.is_enabled(config.profile.is_production()));
        let mut routes = actuator::routes(metrics, health);
        if let Some(store) = store {
            routes = routes.merge(crate::key_admin::routes(store, admin.token.as_deref()));
        }
        match settings.port {
            Some(_) => routes.layer(crate::telemetry::RequestLogLayer::new(
                config.log.access_log,
            )),
            None => routes,
        }
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
            url: redact(url),
            message: e.to_string(),
        })?;
        startup.database = Some(url.clone());
        Ok(Some(pool))
    }
    #[cfg(not(feature = "database"))]
    {
        let _ = startup;
        Err(LaunchError::Database {
            url: redact(url),
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
            url: redact(url),
            reason,
        }
    })
}

/// The store `[idempotency] backend` names, refusing what cannot work.
fn build_store(
    config: &AutumnConfig,
    backend: Backend,
    database: Option<&Database>,
    clock: &autumn_base::clock::SharedClock,
    startup: &mut Startup,
) -> Result<Arc<dyn autumn_idempotency::IdempotencyStore>, LaunchError> {
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
                check_redis_url(url)?;
                let store = autumn_idempotency::RedisIdempotencyStore::new(
                    url,
                    &idempotency.redis.key_prefix,
                )
                .map_err(|e| LaunchError::Redis {
                    url: redact(url),
                    message: e.to_string(),
                })?
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

/// The submit-token layer `[security.submit_token]` describes, on the
/// idempotency store when both name the same backend.
fn submit_token_layer(
    config: &AutumnConfig,
    idempotency_store: Option<Arc<dyn autumn_idempotency::IdempotencyStore>>,
    database: Option<&Database>,
    clock: &autumn_base::clock::SharedClock,
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
    let store = match idempotency_store {
        Some(store) if backend == config.idempotency.backend => store,
        _ if backend == Backend::Memory => {
            Arc::new(memory_store(config, tokens_ttl(config), clock)?)
        }
        _ => build_store(config, backend, database, clock, startup)?,
    };
    metrics.submit_token_store = Some(store.clone());
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
    clock: &autumn_base::clock::SharedClock,
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
            .with_cookie_name(sessions.cookie_name.as_str())
            .with_ttl(sessions.ttl())
            .with_same_site(sessions.same_site)
            .with_secure(sessions.secure.unwrap_or(config.profile.is_production()))
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
        check_redis_url(url)?;
        let connection = match startup.live_redis.first() {
            Some(store) => store.connection().clone(),
            None => {
                autumn_base::redis::RedisConnection::new(url).map_err(|e| LaunchError::Redis {
                    url: redact(url),
                    // Worded as the Redis idempotency store's failures are.
                    message: autumn_idempotency::StoreError::from(e).to_string(),
                })?
            }
        };
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
    clock: &autumn_base::clock::SharedClock,
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

/// The cross-origin check `[security.cross_origin]` describes.
fn cross_origin_layer(config: &AutumnConfig) -> Result<Option<CrossOriginLayer>, LaunchError> {
    let settings = &config.security.cross_origin;
    if !settings.enabled {
        return Ok(None);
    }
    Ok(Some(
        CrossOriginLayer::new()
            .with_trusted_origins(config.trusted_origins()?)
            .with_exempt_paths(settings.exempt_paths.clone()),
    ))
}

/// A memory store within `[idempotency.memory]`'s limits.
pub(crate) fn memory_store(
    config: &AutumnConfig,
    ttl: std::time::Duration,
    clock: &autumn_base::clock::SharedClock,
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

fn join(prefix: &str, path: &str) -> String {
    let prefix = prefix.trim_end_matches('/');
    match path {
        "/" if !prefix.is_empty() => prefix.to_owned(),
        _ => format!("{prefix}{path}"),
    }
}

/// The static files' mount must not cover a route of the app (the router
/// would refuse the overlap at startup with a panic, not a message).
fn check_static_mount(mount: &str, routes: &[Route], raw: &[RawRouter]) -> Result<(), LaunchError> {
    let mount = mount.trim_end_matches('/');
    let covered = |path: &str| {
        path == mount
            || path
                .strip_prefix(mount)
                .is_some_and(|below| below.starts_with('/'))
    };
    let clash = routes
        .iter()
        .map(|route| route.path.as_ref())
        .chain(raw.iter().filter_map(|raw| match raw {
            RawRouter::Nest(path, _) => Some(path.as_str()),
            RawRouter::Merge(_) => None,
        }))
        .find(|path| covered(path));
    match clash {
        Some(path) => Err(LaunchError::InvalidSetting {
            key: "static.mount",
            message: format!(
                "{mount:?} covers the app's route {path:?}; serve the static files under another path"
            ),
        }),
        None => Ok(()),
    }
}

/// The app's idempotency layer under `route`'s own policy, which falls back
/// to `[idempotency]` field by field; refuses a policy that cannot work, and
/// a required key no layer would check.
fn route_policy(
    config: &AutumnConfig,
    layer: Option<&IdempotencyLayer>,
    route: &Route,
    kind: RouteIdempotency,
) -> Result<Option<IdempotencyLayer>, LaunchError> {
    let policy = &route.policy;
    if let Some(warning) = policy.in_flight_wait.and_then(|wait| {
        config.wait_outlasts_timeout(
            &format!(
                "route `{}` ({} {}) in_flight_wait_ms",
                route.name, route.method, route.path
            ),
            wait,
        )
    }) {
        tracing::warn!("{warning}");
    }
    let layer = match layer {
        Some(layer) if kind != RouteIdempotency::Off => layer,
        _ if policy.key == Some(autumn_idempotency::KeyRequirement::Required) => {
            return Err(LaunchError::KeyRequiredWithoutLayer {
                name: route.name.to_string(),
                method: route.method.to_string(),
                path: route.path.to_string(),
            });
        }
        _ => return Ok(None),
    };
    if policy.is_empty() {
        return Ok(Some(layer.clone()));
    }
    layer
        .clone()
        .with_policy(policy)
        .map(Some)
        .map_err(|error| LaunchError::InvalidIdempotencyPolicy {
            name: format!("route `{}` ({} {})", route.name, route.method, route.path),
            error,
        })
}

fn check_routes(routes: &[Route]) -> Result<(), LaunchError> {
    let mut seen: HashMap<(&http::Method, &str), &str> = HashMap::new();
    for route in routes {
        let invalid = |reason| LaunchError::InvalidRoutePath {
            name: route.name.to_string(),
            path: route.path.to_string(),
            reason,
        };
        if !route.path.starts_with('/') {
            return Err(invalid("a path must start with `/`"));
        }
        if route
            .path
            .split('/')
            .any(|segment| segment.starts_with(':') || segment.starts_with('*'))
        {
            return Err(invalid(
                "write path parameters as `{name}` and wildcards as `{*name}`",
            ));
        }
        if let Some(first) = seen.insert((&route.method, &route.path), &route.name) {
            return Err(LaunchError::DuplicateRoute {
                method: route.method.to_string(),
                path: route.path.to_string(),
                first: first.to_owned(),
                second: route.name.to_string(),
            });
        }
    }
    Ok(())
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
