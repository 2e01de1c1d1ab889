//! `/actuator/*`: the app's health (overall, liveness, readiness), its
//! counters as JSON and in the Prometheus text format.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use autumn_idempotency::{IdempotencyMetrics, IdempotencyStore, MetricsSnapshot, StoreSize};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use crate::pool::Pool;

/// Counters shared by the app's layers and reported by `/actuator/metrics`,
/// with the stores whose size is reported next to them.
#[derive(Clone, Default)]
pub(crate) struct AppMetrics {
    pub(crate) idempotency: Arc<IdempotencyMetrics>,
    pub(crate) submit_token: Arc<IdempotencyMetrics>,
    pub(crate) idempotency_store: Option<Arc<dyn IdempotencyStore>>,
    pub(crate) submit_token_store: Option<Arc<dyn IdempotencyStore>>,
}

impl std::fmt::Debug for AppMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppMetrics")
            .field("idempotency", &self.idempotency)
            .field("submit_token", &self.submit_token)
            .finish_non_exhaustive()
    }
}

/// The counters, and under `store` the store's size when it reports one
/// (the memory store does; Redis and databases keep their own accounts).
fn report(
    counters: MetricsSnapshot,
    store: Option<&Arc<dyn IdempotencyStore>>,
) -> serde_json::Value {
    let mut report = serde_json::json!(counters);
    if let (Some(size), Some(fields)) = (store.and_then(|s| s.size()), report.as_object_mut()) {
        fields.insert("store".to_owned(), serde_json::json!(size));
    }
    report
}

/// A health check's outcome: `Ok` with what was checked, or why it failed.
type ProbeFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// How one component is checked.
#[derive(Clone)]
pub(crate) enum Probe {
    /// In this process: up while the process is.
    Memory,
    /// Given in code: nothing Autumn can ask, reported `UNKNOWN`.
    Custom,
    /// `PING` on a connection of the health check's own; on a Redis
    /// Cluster, also the masters' `CLUSTER INFO` (`cluster_state:ok`).
    #[cfg(feature = "redis")]
    Redis(autumn_base::redis::RedisConnection),
    /// `SELECT 1` on a pooled connection.
    #[cfg(feature = "database")]
    Database(autumn_base::database::DbPool),
    /// The backend is configured but cannot be checked from here.
    #[allow(dead_code)]
    Unavailable(&'static str),
}

impl Probe {
    fn check(&self) -> Option<ProbeFuture> {
        match self {
            Self::Memory => Some(Box::pin(async { Ok(()) })),
            Self::Custom => None,
            #[cfg(feature = "redis")]
            Self::Redis(connection) => {
                let connection = connection.clone();
                Some(Box::pin(async move {
                    // Worded as the Redis idempotency store's failures
                    // are (`idempotency store failed: ...`).
                    connection
                        .health_check()
                        .await
                        .map_err(|e| autumn_idempotency::StoreError::from(e).to_string())
                }))
            }
            #[cfg(feature = "database")]
            Self::Database(pool) => {
                let pool = pool.clone();
                Some(Box::pin(async move {
                    pool.health_check().await.map_err(|e| e.to_string())
                }))
            }
            Self::Unavailable(reason) => {
                let reason = *reason;
                Some(Box::pin(async move { Err(reason.to_owned()) }))
            }
        }
    }
}

/// One store or the database, as `/actuator/health` reports it.
#[derive(Clone)]
pub(crate) struct Component {
    /// `idempotency`, `submit_token`, `session` or `db`.
    pub(crate) name: &'static str,
    /// `memory`, `redis`, `database` or `custom`.
    pub(crate) backend: &'static str,
    /// Down means the app is not ready (not in `actuator.optional`).
    pub(crate) required: bool,
    pub(crate) probe: Probe,
}

/// What `/actuator/health` checks.
#[derive(Clone, Default)]
pub(crate) struct Health {
    pub(crate) components: Vec<Component>,
    pub(crate) timeout: Duration,
}

impl Health {
    /// Checks every component at once, each within the timeout: the JSON
    /// report and whether every required component is up.
    async fn check(&self) -> (serde_json::Value, bool) {
        let checks = self.components.iter().map(|component| {
            let timeout = self.timeout;
            let probe = component.probe.check();
            async move {
                let Some(probe) = probe else {
                    return (component, None);
                };
                let outcome = tokio::time::timeout(timeout, probe)
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!("no answer within {} ms", timeout.as_millis()))
                    });
                (component, Some(outcome))
            }
        });
        let outcomes = futures_util::future::join_all(checks).await;
        let mut ready = true;
        let mut components = serde_json::Map::new();
        for (component, outcome) in outcomes {
            let mut report = serde_json::json!({ "backend": component.backend });
            let status = match outcome {
                None => "UNKNOWN",
                Some(Ok(())) => "UP",
                Some(Err(reason)) => {
                    ready &= !component.required;
                    report["error"] = serde_json::Value::String(reason);
                    "DOWN"
                }
            };
            components.insert(
                component.name.to_owned(),
                serde_json::json!({
                    "status": status,
                    "required": component.required,
                    "details": report,
                }),
            );
        }
        let status = if ready { "UP" } else { "DOWN" };
        (
            serde_json::json!({ "status": status, "components": components }),
            ready,
        )
    }
}

/// The health report without the components' error text: readiness is
/// asked by load balancers and often reachable from outside, and an error
/// can name hosts and ports. Each component's status stays.
fn without_error_text(mut report: serde_json::Value) -> serde_json::Value {
    if let Some(components) = report["components"].as_object_mut() {
        for component in components.values_mut() {
            if let Some(details) = component["details"].as_object_mut() {
                details.remove("error");
            }
        }
    }
    report
}

/// 200 when up, 503 when a required component is down.
fn health_response(report: serde_json::Value, ready: bool) -> Response {
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(report)).into_response()
}

/// A metric family: its name, its help text and how to read its value.
type Family<T> = (&'static str, &'static str, fn(&T) -> u64);

/// The Prometheus text format's content type.
const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The counters in the Prometheus text exposition format, one family per
/// counter, labelled by layer (`idempotency`, `submit_token`).
fn prometheus(metrics: &AppMetrics) -> String {
    let layers = [
        (
            "idempotency",
            metrics.idempotency.snapshot(),
            metrics.idempotency_store.as_ref().and_then(|s| s.size()),
        ),
        (
            "submit_token",
            metrics.submit_token.snapshot(),
            metrics.submit_token_store.as_ref().and_then(|s| s.size()),
        ),
    ];
    let counters: [Family<MetricsSnapshot>; 5] = [
        (
            "autumn_idempotency_replays_total",
            "Requests answered from a record.",
            |s| s.hits,
        ),
        (
            "autumn_idempotency_first_runs_total",
            "First-time requests: the handler ran.",
            |s| s.misses,
        ),
        (
            "autumn_idempotency_conflicts_total",
            "Requests answered 409 (in flight, or a replay that must fail closed).",
            |s| s.conflicts,
        ),
        (
            "autumn_idempotency_lock_renewal_failures_total",
            "Failed lock renewals while a handler ran; its response is still recorded unless another request took the key.",
            |s| s.lock_renewal_failures,
        ),
        (
            "autumn_idempotency_unrecorded_too_large_total",
            "Successful responses larger than the record limit, not recorded.",
            |s| s.unrecorded_too_large,
        ),
    ];
    let mut out = String::new();
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (layer, snapshot, _) in &layers {
            let _ = writeln!(out, "{name}{{layer=\"{layer}\"}} {}", value(snapshot));
        }
    }
    let gauges: [Family<StoreSize>; 2] = [
        (
            "autumn_idempotency_store_entries",
            "Storage keys a memory store holds.",
            |s| s.entries,
        ),
        (
            "autumn_idempotency_store_bytes",
            "Bytes of recorded responses a memory store holds.",
            |s| s.bytes,
        ),
    ];
    for (name, help, value) in gauges {
        let sizes: Vec<_> = layers
            .iter()
            .filter_map(|(layer, _, size)| Some((layer, size.as_ref()?)))
            .collect();
        if sizes.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (layer, size) in sizes {
            let _ = writeln!(out, "{name}{{layer=\"{layer}\"}} {}", value(size));
        }
    }
    out
}

/// `/actuator/health` (and its liveness and readiness groups),
/// `/actuator/metrics` and `/actuator/prometheus`.
pub(crate) fn routes(metrics: AppMetrics, health: Health) -> Router {
    let json_metrics = metrics.clone();
    let readiness = health.clone();
    Router::new()
        .route(
            "/actuator/metrics",
            get(move || {
                let idempotency = report(
                    json_metrics.idempotency.snapshot(),
                    json_metrics.idempotency_store.as_ref(),
                );
                let submit_token = report(
                    json_metrics.submit_token.snapshot(),
                    json_metrics.submit_token_store.as_ref(),
                );
                async move {
                    Json(serde_json::json!({
                        "idempotency": idempotency,
                        "submit_token": submit_token,
                    }))
                }
            }),
        )
        .route(
            "/actuator/prometheus",
            get(move || {
                let text = prometheus(&metrics);
                async move { ([(header::CONTENT_TYPE, PROMETHEUS)], text) }
            }),
        )
        .route(
            "/actuator/health",
            get(move || {
                let health = health.clone();
                async move {
                    let (report, ready) = health.check().await;
                    health_response(report, ready)
                }
            }),
        )
        // Liveness: the process answers. A store being down is not a reason
        // to restart it, so nothing else is checked.
        .route(
            "/actuator/health/liveness",
            get(|| async { Json(serde_json::json!({ "status": "UP" })) }),
        )
        // Readiness: whether to send it traffic, so the required components.
        .route(
            "/actuator/health/readiness",
            get(move || {
                let health = readiness.clone();
                async move {
                    let (report, ready) = health.check().await;
                    health_response(without_error_text(report), ready)
                }
            }),
        )
}

/// Which stores were given in code rather than built from the configuration.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Given {
    /// `Some(given)` when the idempotency layer is on.
    pub(crate) idempotency: Option<bool>,
    pub(crate) session: bool,
}

/// The components `/actuator/health` checks: each store the configuration
/// builds, and the database when `[database] url` is set. A Redis store is
/// checked over one connection of the health check's own, so a check never
/// waits behind the app's commands.
pub(crate) fn health(
    config: &crate::config::AutumnConfig,
    database: Option<&Pool>,
    given: Given,
) -> Health {
    use crate::config::Backend;
    #[cfg(feature = "redis")]
    let redis = config
        .idempotency
        .redis
        .url
        .as_deref()
        .and_then(|url| autumn_base::redis::RedisConnection::new(url).ok());
    let probe = |backend: Backend| -> (&'static str, Probe) {
        match backend {
            Backend::Memory => ("memory", Probe::Memory),
            #[cfg(feature = "redis")]
            Backend::Redis => match &redis {
                Some(connection) => ("redis", Probe::Redis(connection.clone())),
                None => (
                    "redis",
                    Probe::Unavailable("idempotency.redis.url is not usable"),
                ),
            },
            #[cfg(feature = "database")]
            Backend::Database => match database {
                Some(pool) => ("database", Probe::Database(pool.clone())),
                None => ("database", Probe::Unavailable("database.url is not set")),
            },
            #[allow(unreachable_patterns)]
            backend => (backend.as_str(), Probe::Unavailable("not in this build")),
        }
    };
    let mut found: Vec<(&'static str, (&'static str, Probe))> = Vec::new();
    let idempotency_backend = config.idempotency.backend;
    if let Some(given_in_code) = given.idempotency {
        found.push((
            "idempotency",
            if given_in_code {
                ("custom", Probe::Custom)
            } else {
                probe(idempotency_backend)
            },
        ));
    }
    let tokens = &config.security.submit_token;
    if tokens.enabled {
        let backend = tokens.effective_backend(&config.idempotency);
        // The submit tokens share the idempotency store when both name one backend.
        let shared = given.idempotency == Some(true) && backend == idempotency_backend;
        found.push((
            "submit_token",
            if shared {
                ("custom", Probe::Custom)
            } else {
                probe(backend)
            },
        ));
    }
    if config.session.enabled {
        found.push((
            "session",
            if given.session {
                ("custom", Probe::Custom)
            } else {
                probe(config.session.effective_backend(&config.idempotency))
            },
        ));
    }
    #[cfg(feature = "database")]
    if let Some(pool) = database {
        found.push(("db", ("database", Probe::Database(pool.clone()))));
    }
    #[cfg(not(feature = "database"))]
    let _ = database;
    Health {
        components: found
            .into_iter()
            .map(|(name, (backend, probe))| Component {
                name,
                backend,
                required: !config.actuator.optional.iter().any(|o| o == name),
                probe,
            })
            .collect(),
        timeout: config.actuator.health_timeout(),
    }
}
