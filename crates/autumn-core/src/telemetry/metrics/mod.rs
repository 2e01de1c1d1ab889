//! Request metrics for `/actuator/metrics` and `/actuator/prometheus`:
//! requests by route template, method and status class, their durations,
//! the requests in flight and the open connections; the idempotency and
//! submit-token stores' round trips; the database pool's usage.
//!
//! The [`HttpMetricsLayer`] sits outermost in the app's stack, so it sees
//! every request and the status the client gets (a timeout's 408, a
//! panic's 500, an error page). The route template comes from inside:
//! launch puts a [`RouteLabelLayer`] on each route it mounts, holding that
//! route's entry, and the label reaches the metrics layer through the
//! thread it is polled on (see `slot.rs`), so a request allocates nothing
//! and, on a route launch mounted, takes no lock to be counted: a few
//! relaxed atomic adds (a router merged whole finds its series by
//! `MatchedPath` under a read lock). Series are
//! bounded by the app's routes: a request no route answered is counted
//! under `unmatched`, a method outside the standard ones as `other`.
//!
//! Connections are counted by the server's connection loop, with a guard
//! each connection's task holds.

mod future;
mod histogram;
mod layer;
mod render;
mod route_label;
mod service;
mod slot;
mod state;
mod store;

pub(crate) use layer::HttpMetricsLayer;
pub(crate) use render::{http_json, pool_usage, prometheus, stores_json};
pub(crate) use route_label::RouteLabelLayer;
pub(crate) use state::HttpMetrics;
pub(crate) use store::{StoreTimings, TimedStore};

#[cfg(test)]
mod tests {
    //! The layer and the label together, around a router as launch builds
    //! them.

    use std::convert::Infallible;
    use std::future::Future as _;
    use std::sync::Arc;

    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use http::{Request, StatusCode};
    use tower::{Layer as _, ServiceExt as _};

    use super::*;

    /// An app with `/orders/{id}` labelled at mount and a merged router
    /// labelled by its matched path, inside the metrics layer.
    fn app(
        metrics: &Arc<HttpMetrics>,
    ) -> impl tower::Service<
        Request<Body>,
        Response = axum::response::Response,
        Error = Infallible,
        Future = impl Send,
    > + Clone {
        let fixed = RouteLabelLayer::fixed(metrics.route("/orders/{id}"));
        let merged = Router::new()
            .route("/reports/{year}", get(|| async { "report" }))
            .route_layer(RouteLabelLayer::matched(Arc::clone(metrics)));
        let router = Router::new()
            .route(
                "/orders/{id}",
                axum::routing::on_service(
                    axum::routing::MethodFilter::GET,
                    fixed.layer(tower::service_fn(|_: Request<Body>| async {
                        Ok::<_, Infallible>(axum::response::Response::new(Body::from("order")))
                    })),
                ),
            )
            .merge(merged);
        HttpMetricsLayer::new(Arc::clone(metrics)).layer(router)
    }

    async fn send(
        app: &(
             impl tower::Service<Request<Body>, Response = axum::response::Response, Error = Infallible>
             + Clone
         ),
        method: &str,
        path: &str,
    ) -> StatusCode {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .expect("a request");
        match app.clone().oneshot(request).await {
            Ok(response) => response.status(),
            Err(never) => match never {},
        }
    }

    #[tokio::test]
    async fn requests_are_counted_by_template_and_unmatched_ones_under_one_label() {
        let metrics = Arc::new(HttpMetrics::default());
        let app = app(&metrics);
        assert_eq!(send(&app, "GET", "/orders/1").await, StatusCode::OK);
        assert_eq!(send(&app, "GET", "/orders/2").await, StatusCode::OK);
        assert_eq!(send(&app, "GET", "/reports/2024").await, StatusCode::OK);
        assert_eq!(send(&app, "GET", "/nowhere/1").await, StatusCode::NOT_FOUND);
        assert_eq!(send(&app, "GET", "/nowhere/2").await, StatusCode::NOT_FOUND);
        // A known path, a method it does not take.
        assert_eq!(
            send(&app, "DELETE", "/orders/1").await,
            StatusCode::METHOD_NOT_ALLOWED
        );
        let mut text = String::new();
        prometheus(&mut text, &metrics, &[], None);
        for line in [
            "autumn_http_requests_total{method=\"GET\",route=\"/orders/{id}\",status=\"2xx\"} 2",
            "autumn_http_requests_total{method=\"GET\",route=\"/reports/{year}\",status=\"2xx\"} 1",
            "autumn_http_requests_total{method=\"GET\",route=\"unmatched\",status=\"4xx\"} 2",
            "autumn_http_requests_total{method=\"DELETE\",route=\"unmatched\",status=\"4xx\"} 1",
            "autumn_http_request_duration_seconds_count{method=\"GET\",route=\"/orders/{id}\"} 2",
            "autumn_http_requests_in_flight 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?}:\n{text}");
        }
        assert!(!text.contains("/orders/1"), "never the raw path:\n{text}");
        assert!(!text.contains("/nowhere"), "never the raw path:\n{text}");
    }

    #[tokio::test]
    async fn a_request_dropped_before_its_answer_leaves_the_in_flight_gauge_uncounted() {
        let metrics = Arc::new(HttpMetrics::default());
        let pending = HttpMetricsLayer::new(Arc::clone(&metrics)).layer(tower::service_fn(
            |_: Request<Body>| {
                std::future::pending::<Result<axum::response::Response, Infallible>>()
            },
        ));
        let mut call = Box::pin(pending.oneshot(Request::new(Body::empty())));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(call.as_mut().poll(&mut cx).is_pending());
        assert_eq!(metrics.in_flight(), 1);
        drop(call);
        assert_eq!(metrics.in_flight(), 0);
        let mut text = String::new();
        prometheus(&mut text, &metrics, &[], None);
        assert!(!text.contains("autumn_http_requests_total{"), "{text}");
    }
}
