//! `/actuator/*`: the app's health (overall, liveness, readiness), its
//! counters and request metrics as JSON and in the Prometheus text format.

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
use crate::telemetry::metrics::{self, HttpMetrics, StoreTimings};

/// Counters shared by the app's layers and reported by `/actuator/metrics`,
/// with the stores whose size is reported next to them.
#[derive(Clone, Default)]
pub(crate) struct AppMetrics {
    pub(crate) idempotency: Arc<IdempotencyMetrics>,
    pub(crate) submit_token: Arc<IdempotencyMetrics>,
    pub(crate) idempotency_store: Option<Arc<dyn IdempotencyStore>>,
    pub(crate) submit_token_store: Option<Arc<dyn IdempotencyStore>>,
    /// Requests by route, in flight, and the open connections.
    pub(crate) http: Arc<HttpMetrics>,
    /// The round trips of each guard's store, when it has one.
    pub(crate) store_timings: Vec<Arc<StoreTimings>>,
    /// The app's database pool, whose usage is reported.
    pub(crate) pool: Option<Pool>,
    /// What the `[rate_limit]` rules decided, when any is enforced.
    pub(crate) rate_limits: Option<Arc<crate::rate_limit::RateLimitMetrics>>,
    /// What the job worker did, per queue, when the app runs one.
    #[cfg(feature = "database")]
    pub(crate) jobs: Option<Arc<crate::jobs::metrics::JobMetrics>>,
    /// Whether anything reads the request metrics and the store timings
    /// (`[actuator] enabled`): when not, nothing counts them.
    pub(crate) off: bool,
}

impl AppMetrics {
    /// The timings of every store, for the renderers.
    fn store_timings(&self) -> Vec<&StoreTimings> {
        self.store_timings
            .iter()
            .map(|timings| &**timings)
            .collect()
    }

    /// `store`, its round trips timed as the `name` guard's store on
    /// `backend`.
    pub(crate) fn timed_store(
        &mut self,
        name: &'static str,
        backend: &'static str,
        store: Arc<dyn IdempotencyStore>,
    ) -> Arc<dyn IdempotencyStore> {
        if self.off {
            return store;
        }
        let timings = Arc::new(StoreTimings::new(name, backend));
        self.store_timings.push(Arc::clone(&timings));
        Arc::new(metrics::TimedStore::new(store, timings))
    }
}

impl std::fmt::Debug for AppMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppMetrics")
            .field("idempotency", &self.idempotency)
            .field("submit_token", &self.submit_token)
            .field("http", &self.http)
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

/// A health check's outcome: `Ok`, or why it failed (a stable reason for
/// the report, the error for the log).
type ProbeFuture = Pin<Box<dyn Future<Output = Result<(), (DownReason, String)>> + Send>>;

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
    /// `SELECT 1` on the health check's own one-connection pool: a flood
    /// of probes never takes a connection the app's handlers wait for.
    #[cfg(feature = "database")]
    Database(autumn_base::database::DbPool),
    /// The backend is configured but cannot be checked from here.
    #[allow(dead_code)]
    Unavailable(&'static str),
    /// Counts its checks (tests of the report's cache).
    #[cfg(test)]
    Counting(Arc<std::sync::atomic::AtomicUsize>),
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
                    connection.health_check().await.map_err(|error| {
                        use autumn_base::redis::RedisError;
                        let reason = match &error {
                            RedisError::AuthenticationFailed { .. } => {
                                DownReason::AuthenticationFailed
                            }
                            RedisError::ClusterDown { .. } => DownReason::ClusterDown,
                            _ => DownReason::Unreachable,
                        };
                        // Worded as the Redis idempotency store's failures
                        // are (`idempotency store failed: ...`).
                        let error = autumn_idempotency::StoreError::from(error).to_string();
                        (reason, error)
                    })
                }))
            }
            #[cfg(feature = "database")]
            Self::Database(pool) => {
                let pool = pool.clone();
                Some(Box::pin(async move {
                    pool.health_check()
                        .await
                        .map_err(|e| (DownReason::Unreachable, e.to_string()))
                }))
            }
            Self::Unavailable(reason) => {
                let reason = *reason;
                Some(Box::pin(async move {
                    Err((DownReason::NotConfigured, reason.to_owned()))
                }))
            }
            #[cfg(test)]
            Self::Counting(checks) => {
                checks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Some(Box::pin(async { Ok(()) }))
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

/// The last report and when it was made.
type CachedReport = Option<(tokio::time::Instant, serde_json::Value, bool)>;

/// What `/actuator/health` checks.
#[derive(Clone, Default)]
pub(crate) struct Health {
    pub(crate) components: Vec<Component>,
    pub(crate) timeout: Duration,
    /// How long a report is answered again before the components are asked
    /// anew (`actuator.health_cache_ms`): a probe flood on the public port
    /// then costs the stores one check per period, whoever asks.
    pub(crate) max_age: Duration,
    /// The last report, shared by every request: held while a check runs,
    /// so concurrent probes wait for that one check instead of starting
    /// their own.
    cache: Arc<tokio::sync::Mutex<CachedReport>>,
    /// Set once the server is stopping: readiness answers 503 from then
    /// on, so load balancers stop sending traffic while it drains.
    pub(crate) draining: Arc<std::sync::atomic::AtomicBool>,
}

/// Why a component is down, as a stable word the report carries; the
/// error itself (which can name hosts and users) goes to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DownReason {
    /// The check ran and failed.
    #[cfg_attr(not(any(feature = "redis", feature = "database")), allow(dead_code))]
    Unreachable,
    /// No answer within `actuator.health_timeout_ms`.
    Timeout,
    /// The configuration names a backend that cannot be checked here.
    NotConfigured,
    /// Redis refused the user and password.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    AuthenticationFailed,
    /// A Redis Cluster reports a `cluster_state` other than `ok`.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    ClusterDown,
}

impl DownReason {
    fn as_str(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::NotConfigured => "not_configured",
            Self::AuthenticationFailed => "authentication_failed",
            Self::ClusterDown => "cluster_down",
        }
    }
}

impl Health {
    /// The report of a check at most `max_age` old.
    async fn report(&self) -> (serde_json::Value, bool) {
        let mut cached = self.cache.lock().await;
        if let Some((at, report, ready)) = cached.as_ref()
            && at.elapsed() < self.max_age
        {
            return (report.clone(), *ready);
        }
        let (report, ready) = self.check().await;
        *cached = Some((tokio::time::Instant::now(), report.clone(), ready));
        (report, ready)
    }

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
                let outcome = match tokio::time::timeout(timeout, probe).await {
                    Ok(outcome) => outcome,
                    Err(_) => Err((
                        DownReason::Timeout,
                        format!("no answer within {} ms", timeout.as_millis()),
                    )),
                };
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
                Some(Err((reason, error))) => {
                    ready &= !component.required;
                    // The error can name hosts, ports and users: the log
                    // has it, the report (often public) a stable reason.
                    tracing::warn!(
                        component = component.name,
                        backend = component.backend,
                        reason = reason.as_str(),
                        %error,
                        "health check failed"
                    );
                    report["reason"] = serde_json::Value::from(reason.as_str());
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
/// counter, labelled by layer (`idempotency`, `submit_token`), then the
/// request, store and pool metrics.
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
    let counters: [Family<MetricsSnapshot>; 7] = [
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
        (
            "autumn_idempotency_quota_refusals_total",
            "New keys and tokens refused with 429: their caller holds its whole quota.",
            |s| s.quota_refusals,
        ),
        (
            "autumn_idempotency_store_full_refusals_total",
            "New keys and tokens refused with 503: the store holds as much as it may.",
            |s| s.store_full_refusals,
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
    metrics::prometheus(
        &mut out,
        &metrics.http,
        &metrics.store_timings(),
        metrics.pool.as_ref(),
    );
    if let Some(rate_limits) = &metrics.rate_limits {
        rate_limits.prometheus(&mut out);
    }
    #[cfg(feature = "database")]
    if let Some(jobs) = &metrics.jobs {
        jobs.prometheus(&mut out);
    }
    out
}

/// `/actuator/metrics` and `/actuator/prometheus`: the counters, served on
/// the actuator's own port, or on the app's when
/// `actuator.metrics_on_app_port` says so.
fn metrics_routes(metrics: AppMetrics) -> Router {
    let json_metrics = metrics.clone();
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
                let mut report = serde_json::json!({
                    "idempotency": idempotency,
                    "submit_token": submit_token,
                    "http": metrics::http_json(&json_metrics.http),
                    "stores": metrics::stores_json(&json_metrics.store_timings()),
                });
                if let (Some(rate_limits), Some(fields)) =
                    (&json_metrics.rate_limits, report.as_object_mut())
                {
                    fields.insert("rate_limits".to_owned(), rate_limits.json());
                }
                #[cfg(feature = "database")]
                if let (Some(jobs), Some(fields)) = (&json_metrics.jobs, report.as_object_mut()) {
                    fields.insert("jobs".to_owned(), jobs.json());
                }
                if let (Some(usage), Some(fields)) = (
                    json_metrics.pool.as_ref().and_then(metrics::pool_usage),
                    report.as_object_mut(),
                ) {
                    fields.insert("db_pool".to_owned(), serde_json::json!(usage));
                }
                async move { Json(report) }
            }),
        )
        .route(
            "/actuator/prometheus",
            get(move || {
                let text = prometheus(&metrics);
                async move { ([(header::CONTENT_TYPE, PROMETHEUS)], text) }
            }),
        )
}

/// `/actuator/health` (and its liveness and readiness groups), and with
/// `with_metrics` `/actuator/metrics` and `/actuator/prometheus`.
pub(crate) fn routes(metrics: AppMetrics, health: Health, with_metrics: bool) -> Router {
    let readiness = health.clone();
    let routes = if with_metrics {
        metrics_routes(metrics)
    } else {
        Router::new()
    };
    routes
        .route(
            "/actuator/health",
            get(move || {
                let health = health.clone();
                async move {
                    let (report, ready) = health.report().await;
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
                    // Stopping: no new traffic, whatever the stores say.
                    if health.draining.load(std::sync::atomic::Ordering::Acquire) {
                        return health_response(
                            serde_json::json!({ "status": "OUT_OF_SERVICE", "reason": "shutting_down" }),
                            false,
                        );
                    }
                    let (report, ready) = health.report().await;
                    health_response(report, ready)
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
    // A pool of the check's own, of one connection made on first use: the
    // app's pool is for its handlers, and a probe flood must not take their
    // connections (nor wait behind them and report a busy database down).
    #[cfg(feature = "database")]
    let database = database.and_then(|_| {
        let url = config.database.url.as_deref()?;
        autumn_base::database::DbPool::with_statement_cache(
            url,
            1,
            std::time::Duration::from_millis(config.database.connect_timeout_ms),
            config.database.statement_cache,
        )
        .ok()
    });
    #[cfg(feature = "redis")]
    let redis = config.idempotency.redis.url.as_deref().and_then(|url| {
        autumn_base::redis::RedisConnection::with_tls(url, &config.idempotency.redis.tls()).ok()
    });
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
            Backend::Database => match &database {
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
    if let Some(pool) = &database {
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
        max_age: Duration::from_millis(config.actuator.health_cache_ms),
        cache: Arc::default(),
        draining: Arc::default(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn health(components: Vec<(&'static str, Probe)>, max_age: Duration) -> Health {
        Health {
            components: components
                .into_iter()
                .map(|(name, probe)| Component {
                    name,
                    backend: "memory",
                    required: true,
                    probe,
                })
                .collect(),
            timeout: Duration::from_secs(1),
            max_age,
            cache: Arc::default(),
            draining: Arc::default(),
        }
    }

    /// Probes within the cache's age share one check, concurrent ones
    /// included; a probe after it asks the components again.
    #[tokio::test(start_paused = true)]
    async fn a_report_is_answered_again_until_it_is_older_than_its_age() {
        let checks = Arc::new(AtomicUsize::new(0));
        let cached = health(
            vec![("idempotency", Probe::Counting(checks.clone()))],
            Duration::from_secs(1),
        );
        let flood = (0..50).map(|_| cached.report());
        let reports = futures_util::future::join_all(flood).await;
        assert!(reports.iter().all(|(_, ready)| *ready));
        assert_eq!(checks.load(Ordering::SeqCst), 1, "one check for the flood");

        tokio::time::advance(Duration::from_millis(999)).await;
        cached.report().await;
        assert_eq!(checks.load(Ordering::SeqCst), 1, "still fresh");
        tokio::time::advance(Duration::from_millis(1)).await;
        cached.report().await;
        assert_eq!(checks.load(Ordering::SeqCst), 2, "asked anew");

        let uncached = health(
            vec![("idempotency", Probe::Counting(checks.clone()))],
            Duration::ZERO,
        );
        uncached.report().await;
        uncached.report().await;
        assert_eq!(checks.load(Ordering::SeqCst), 4, "0: every request asks");
    }

    /// A component down carries a stable reason, never the error's text.
    #[tokio::test]
    async fn a_down_component_reports_a_reason_never_the_errors_text() {
        let down = health(
            vec![(
                "db",
                Probe::Unavailable("database.url postgres://app:secret@db.internal is not set"),
            )],
            Duration::ZERO,
        );
        let (report, ready) = down.report().await;
        assert!(!ready);
        let db = &report["components"]["db"];
        assert_eq!(db["status"], "DOWN", "{report}");
        assert_eq!(db["details"]["reason"], "not_configured", "{report}");
        let text = report.to_string();
        assert!(!text.contains("db.internal"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }
}
