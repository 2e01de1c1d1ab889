//! The request, store and pool metrics as `/actuator/prometheus` writes
//! them (the text exposition format) and as `/actuator/metrics` reports
//! them (JSON).

use std::borrow::Cow;
use std::fmt::Write as _;

use super::histogram::HistogramSnapshot;
use super::state::{HttpMetrics, STATUS_CLASSES};
use super::store::StoreTimings;
use crate::pool::Pool;

/// How the database pool's connections are used now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct PoolUsage {
    /// The most connections the pool opens (`database.pool_size`).
    pub(crate) max: usize,
    /// Connections handed out.
    pub(crate) in_use: usize,
    /// Connections open and waiting in the pool.
    pub(crate) idle: usize,
    /// Requests waiting for a connection.
    pub(crate) waiting: usize,
}

/// `pool`'s usage now.
#[cfg(feature = "database")]
pub(crate) fn pool_usage(pool: &Pool) -> Option<PoolUsage> {
    #[allow(unreachable_patterns)]
    let status = match pool {
        #[cfg(feature = "postgres")]
        autumn_base::database::DbPool::Postgres(pool) => pool.status(),
        #[cfg(feature = "sqlite")]
        autumn_base::database::DbPool::Sqlite(pool) => pool.status(),
        _ => return None,
    };
    Some(PoolUsage {
        max: status.max_size,
        in_use: status.size.saturating_sub(status.available),
        idle: status.available,
        waiting: status.waiting,
    })
}

/// No pool in a build without a database.
#[cfg(not(feature = "database"))]
pub(crate) fn pool_usage(pool: &Pool) -> Option<PoolUsage> {
    match *pool {}
}

/// `value` as a label value: backslash, double quote and line feed
/// escaped, as the exposition format asks.
fn escape(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(value);
    }
    let mut escaped = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

/// A family's `# HELP` and `# TYPE` lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// One histogram's samples: `labels` is the series' labels, written out
/// and escaped (`a="x",b="y"`).
fn histogram(out: &mut String, name: &str, labels: &str, snapshot: &HistogramSnapshot) {
    for (le, count) in snapshot.buckets() {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", snapshot.sum_seconds());
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", snapshot.count());
}

const REQUESTS: &str = "autumn_http_requests_total";
const DURATION: &str = "autumn_http_request_duration_seconds";
const STORE_DURATION: &str = "autumn_store_duration_seconds";

/// The request metrics, the stores' round trips and the pool's usage, in
/// the text exposition format, appended to `out`.
pub(crate) fn prometheus(
    out: &mut String,
    http: &HttpMetrics,
    stores: &[&StoreTimings],
    pool: Option<&Pool>,
) {
    let routes = http.routes();
    let series: Vec<_> = routes
        .iter()
        .flat_map(|route| {
            let label = escape(route.route()).into_owned();
            route.snapshot().map(move |series| {
                (
                    format!("method=\"{}\",route=\"{label}\"", series.method),
                    series,
                )
            })
        })
        .collect();
    family(
        out,
        REQUESTS,
        "counter",
        "Requests answered, by route template (unmatched when no route answered), method and status class.",
    );
    for (labels, series) in &series {
        for (class, count) in STATUS_CLASSES.iter().zip(series.statuses) {
            if count > 0 {
                let _ = writeln!(out, "{REQUESTS}{{{labels},status=\"{class}\"}} {count}");
            }
        }
    }
    family(
        out,
        DURATION,
        "histogram",
        "Time from a request's arrival to its response's head, by route template and method.",
    );
    for (labels, series) in &series {
        histogram(out, DURATION, labels, &series.duration);
    }
    family(
        out,
        "autumn_http_requests_in_flight",
        "gauge",
        "Requests being answered now.",
    );
    let _ = writeln!(out, "autumn_http_requests_in_flight {}", http.in_flight());
    family(
        out,
        "autumn_http_connections_open",
        "gauge",
        "Connections the server holds open now.",
    );
    let _ = writeln!(out, "autumn_http_connections_open {}", http.connections());

    family(
        out,
        STORE_DURATION,
        "histogram",
        "Round trips to the idempotency and submit-token stores, by store, backend and operation.",
    );
    for timings in stores {
        for (op, snapshot) in timings.snapshot() {
            let labels = format!(
                "store=\"{}\",backend=\"{}\",op=\"{op}\"",
                timings.store, timings.backend
            );
            histogram(out, STORE_DURATION, &labels, &snapshot);
        }
    }

    let Some(usage) = pool.and_then(pool_usage) else {
        return;
    };
    family(
        out,
        "autumn_db_pool_connections",
        "gauge",
        "The database pool's open connections, in use or idle.",
    );
    for (state, count) in [("in_use", usage.in_use), ("idle", usage.idle)] {
        let _ = writeln!(
            out,
            "autumn_db_pool_connections{{state=\"{state}\"}} {count}"
        );
    }
    family(
        out,
        "autumn_db_pool_max_connections",
        "gauge",
        "The most connections the database pool opens.",
    );
    let _ = writeln!(out, "autumn_db_pool_max_connections {}", usage.max);
    family(
        out,
        "autumn_db_pool_waiting",
        "gauge",
        "Requests waiting for a database connection now.",
    );
    let _ = writeln!(out, "autumn_db_pool_waiting {}", usage.waiting);
}

/// A histogram as JSON: `count`, `sum_seconds` and the cumulative
/// `buckets` in order, each its `le` bound and its `count`.
fn histogram_json(snapshot: &HistogramSnapshot) -> serde_json::Value {
    let buckets: Vec<_> = snapshot
        .buckets()
        .map(|(le, count)| serde_json::json!({ "le": le, "count": count }))
        .collect();
    serde_json::json!({
        "count": snapshot.count(),
        "sum_seconds": snapshot.sum_seconds(),
        "buckets": buckets,
    })
}

/// The request metrics as JSON: the gauges, and one entry per route and
/// method that was asked for.
pub(crate) fn http_json(http: &HttpMetrics) -> serde_json::Value {
    let requests: Vec<_> = http
        .routes()
        .iter()
        .flat_map(|route| {
            route
                .snapshot()
                .map(|series| {
                    let statuses: serde_json::Map<_, _> = STATUS_CLASSES
                        .iter()
                        .zip(series.statuses)
                        .filter(|&(_, count)| count > 0)
                        .map(|(class, count)| ((*class).to_owned(), count.into()))
                        .collect();
                    serde_json::json!({
                        "route": route.route(),
                        "method": series.method,
                        "count": series.duration.count(),
                        "statuses": statuses,
                        "duration": histogram_json(&series.duration),
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect();
    serde_json::json!({
        "in_flight": http.in_flight(),
        "connections_open": http.connections(),
        "requests": requests,
    })
}

/// The stores' round trips as JSON, one entry per store and operation.
pub(crate) fn stores_json(stores: &[&StoreTimings]) -> serde_json::Value {
    let entries: Vec<_> = stores
        .iter()
        .flat_map(|timings| {
            timings.snapshot().map(|(op, snapshot)| {
                let mut entry = histogram_json(&snapshot);
                if let Some(fields) = entry.as_object_mut() {
                    fields.insert("store".to_owned(), timings.store.into());
                    fields.insert("backend".to_owned(), timings.backend.into());
                    fields.insert("op".to_owned(), op.into());
                }
                entry
            })
        })
        .collect();
    serde_json::Value::Array(entries)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use http::{Method, StatusCode};

    use super::super::state::{Measured, MethodLabel};
    use super::*;

    #[test]
    fn label_values_are_escaped_as_the_exposition_format_asks() {
        assert_eq!(escape("/orders/{id}"), "/orders/{id}");
        assert!(matches!(escape("/plain"), Cow::Borrowed(_)));
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    /// The app's metrics after two answers on `/orders/{id}` (a 200 and a
    /// 404), one unmatched request, one still in flight and an open
    /// connection.
    fn sample() -> (
        Arc<HttpMetrics>,
        Measured,
        super::super::state::ConnectionGuard,
    ) {
        let http = Arc::new(HttpMetrics::default());
        let route = http.route("/orders/{id}");
        let get = MethodLabel::of(&Method::GET);
        route.record(get, StatusCode::OK, Duration::from_millis(3));
        route.record(get, StatusCode::NOT_FOUND, Duration::from_millis(30));
        http.unmatched().record(
            MethodLabel::of(&Method::POST),
            StatusCode::NOT_FOUND,
            Duration::ZERO,
        );
        let waiting = Measured::start(&http, &Method::GET);
        let connection = http.connection_opened();
        (http, waiting, connection)
    }

    #[test]
    fn prometheus_writes_each_family_once_with_its_series() {
        let (http, _waiting, _connection) = sample();
        let timings = StoreTimings::new("idempotency", "redis");
        let mut out = String::new();
        prometheus(&mut out, &http, &[&timings], None);
        for line in [
            "# TYPE autumn_http_requests_total counter",
            "autumn_http_requests_total{method=\"GET\",route=\"/orders/{id}\",status=\"2xx\"} 1",
            "autumn_http_requests_total{method=\"GET\",route=\"/orders/{id}\",status=\"4xx\"} 1",
            "autumn_http_requests_total{method=\"POST\",route=\"unmatched\",status=\"4xx\"} 1",
            "# TYPE autumn_http_request_duration_seconds histogram",
            "autumn_http_request_duration_seconds_bucket{method=\"GET\",route=\"/orders/{id}\",le=\"0.005\"} 1",
            "autumn_http_request_duration_seconds_bucket{method=\"GET\",route=\"/orders/{id}\",le=\"0.05\"} 2",
            "autumn_http_request_duration_seconds_bucket{method=\"GET\",route=\"/orders/{id}\",le=\"+Inf\"} 2",
            "autumn_http_request_duration_seconds_sum{method=\"GET\",route=\"/orders/{id}\"} 0.033",
            "autumn_http_request_duration_seconds_count{method=\"GET\",route=\"/orders/{id}\"} 2",
            "autumn_http_requests_in_flight 1",
            "autumn_http_connections_open 1",
            "# TYPE autumn_store_duration_seconds histogram",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?}:\n{out}");
        }
        // No empty classes, methods or operations; no pool without one.
        assert!(!out.contains("status=\"5xx\""), "{out}");
        assert!(!out.contains("method=\"PUT\""), "{out}");
        assert!(
            !out.contains("autumn_store_duration_seconds_count"),
            "{out}"
        );
        assert!(!out.contains("autumn_db_pool"), "{out}");
        for name in [
            "autumn_http_requests_total",
            "autumn_http_request_duration_seconds",
            "autumn_http_requests_in_flight",
            "autumn_http_connections_open",
            "autumn_store_duration_seconds",
        ] {
            let help = format!("# HELP {name} ");
            assert_eq!(out.matches(&help).count(), 1, "{name}:\n{out}");
        }
    }

    #[test]
    fn a_route_template_with_a_quote_is_escaped_in_its_labels() {
        let http = HttpMetrics::default();
        http.route("/say/\"hi\"").record(
            MethodLabel::of(&Method::GET),
            StatusCode::OK,
            Duration::ZERO,
        );
        let mut out = String::new();
        prometheus(&mut out, &http, &[], None);
        assert!(
            out.contains("autumn_http_requests_total{method=\"GET\",route=\"/say/\\\"hi\\\"\",status=\"2xx\"} 1"),
            "{out}"
        );
    }

    #[test]
    fn json_has_one_entry_per_route_and_method_with_its_statuses_and_durations() {
        let (http, _waiting, _connection) = sample();
        let report = http_json(&http);
        assert_eq!(report["in_flight"], 1);
        assert_eq!(report["connections_open"], 1);
        let requests = report["requests"].as_array().expect("a list");
        assert_eq!(requests.len(), 2, "{report}");
        let orders = &requests[0];
        assert_eq!(orders["route"], "/orders/{id}");
        assert_eq!(orders["method"], "GET");
        assert_eq!(orders["count"], 2);
        assert_eq!(orders["statuses"], serde_json::json!({"2xx": 1, "4xx": 1}));
        assert_eq!(
            orders["duration"]["buckets"][0],
            serde_json::json!({"le": "0.005", "count": 1})
        );
        assert_eq!(
            orders["duration"]["buckets"][11],
            serde_json::json!({"le": "+Inf", "count": 2})
        );
        assert_eq!(requests[1]["route"], "unmatched");
        assert_eq!(requests[1]["method"], "POST");
    }
}
