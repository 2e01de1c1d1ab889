//! Phase 3: the layers around the mounted routes, from the app's own
//! layers out to the access log. The order is the pipeline ARCHITECTURE.md
//! draws; each step says why it sits where it does.

use std::sync::Arc;

use axum::Router;
use tower::ServiceBuilder;

use super::super::RouterLayer;
use super::super::error::LaunchError;
use super::super::middleware::AppService;
use crate::actuator::{self, AppMetrics};
use crate::config::{AutumnConfig, TenantStrategy};
use crate::cross_origin::CrossOriginLayer;
use crate::scope;
use crate::telemetry::metrics::HttpMetrics;
use crate::tenancy::{self, TenancyLayer};

/// What goes around the routes, from the builder and the store phase.
pub(super) struct Outer {
    /// `AppBuilder::layer`'s layers, innermost first.
    pub(super) app_layers: Vec<RouterLayer>,
    /// The OpenAPI document's route, outside the app's own layers: it
    /// tells a client what they require (a token, say), so it is fetched
    /// before the client can meet them.
    pub(super) document: Option<Router>,
    /// `AppBuilder::with_state`'s values.
    pub(super) states: crate::state::States,
    /// `AppBuilder::with_tenant_resolver`'s resolver.
    pub(super) tenant_resolver: Option<Arc<dyn crate::tenancy::TenantResolver>>,
    /// The session layer, when `[session]` is on.
    pub(super) sessions: Option<crate::session::SessionLayer>,
    /// The error pages, with the app's own pages.
    pub(super) error_pages: crate::error_pages::ErrorPagesLayer,
    /// The `RateLimits` handlers extract, when the app defines a rule.
    pub(super) rate_limits: Option<crate::rate_limit::RateLimits>,
}

/// The app as the server calls it: `router` inside every layer.
pub(super) fn assemble(
    config: &AutumnConfig,
    mut router: Router,
    http: &Arc<HttpMetrics>,
    outer: Outer,
) -> Result<AppService, LaunchError> {
    for layer in outer.app_layers {
        router = layer(router);
    }
    if let Some(document) = outer.document {
        router = router.merge(document);
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
        .map(crate::timeout::RequestTimeoutLayer::new);
    let states = (!outer.states.is_empty()).then(|| outer.states.layer());
    let rate_limits = outer.rate_limits.map(axum::Extension);
    let app = ServiceBuilder::new()
        .layer(outer.error_pages.clone())
        .layer(crate::catch_panic::CatchPanicLayer)
        .option_layer(timeout)
        .option_layer(cross_origin_layer(config)?)
        .option_layer(outer.sessions)
        .option_layer(TenancyLayer::from_config(config, outer.tenant_resolver)?)
        .layer(scope::layer(config, crate::app::client_of))
        .option_layer(states)
        .option_layer(rate_limits)
        // Once, here: a router served as a plain `Service` would
        // otherwise turn every handler and its layers into a route
        // again on each request (axum's own `serve` does the same
        // through `into_make_service`). Boxed: the router's future holds
        // the request until it is polled, and every layer above would
        // otherwise copy those few hundred bytes into its own future on
        // every request.
        .service(AppService::new(router.with_state(())));
    // The static files, CORS, compression, the access log and the request
    // metrics (see `middleware.rs`).
    let mut service = super::super::middleware::install(config, app, &outer.error_pages, http)?;
    if config.tenancy.enabled && config.tenancy.strategy == TenantStrategy::Path {
        // Before routing: the routes are matched below the tenant segment.
        let strip = tower::util::MapRequestLayer::new(tenancy::strip_path_tenant(config));
        service = AppService::new(tower::Layer::layer(&strip, service));
    }
    Ok(service)
}

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

/// `/actuator/*` unless `[actuator] enabled = false`; served apart from the
/// app when `[actuator] port` is set, so it is kept off the app's listener.
pub(super) fn actuator_routes(
    config: &AutumnConfig,
    metrics: AppMetrics,
    health: actuator::Health,
) -> Option<Router> {
    let settings = &config.actuator;
    settings.enabled.then(|| {
        let admin = &config.idempotency.admin;
        // The counters tell an outsider the app's traffic: on the public
        // port only when asked for.
        let with_metrics = settings.port.is_some() || settings.metrics_on_app_port;
        let mut routes = actuator::routes(metrics.clone(), health, with_metrics);
        // Only with a token, in every profile: the endpoint reads recorded
        // responses and evicts keys.
        if let (Some(store), Some(token), true) = (
            metrics.idempotency_store,
            admin.token.as_deref(),
            admin.serves_endpoint(),
        ) {
            routes = routes.merge(crate::key_admin::routes(store, token, admin.allow_bodies));
        }
        // Likewise: they run jobs again and delete them.
        #[cfg(feature = "database")]
        if let (Some(pool), Some(token), true) = (
            metrics.pool.clone(),
            config.jobs.admin.token.as_deref(),
            config.jobs.admin.serves_endpoints(),
        ) {
            routes = routes.merge(crate::jobs::dead_job_routes(
                pool,
                token,
                config.jobs.admin.allow_payloads,
            ));
        }
        match settings.port {
            Some(_) => routes.layer(crate::telemetry::RequestLogLayer::new(
                config.log.access_log,
                crate::app::client_of,
            )),
            None => routes,
        }
    })
}
