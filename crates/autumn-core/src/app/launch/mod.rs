//! The one launch path shared by `run()`, `serve()`, `into_router()` and
//! `TestApp`, in four phases, each in its own file:
//!
//! 1. [`stores`]: the configuration checked, then the database pool and
//!    every store the configuration names (idempotency, submit tokens,
//!    sessions), each refused here when it cannot work.
//! 2. [`routes`]: the app's routes checked, then mounted one by one with
//!    their policies and guards; merged routers mounted opaque.
//! 3. [`stack`]: the layers around the routes, from the app's state out to
//!    the access log.
//! 4. [`startup`]: what must be checked against live services before
//!    serving (Redis answers, the database is migrated); run by the caller
//!    on the runtime that will serve.
//!
//! Nothing here touches the network: the phases only build; the checks of
//! phase 4 run later, in `serve.rs` or on a runtime of their own.

mod routes;
mod stack;
mod startup;
mod stores;

use std::sync::Arc;

use autumn_base::clock::SystemClock;
use axum::Router;

pub(crate) use self::startup::Startup;
use super::AppBuilder;
use super::error::LaunchError;
use super::middleware::AppService;
use crate::actuator::{self, AppMetrics};
use crate::config::AutumnConfig;
use crate::telemetry::metrics::RouteLabelLayer;

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
    /// The app database, when `[database] url` names one: what the `jobs`
    /// command works on.
    #[cfg(feature = "database")]
    pub(crate) database: Option<Database>,
    /// The request metrics, whose open connections the server counts.
    pub(crate) http_metrics: Arc<crate::telemetry::metrics::HttpMetrics>,
    /// Set by the server when it starts stopping: readiness then answers 503.
    pub(crate) draining: Arc<std::sync::atomic::AtomicBool>,
    pub(crate) config: AutumnConfig,
    pub(crate) startup: Startup,
}

/// The app's database pool, when `[database] url` names one.
type Database = crate::pool::Pool;

impl AppBuilder {
    /// Builds the app in its phases (see the module documentation). Every
    /// refusal is a [`LaunchError`] naming the key or route to fix.
    pub(crate) fn launch(self) -> Result<Launched, LaunchError> {
        match self.build(Purpose::Serve)? {
            Built::App(launched) => Ok(*launched),
            Built::Document(_) => unreachable!("built to serve"),
        }
    }

    /// Builds the app as far as its OpenAPI document, whether the profile
    /// serves it or not: phases 1 and 2, then the document's bytes.
    pub(crate) fn launch_document(self) -> Result<bytes::Bytes, LaunchError> {
        match self.build(Purpose::Document)? {
            Built::Document(document) => Ok(document),
            Built::App(_) => unreachable!("built for the document"),
        }
    }

    fn build(#[allow(unused_mut)] mut self, purpose: Purpose) -> Result<Built, LaunchError> {
        let config = checked_config(self.config, self.rate_limit_rules)?;
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let mut startup = Startup::default();
        // The exporter, before anything that logs a span; not for the
        // document alone, which serves nothing to trace.
        #[cfg(feature = "otlp")]
        if config.telemetry.otlp.enabled && purpose == Purpose::Serve {
            crate::telemetry::trace::install(&config.telemetry.otlp).map_err(|error| {
                let key = "telemetry.otlp.endpoint";
                crate::config::ConfigError::InvalidValue {
                    key: key.to_owned(),
                    origin: config.source(key),
                    message: error.to_string(),
                }
            })?;
        }
        let mut metrics = AppMetrics {
            off: !config.actuator.enabled,
            ..AppMetrics::default()
        };

        // Phase 1: stores.
        let given = actuator::Given {
            idempotency: (self.idempotent && config.idempotency.enabled)
                .then_some(self.store.is_some()),
            session: self.session_store.is_some(),
        };
        let stores = stores::Stores::build(
            &config,
            stores::Given {
                idempotent: self.idempotent,
                idempotency_store: self.store,
                session_store: self.session_store,
            },
            &clock,
            &mut metrics,
            &mut startup,
        )?;

        metrics.pool.clone_from(&stores.database);
        let limiter = stores::rate_limiter(&config, &self.rate_limit_keys, &clock, &mut startup)?;
        metrics.rate_limits = limiter.as_ref().map(|limiter| limiter.metrics());
        if let Some(limiter) = &limiter {
            tracing::info!(
                rules = config.rate_limit.rules.len(),
                backend = limiter.backend(),
                "rate limits enforced"
            );
        }

        // The app's own migrations: applied, or only checked, once the
        // framework's are (phase 4).
        #[cfg(feature = "database")]
        if let Some(migrations) = self.app_migrations.take()
            && purpose == Purpose::Serve
        {
            if stores.database.is_none() {
                return Err(LaunchError::Config(
                    crate::config::ConfigError::InvalidValue {
                        key: "database.url".to_owned(),
                        origin: config.source("database.url"),
                        message: "the app's migrations need a database: set database.url"
                            .to_owned(),
                    },
                ));
            }
            let apply = config
                .database
                .migrates_on_start(config.profile.is_production());
            startup.app_migrations = Some((migrations, apply));
        }

        // The mailer: its job joins the app's hooks, its settings reach the
        // handlers, its preview pages join the routes. Not for the document
        // alone, which needs no relay configured.
        #[cfg(feature = "mail")]
        if let Some(setup) = self.mail.take()
            && purpose == Purpose::Serve
        {
            let mail = crate::mail::mount(setup, &config, stores.database.is_some())?;
            // The app's own settings, and its timeout for mail if it set one.
            self.commit_hooks = Some(match self.commit_hooks.take() {
                Some(hooks) => {
                    let settings = hooks.settings;
                    let mut merged = mail.hooks.merge(hooks);
                    merged.settings = settings;
                    merged
                }
                None => mail.hooks,
            });
            let settings = mail.settings;
            self.layers.push(Box::new(move |router| {
                router.layer(axum::Extension(settings))
            }));
            if let Some(preview) = mail.preview {
                self.raw.push(super::RawRouter::Merge(preview));
            }
        }

        // Phase 2: routes.
        let routes = routes::collect(self.routes, self.scoped)?;
        if config.static_files.dir.is_some() {
            routes::check_static_mount(&config.static_files.mount, &routes, &self.raw)?;
        }
        #[cfg(feature = "database")]
        let shared = {
            // A keyed job row is kept while its key's record lives: a
            // retry within it must find the row and queue nothing.
            let keyed_hold = std::time::Duration::from_secs(
                config
                    .idempotency
                    .ttl_secs
                    .max(config.security.submit_token.ttl_secs),
            );
            // `[jobs.schedule]` over the code's schedules; a table with no
            // hooks in code is refused there, naming its job.
            let hooks = match self.commit_hooks {
                Some(hooks) => Some(hooks.configured(&config)?),
                None if !config.jobs.schedule.is_empty() => {
                    Some(crate::jobs::CommitHooks::new().configured(&config)?)
                }
                None => None,
            };
            let hooks = hooks.map(|hooks| hooks.keyed_hold(keyed_hold));
            // What the worker does, per queue, for the actuator.
            metrics.jobs = hooks
                .as_ref()
                .filter(|_| stores.database.is_some())
                .map(|hooks| {
                    Arc::new(crate::jobs::metrics::JobMetrics::new(
                        hooks.queues().into_iter().map(|(queue, _)| queue),
                    ))
                });
            stores.shared_layers(hooks, &clock, &startup, metrics.jobs.clone())
        };
        #[cfg(not(feature = "database"))]
        let shared = stores.shared_layers();
        let openapi = config.openapi.is_served(&config.profile);
        if openapi {
            routes::check_openapi_paths(&config, &routes)?;
        }
        let (mut router, operations) = routes::mount(
            &config,
            routes,
            self.raw,
            stores.idempotency.as_ref(),
            &shared,
            limiter.as_ref(),
            &metrics.http,
            openapi || purpose == Purpose::Document,
        )?;
        let document = (openapi || purpose == Purpose::Document).then(|| {
            let security = (self.bearer, self.principal_scheme.as_ref());
            routes::openapi_document(&config, operations, security)
        });
        if purpose == Purpose::Document {
            return Ok(Built::Document(document.unwrap_or_default()));
        }
        let document = document
            .filter(|_| openapi)
            .map(|document| routes::openapi_routes(&config, document, &metrics.http));

        // The actuator, on the app's router unless it has a port of its own.
        let health = actuator::health(&config, stores.database.as_ref(), given);
        let draining = health.draining.clone();
        super::startup_log::log_startup(&config, &health);
        let actuator = match (
            stack::actuator_routes(&config, metrics.clone(), health),
            config.actuator.port,
        ) {
            (Some(routes), None) => {
                // Counted by the paths they matched, like the app's own
                // routes.
                let label = RouteLabelLayer::matched(metrics.http.clone());
                router = router.merge(routes.route_layer(label));
                None
            }
            (routes, _) => routes,
        };

        // Phase 3: the layer stack.
        let service = stack::assemble(
            &config,
            router,
            &metrics.http,
            stack::Outer {
                app_layers: self.layers,
                document,
                states: self.states,
                tenant_resolver: self.tenant_resolver,
                sessions: stores.sessions,
                error_pages: self.error_pages,
                // For handlers that count a rule themselves: whenever the
                // app defines one, enforced or disabled.
                rate_limits: (!config.rate_limit.rules.is_empty())
                    .then(|| crate::rate_limit::RateLimits::new(limiter.clone())),
            },
        )?;
        Ok(Built::App(Box::new(Launched {
            router: Router::new().fallback_service(service.clone()),
            service,
            actuator,
            idempotency_store: metrics.idempotency_store.clone(),
            #[cfg(feature = "database")]
            database: stores.database.clone(),
            http_metrics: metrics.http.clone(),
            draining,
            config,
            // Phase 4 is the caller's: `Launched::startup` runs the checks.
            startup,
        })))
    }
}

/// What a build is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// The whole app, to serve.
    Serve,
    /// Only the OpenAPI document, to write out.
    Document,
}

/// What a build gives for its [`Purpose`].
enum Built {
    App(Box<Launched>),
    Document(bytes::Bytes),
}

/// The configuration given in code, or loaded from `autumn.toml` and the
/// environment; checked either way, since one built or changed in code has
/// not been through loading's check.
fn checked_config(
    given: Option<AutumnConfig>,
    rate_limit_rules: std::collections::BTreeMap<String, crate::config::RateLimitRule>,
) -> Result<AutumnConfig, LaunchError> {
    let mut config = match given {
        Some(config) => config,
        None => AutumnConfig::load()?,
    };
    // The app's rules in code are defaults: the configuration's win.
    for (name, rule) in rate_limit_rules {
        config.rate_limit.rules.entry(name).or_insert(rule);
    }
    config.validate()?;
    for setting in config.effective_settings() {
        tracing::debug!(source = %setting.source, "{} = {}", setting.key, setting.value);
    }
    Ok(config)
}
