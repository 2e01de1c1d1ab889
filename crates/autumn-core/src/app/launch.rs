//! The one launch path shared by `run()`, `into_router()` and `TestApp`:
//! load and check the configuration, build the stores, check the routes,
//! assemble the request pipeline.

use std::collections::HashMap;
use std::sync::Arc;

use autumn_idempotency::clock::SystemClock;
use autumn_idempotency::{IdempotencyLayer, MemoryIdempotencyStore, ReplayMode};
use axum::Router;
use http::StatusCode;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use super::{AppBuilder, RawRouter};
use crate::actuator::{self, AppMetrics};
use crate::config::{AutumnConfig, Backend, ConfigError};
use crate::route::{Route, RouteIdempotency};
use crate::scope;

/// Why an app could not start. Each message is one line naming what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The configuration could not be loaded.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The memory store was chosen for a production profile.
    #[error(
        "idempotency.backend = \"memory\" is refused in production profile `{profile}`: a memory store cannot protect several replicas; set idempotency.backend = \"redis\" or \"database\" (AUTUMN_IDEMPOTENCY__BACKEND), or idempotency.allow_memory_in_production = true for a single instance"
    )]
    MemoryInProduction {
        /// The active profile.
        profile: String,
    },
    /// The Redis backend was chosen without a URL.
    #[error(
        "idempotency.backend = \"redis\" needs idempotency.redis.url (or AUTUMN_IDEMPOTENCY__REDIS__URL)"
    )]
    RedisUrlMissing,
    /// The database backend was chosen without a database.
    #[error("idempotency.backend = \"database\" needs database.url (or AUTUMN_DATABASE__URL)")]
    DatabaseMissing,
    /// The chosen backend is not part of this build.
    #[error(
        "idempotency.backend = \"{backend}\" is not available in this build of autumn-web; use idempotency.backend = \"memory\""
    )]
    BackendUnavailable {
        /// The backend that was asked for.
        backend: String,
    },
    /// A setting has a value that parses but cannot work.
    #[error("invalid {key}: {message}")]
    InvalidSetting {
        /// The config key.
        key: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// Two routes answer the same method and path.
    #[error("two routes answer {method} {path} (`{first}` and `{second}`); remove or rename one")]
    DuplicateRoute {
        /// The method.
        method: String,
        /// The path.
        path: String,
        /// The first route's name.
        first: String,
        /// The second route's name.
        second: String,
    },
    /// A route's path cannot be served.
    #[error("route `{name}` has an invalid path {path:?}: {reason}")]
    InvalidRoutePath {
        /// The route's name.
        name: String,
        /// The path.
        path: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// The server could not listen on its address.
    #[error("cannot listen on {address} (server.host / server.port): {source}")]
    Bind {
        /// The address.
        address: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("server error: {0}")]
    Serve(std::io::Error),
}

/// A built app.
pub(crate) struct Launched {
    pub(crate) router: Router,
    pub(crate) config: AutumnConfig,
}

impl AppBuilder {
    pub(crate) fn launch(self) -> Result<Launched, LaunchError> {
        let config = match self.config {
            Some(config) => config,
            None => AutumnConfig::load()?,
        };
        for setting in config.effective_settings() {
            tracing::debug!(source = %setting.source, "{} = {}", setting.key, setting.value);
        }
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let metrics = AppMetrics::default();

        let idempotency = if self.idempotent && config.idempotency.enabled {
            let store = match self.store {
                Some(store) => store,
                None => {
                    check_backend(&config)?;
                    Arc::new(MemoryIdempotencyStore::with_clock(
                        config.idempotency.ttl(),
                        clock.clone(),
                    ))
                }
            };
            warn_about_timeouts(&config);
            Some(
                IdempotencyLayer::new(store)
                    .with_ttl(config.idempotency.ttl())
                    .with_in_flight_ttl(config.idempotency.in_flight_ttl())
                    .with_max_body_bytes(config.idempotency.max_body_bytes)
                    .with_metrics(metrics.idempotency.clone())
                    .with_clock(clock.clone()),
            )
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

        let mut router = Router::new();
        for route in routes {
            let handler = match (&idempotency, route.idempotency) {
                (None, _) | (_, RouteIdempotency::Off) => route.handler,
                (Some(layer), mode) => {
                    route
                        .handler
                        .layer(layer.clone().with_replay_mode(match mode {
                            RouteIdempotency::Managed => ReplayMode::Direct,
                            RouteIdempotency::ReplayThroughInner => ReplayMode::ThroughInner,
                            _ => ReplayMode::FailClosed,
                        }))
                }
            };
            router = router.route(&route.path, handler);
        }
        for raw in self.raw {
            let opaque = |raw: Router| match &idempotency {
                Some(layer) => raw.layer(layer.clone().with_replay_mode(ReplayMode::FailClosed)),
                None => raw,
            };
            router = match raw {
                RawRouter::Merge(raw) => router.merge(opaque(raw)),
                RawRouter::Nest(path, raw) => router.nest(&path, opaque(raw)),
            };
        }
        router = router.merge(actuator::routes(metrics));

        // Innermost first: the scope is read after the app's own layers (an
        // API-token layer puts the principal there), then the app's layers,
        // then timeout and trace outermost.
        router = router.layer(scope::layer(&config)?);
        for layer in self.layers {
            router = layer(router);
        }
        if let Some(timeout) = config.server.request_timeout() {
            router = router.layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                timeout,
            ));
        }
        router = router.layer(TraceLayer::new_for_http());
        Ok(Launched { router, config })
    }
}

fn check_backend(config: &AutumnConfig) -> Result<(), LaunchError> {
    let idempotency = &config.idempotency;
    match idempotency.backend {
        Backend::Memory => {
            if config.profile.is_production() && !idempotency.allow_memory_in_production {
                return Err(LaunchError::MemoryInProduction {
                    profile: config.profile.name().to_owned(),
                });
            }
            Ok(())
        }
        Backend::Redis if idempotency.redis.url.is_none() => Err(LaunchError::RedisUrlMissing),
        Backend::Database if config.database.url.is_none() => Err(LaunchError::DatabaseMissing),
        backend => Err(LaunchError::BackendUnavailable {
            backend: backend.as_str().to_owned(),
        }),
    }
}

fn warn_about_timeouts(config: &AutumnConfig) {
    let in_flight = config.idempotency.in_flight_ttl();
    match config.server.request_timeout() {
        Some(timeout) if in_flight < timeout => tracing::warn!(
            "idempotency.in_flight_ttl_secs ({}s) is shorter than server.timeouts.request_timeout_ms ({}ms): a request still running when its lock lapses can run a second time",
            in_flight.as_secs(),
            timeout.as_millis()
        ),
        Some(_) => {}
        None => tracing::info!(
            "no server.timeouts.request_timeout_ms set: keep idempotency.in_flight_ttl_secs ({}s) longer than your slowest mutating request",
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
