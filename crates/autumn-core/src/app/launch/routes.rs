//! Phase 2: the app's routes checked (paths, duplicates, the static
//! files' mount), then mounted one by one, each under its own idempotency
//! policy with the guards its kind needs; merged and nested routers mounted
//! opaque.

use std::collections::HashMap;
use std::sync::Arc;

use autumn_idempotency::{IdempotencyLayer, ReplayGuardLayer, ReplayMode};
use axum::Router;
use tower::util::option_layer;

use super::super::RawRouter;
use super::super::error::LaunchError;
use crate::config::AutumnConfig;
use crate::openapi::OperationSource;
use crate::rate_limit::Limiter;
use crate::route::{Route, RouteIdempotency, RouteStack, SharedLayers};
use crate::telemetry::metrics::{HttpMetrics, RouteLabelLayer};

/// The app's routes, scoped ones under their prefix, checked.
pub(super) fn collect(
    mut routes: Vec<Route>,
    scoped: Vec<(String, Vec<Route>)>,
) -> Result<Vec<Route>, LaunchError> {
    for (prefix, scoped) in scoped {
        routes.extend(scoped.into_iter().map(|mut route| {
            route.path = join(&prefix, &route.path).into();
            route
        }));
    }
    check_routes(&routes)?;
    Ok(routes)
}

/// Mounts every route with its stack (see [`RouteStack`]), labelled for
/// the request metrics with its path, then the raw routers, which the guard
/// cannot see into and so fail closed, and which are labelled by the path
/// each request matched. With `described`, also says what the OpenAPI
/// document needs of each route (raw routers are not in it).
#[expect(
    clippy::too_many_arguments,
    reason = "one call, from the launch, with what it built before"
)]
pub(super) fn mount(
    config: &AutumnConfig,
    routes: Vec<Route>,
    raw: Vec<RawRouter>,
    idempotency: Option<&IdempotencyLayer>,
    shared: &SharedLayers,
    limiter: Option<&Arc<Limiter>>,
    http: &Arc<HttpMetrics>,
    described: bool,
) -> Result<(Router, Vec<OperationSource>), LaunchError> {
    let mut router = Router::new();
    let mut operations = Vec::new();
    for route in routes {
        let path = route.path.clone();
        let rate_limit = match limiter {
            Some(limiter) => limiter
                .for_route(&route.method, &path, route.rate_limit.as_deref())
                .map_err(|message| LaunchError::InvalidSetting {
                    key: "rate_limit.rules",
                    message,
                })?,
            None => None,
        };
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
        let policy = route_policy(config, idempotency, &route, kind)?;
        let (guard, opaque_guard) = match (policy, kind) {
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
        if described {
            operations.push(OperationSource {
                method: route.method.clone(),
                path: path.to_string(),
                name: route.name.to_string(),
                describe: route.describe,
                guard: guard.as_ref().map(IdempotencyLayer::describe),
                rate_limited: rate_limit.is_some(),
            });
        }
        // All of the framework's layers in one call: each `layer` call
        // boxes the route once more, and each box is cloned per request.
        let stack = RouteStack {
            label: RouteLabelLayer::fixed(http.route(&path)),
            rate_limit,
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
    for raw in raw {
        // In one `layer` call, so one box: the label (a fallback's request
        // has no matched path and is counted unmatched), the shared
        // layers, then the guard.
        let opaque = |raw: Router| {
            let guard =
                idempotency.map(|layer| layer.clone().with_replay_mode(ReplayMode::FailClosed));
            raw.layer((
                RouteLabelLayer::matched(Arc::clone(http)),
                option_layer(limiter.and_then(|limiter| limiter.for_router())),
                shared.layers(),
                option_layer(guard),
            ))
        };
        router = match raw {
            RawRouter::Merge(raw) => router.merge(opaque(raw)),
            RawRouter::Nest(path, raw) => router.nest(&path, opaque(raw)),
        };
    }
    Ok((router, operations))
}

/// `prefix` and `path` as one path, without a doubled or trailing `/`.
fn join(prefix: &str, path: &str) -> String {
    let prefix = prefix.trim_end_matches('/');
    match path {
        "/" if !prefix.is_empty() => prefix.to_owned(),
        _ => format!("{prefix}{path}"),
    }
}

/// `[openapi] path`, and the interactive page's paths when it is served,
/// must not be `GET` routes of the app's own.
pub(super) fn check_openapi_paths(
    config: &AutumnConfig,
    routes: &[Route],
) -> Result<(), LaunchError> {
    let settings = &config.openapi;
    let document = std::iter::once(("openapi.path", settings.path.clone()));
    let page = settings
        .ui
        .then(|| crate::openapi::ui::paths(&settings.ui_path))
        .into_iter()
        .flatten()
        .map(|path| ("openapi.ui_path", path));
    for (key, path) in document.chain(page) {
        if let Some(route) = routes
            .iter()
            .find(|route| route.path == path && route.method == http::Method::GET)
        {
            return Err(LaunchError::InvalidSetting {
                key,
                message: format!(
                    "{path:?} is the path of the app's route `{}`; serve the OpenAPI {} under another path",
                    route.name,
                    if key == "openapi.path" {
                        "document"
                    } else {
                        "page"
                    },
                ),
            });
        }
    }
    Ok(())
}

/// The OpenAPI document of `operations`, built now, once.
pub(super) fn openapi_document(
    config: &AutumnConfig,
    operations: Vec<OperationSource>,
    security: (Option<bool>, Option<&crate::openapi::SecurityScheme>),
) -> bytes::Bytes {
    let (bearer, principal) = security;
    let tenancy = &config.tenancy;
    let submit = &config.security.submit_token;
    let facts = crate::openapi::AppFacts {
        title: &config.openapi.title,
        version: &config.openapi.version,
        submit_token: submit
            .enabled
            .then_some((submit.field_name.as_str(), submit.ttl_secs)),
        quota: config.idempotency.enabled && config.idempotency.quota.enabled,
        bearer,
        principal,
        tenant_header: (tenancy.enabled
            && tenancy.strategy == crate::config::TenantStrategy::Header)
            .then_some((tenancy.header.as_str(), tenancy.exempt_paths.as_slice())),
    };
    bytes::Bytes::from(crate::openapi::build(&facts, operations))
}

/// `GET [openapi] path`, answering `document` (each request gets a clone
/// of its bytes), and the interactive page when `[openapi] ui` is on.
pub(super) fn openapi_routes(
    config: &AutumnConfig,
    document: bytes::Bytes,
    http: &Arc<HttpMetrics>,
) -> Router {
    let settings = &config.openapi;
    let path = settings.path.as_str();
    let answer = axum::routing::get(move || {
        let document = document.clone();
        async move {
            (
                [(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                )],
                document,
            )
        }
    })
    .layer(RouteLabelLayer::fixed(http.route(path)));
    let router = Router::new().route(path, answer);
    if !settings.ui {
        return router;
    }
    // The page and its files count as one route in the metrics.
    let page = crate::openapi::ui::routes(&settings.ui_path, path, &settings.title)
        .route_layer(RouteLabelLayer::fixed(http.route(&settings.ui_path)));
    router.merge(page)
}

/// The static files' mount must not cover a route of the app (the router
/// would refuse the overlap at startup with a panic, not a message).
pub(super) fn check_static_mount(
    mount: &str,
    routes: &[Route],
    raw: &[RawRouter],
) -> Result<(), LaunchError> {
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

/// Refuses a path axum cannot serve, or one written in another
/// framework's syntax, and two routes answering the same method and path.
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
