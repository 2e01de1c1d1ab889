//! An app's layers are applied once, when the app is built: a request only
//! runs them. Served as a bare `Service`, an axum router would apply each
//! route's layers (and Autumn's guards) again on every request, which is
//! slow and would surprise a layer that sets itself up in `Layer::layer`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use autumn_web::prelude::*;
use autumn_web::reexports::axum;
use autumn_web::test::TestApp;
use autumn_web::{Route, RouteIdempotency};

/// Counts how often it is applied; passes requests through untouched.
#[derive(Clone, Default)]
struct CountApplied(Arc<AtomicUsize>);

impl<S> tower::Layer<S> for CountApplied {
    type Service = S;

    fn layer(&self, inner: S) -> S {
        self.0.fetch_add(1, Ordering::SeqCst);
        inner
    }
}

#[post("/orders")]
async fn create_order() -> &'static str {
    "created"
}

async fn list() -> &'static str {
    "listed"
}

#[autumn_web::test]
async fn requests_do_not_apply_the_layers_again() {
    let app_layer = CountApplied::default();
    let route_layer = CountApplied::default();
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![create_order])
            .routes(vec![
                Route::new(http::Method::GET, "/orders", axum::routing::get(list))
                    .with_idempotency(RouteIdempotency::Off)
                    .layer(route_layer.clone()),
            ])
            .layer(app_layer.clone())
            .idempotent(),
    )
    .build();
    let applied = (
        app_layer.0.load(Ordering::SeqCst),
        route_layer.0.load(Ordering::SeqCst),
    );
    assert!(applied.0 >= 1 && applied.1 >= 1, "built in: {applied:?}");
    for n in 0..5 {
        client.get("/orders").send().await.assert_status(200);
        client
            .post("/orders")
            .header("idempotency-key", &format!("k{n}"))
            .send()
            .await
            .assert_status(200);
    }
    assert_eq!(
        (
            app_layer.0.load(Ordering::SeqCst),
            route_layer.0.load(Ordering::SeqCst)
        ),
        applied,
        "ten requests applied no layer again"
    );
}

#[get("/receipts")]
async fn receipts() -> &'static str {
    "receipts"
}

/// A macro route gets the app's layers around its handler function before
/// axum boxes it (once, not twice): axum's method handling is unchanged, a
/// GET route answers HEAD and refuses other methods with `Allow`.
#[autumn_web::test]
async fn macro_routes_keep_axums_method_handling() {
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![create_order, receipts])
            .idempotent(),
    )
    .build();
    let get = client.get("/receipts").send().await;
    get.assert_status(200);
    assert_eq!(get.text(), "receipts");
    let head = client.request(http::Method::HEAD, "/receipts").send().await;
    head.assert_status(200);
    assert!(head.bytes().is_empty(), "HEAD has no body");
    let put = client.request(http::Method::PUT, "/receipts").send().await;
    put.assert_status(405);
    assert_eq!(put.header("allow"), Some("GET,HEAD"));
    let get_orders = client.get("/orders").send().await;
    get_orders.assert_status(405);
    assert_eq!(get_orders.header("allow"), Some("POST"));
}
