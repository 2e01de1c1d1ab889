//! What the request metrics count into: [`HttpMetrics`] for the app, one
//! [`RouteMetrics`] per route template, one [`Series`] per route and
//! method. Made when the app is built; a request only adds to atomics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use http::{Method, StatusCode};

use super::histogram::{Histogram, HistogramSnapshot, REQUEST_BUCKETS};

/// The `route` label of a request no route answered: an unknown path, or a
/// known path with a method it does not take. One label, so that scanning
/// for paths adds no series.
pub(crate) const UNMATCHED: &str = "unmatched";

/// The `method` label of each standard method, then of everything else.
const METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "other",
];

/// The `status` label of each class, 1xx to 5xx.
pub(crate) const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// A request's method as an index into [`METHODS`]: a method outside the
/// standard ones is `other`, so a client cannot add series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MethodLabel(usize);

impl MethodLabel {
    /// The label of `method`.
    pub(crate) fn of(method: &Method) -> Self {
        let index = match *method {
            Method::GET => 0,
            Method::HEAD => 1,
            Method::POST => 2,
            Method::PUT => 3,
            Method::DELETE => 4,
            Method::PATCH => 5,
            Method::OPTIONS => 6,
            Method::CONNECT => 7,
            Method::TRACE => 8,
            _ => 9,
        };
        Self(index)
    }
}

/// The index of `status`'s class in [`STATUS_CLASSES`]; the codes past 599
/// that `http` accepts count as 5xx.
fn status_class(status: StatusCode) -> usize {
    usize::from(status.as_u16() / 100).clamp(1, 5) - 1
}

/// One route and method: its answers by status class, and how long they
/// took.
#[derive(Debug)]
pub(crate) struct Series {
    statuses: [AtomicU64; 5],
    duration: Histogram,
}

impl Series {
    fn new() -> Self {
        Self {
            statuses: Default::default(),
            duration: Histogram::new(&REQUEST_BUCKETS),
        }
    }

    fn record(&self, status: StatusCode, elapsed: Duration) {
        if let Some(count) = self.statuses.get(status_class(status)) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        self.duration.observe(elapsed);
    }
}

/// Every method's series under one route template, made together so that
/// a request finds its series by index, without a lookup.
#[derive(Debug)]
pub(crate) struct RouteMetrics {
    route: Box<str>,
    methods: [Series; METHODS.len()],
}

impl RouteMetrics {
    fn new(route: &str) -> Self {
        Self {
            route: route.into(),
            methods: std::array::from_fn(|_| Series::new()),
        }
    }

    /// Counts one answer to a `method` request.
    pub(crate) fn record(&self, method: MethodLabel, status: StatusCode, elapsed: Duration) {
        if let Some(series) = self.methods.get(method.0) {
            series.record(status, elapsed);
        }
    }

    /// The route template, or [`UNMATCHED`].
    pub(crate) fn route(&self) -> &str {
        &self.route
    }

    /// Each method that was asked for, with its counts.
    pub(crate) fn snapshot(&self) -> impl Iterator<Item = SeriesSnapshot> + '_ {
        METHODS
            .iter()
            .zip(&self.methods)
            .filter_map(|(&method, series)| {
                let statuses = series
                    .statuses
                    .each_ref()
                    .map(|count| count.load(Ordering::Relaxed));
                (statuses.iter().any(|&count| count > 0)).then(|| SeriesSnapshot {
                    method,
                    statuses,
                    duration: series.duration.snapshot(),
                })
            })
    }
}

/// A point-in-time copy of one route and method's [`Series`].
#[derive(Debug)]
pub(crate) struct SeriesSnapshot {
    /// The `method` label.
    pub(crate) method: &'static str,
    /// Answers by class, in the order of [`STATUS_CLASSES`].
    pub(crate) statuses: [u64; 5],
    /// How long they took.
    pub(crate) duration: HistogramSnapshot,
}

/// The request metrics of one app: requests in flight, open connections,
/// and one [`RouteMetrics`] per route template.
///
/// Launch asks for each route's entry as it mounts the route and hands it
/// to the route's label layer, so a request to a route the app built finds
/// its entry without a lookup. Routers the app merged whole are labelled
/// by their `MatchedPath`, looked up in the same map under a read lock.
#[derive(Debug)]
pub(crate) struct HttpMetrics {
    in_flight: AtomicU64,
    connections: AtomicU64,
    unmatched: Arc<RouteMetrics>,
    routes: RwLock<HashMap<Box<str>, Arc<RouteMetrics>>>,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self {
            in_flight: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            unmatched: Arc::new(RouteMetrics::new(UNMATCHED)),
            routes: RwLock::default(),
        }
    }
}

impl HttpMetrics {
    /// The entry of the route template `route`, made on first use.
    pub(crate) fn route(&self, route: &str) -> Arc<RouteMetrics> {
        if let Some(found) = self
            .routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(route)
        {
            return Arc::clone(found);
        }
        let mut routes = self.routes.write().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            routes
                .entry(route.into())
                .or_insert_with(|| Arc::new(RouteMetrics::new(route))),
        )
    }

    /// The entry of requests no route answered.
    pub(crate) fn unmatched(&self) -> &Arc<RouteMetrics> {
        &self.unmatched
    }

    /// Every route's entry, by template, the unmatched requests last.
    pub(crate) fn routes(&self) -> Vec<Arc<RouteMetrics>> {
        let mut routes: Vec<_> = self
            .routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        routes.sort_by(|a, b| a.route.cmp(&b.route));
        routes.push(Arc::clone(&self.unmatched));
        routes
    }

    /// Requests being answered now.
    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Connections the server holds open now.
    pub(crate) fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// A request arrived: in flight until the guard is dropped.
    pub(crate) fn request_started(self: &Arc<Self>) -> InFlightGuard {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlightGuard(Arc::clone(self))
    }

    /// A connection was accepted: open until the guard is dropped, however
    /// its task ends (closed, failed, panicked or cancelled).
    pub(crate) fn connection_opened(self: &Arc<Self>) -> ConnectionGuard {
        self.connections.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(Arc::clone(self))
    }
}

/// One request being measured: off the in-flight gauge when dropped,
/// counted when [`finish`](Self::finish)ed with its status.
#[derive(Debug)]
pub(crate) struct Measured {
    method: MethodLabel,
    started: Instant,
    /// The route it reached, once heard.
    pub(super) route: Option<Arc<RouteMetrics>>,
    in_flight: InFlightGuard,
}

impl Measured {
    /// A request with `method` arrives now: in flight from here.
    pub(crate) fn start(metrics: &Arc<HttpMetrics>, method: &Method) -> Self {
        Self {
            method: MethodLabel::of(method),
            started: Instant::now(),
            route: None,
            in_flight: metrics.request_started(),
        }
    }

    /// Counts the request as answered with `status`, under its route (or as
    /// unmatched), with the time since it arrived.
    pub(crate) fn finish(self, status: StatusCode) {
        let elapsed = self.started.elapsed();
        let route = match &self.route {
            Some(route) => route,
            None => self.in_flight.metrics().unmatched(),
        };
        route.record(self.method, status, elapsed);
    }
}

/// One request in flight; dropping it takes it off the gauge.
#[derive(Debug)]
pub(crate) struct InFlightGuard(Arc<HttpMetrics>);

impl InFlightGuard {
    /// The app's metrics.
    pub(crate) fn metrics(&self) -> &HttpMetrics {
        &self.0
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One open connection; dropping it takes it off the gauge.
#[derive(Debug)]
pub(crate) struct ConnectionGuard(Arc<HttpMetrics>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_outside_the_standard_ones_is_other() {
        let custom = Method::from_bytes(b"PURGE").expect("a method");
        assert_eq!(METHODS[MethodLabel::of(&custom).0], "other");
        assert_eq!(METHODS[MethodLabel::of(&Method::PATCH).0], "PATCH");
        assert_eq!(METHODS[MethodLabel::of(&Method::GET).0], "GET");
    }

    #[test]
    fn statuses_count_by_class() {
        let class = |code| STATUS_CLASSES[status_class(StatusCode::from_u16(code).expect("code"))];
        assert_eq!(class(101), "1xx");
        assert_eq!(class(204), "2xx");
        assert_eq!(class(308), "3xx");
        assert_eq!(class(404), "4xx");
        assert_eq!(class(503), "5xx");
        assert_eq!(class(999), "5xx");
    }

    #[test]
    fn one_template_is_one_entry_and_only_methods_asked_for_are_reported() {
        let metrics = HttpMetrics::default();
        let first = metrics.route("/orders/{id}");
        let again = metrics.route("/orders/{id}");
        assert!(Arc::ptr_eq(&first, &again));
        first.record(
            MethodLabel::of(&Method::GET),
            StatusCode::OK,
            Duration::ZERO,
        );
        again.record(
            MethodLabel::of(&Method::GET),
            StatusCode::NOT_FOUND,
            Duration::ZERO,
        );
        let routes = metrics.routes();
        assert_eq!(
            routes.iter().map(|r| r.route()).collect::<Vec<_>>(),
            ["/orders/{id}", UNMATCHED]
        );
        let series: Vec<_> = first.snapshot().collect();
        assert_eq!(series.len(), 1, "GET only");
        assert_eq!(series[0].method, "GET");
        assert_eq!(series[0].statuses, [0, 1, 0, 1, 0]);
        assert_eq!(series[0].duration.count(), 2);
    }

    #[test]
    fn the_gauges_go_down_when_their_guards_drop() {
        let metrics = Arc::new(HttpMetrics::default());
        let request = metrics.request_started();
        let connection = metrics.connection_opened();
        assert_eq!((metrics.in_flight(), metrics.connections()), (1, 1));
        drop(request);
        assert_eq!((metrics.in_flight(), metrics.connections()), (0, 1));
        drop(connection);
        assert_eq!((metrics.in_flight(), metrics.connections()), (0, 0));
    }
}
