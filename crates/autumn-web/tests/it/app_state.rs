//! App state: `with_state` shares values with handlers and middleware
//! through `State<S>`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use autumn_web::prelude::*;
use autumn_web::reexports::axum;
use autumn_web::test::{TestApp, Value};

#[derive(Clone, Default)]
struct Counter(Arc<AtomicU64>);

#[derive(Clone)]
struct Greeting(&'static str);

#[post("/count")]
async fn count(State(counter): State<Counter>) -> String {
    (counter.0.fetch_add(1, Ordering::SeqCst) + 1).to_string()
}

#[get("/greet")]
async fn greet(State(greeting): State<Greeting>, State(counter): State<Counter>) -> String {
    format!("{} #{}", greeting.0, counter.0.load(Ordering::SeqCst))
}

#[autumn_web::test]
async fn handlers_share_the_registered_value() {
    let counter = Counter::default();
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![count, greet])
            .with_state(counter.clone())
            .with_state(Greeting("hello")),
    )
    .build();
    assert_eq!(client.post("/count").send().await.text(), "1");
    assert_eq!(client.post("/count").send().await.text(), "2");
    assert_eq!(client.get("/greet").send().await.text(), "hello #2");
    // The handlers' clones share the test's value.
    assert_eq!(counter.0.load(Ordering::SeqCst), 2);
}

#[autumn_web::test]
async fn registering_a_type_again_replaces_it() {
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![greet])
            .with_state(Counter::default())
            .with_state(Greeting("first"))
            .with_state(Greeting("second")),
    )
    .build();
    assert_eq!(client.get("/greet").send().await.text(), "second #0");
}

#[autumn_web::test]
async fn a_state_nobody_registered_is_a_readable_500() {
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![greet])
            .with_state(Counter::default()),
    )
    .build();
    let response = client.get("/greet").send().await;
    response.assert_status(500);
    assert_eq!(
        response.header("content-type"),
        Some("application/problem+json")
    );
    let problem: Value = response.json();
    assert_eq!(problem["code"], "state_missing");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("Greeting"), "{detail}");
    assert!(detail.contains("with_state"), "{detail}");
}

#[autumn_web::test]
async fn an_app_state_is_not_an_extension_of_the_same_type() {
    // Registered under Autumn's own wrapper: an app's `Extension<Greeting>`
    // does not stand in for it, nor the other way round.
    #[get("/ext")]
    async fn ext(greeting: Option<Extension<Greeting>>) -> &'static str {
        greeting.map_or("none", |Extension(g)| g.0)
    }
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![ext, greet])
            .layer(Extension(Greeting("extension"))),
    )
    .build();
    assert_eq!(client.get("/ext").send().await.text(), "extension");
    client.get("/greet").send().await.assert_status(500);
}

#[autumn_web::test]
async fn the_apps_middleware_reads_the_state() {
    async fn stamp(
        State(greeting): State<Greeting>,
        request: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> Response {
        let mut response = next.run(request).await;
        response
            .headers_mut()
            .insert("x-greeting", http_value(greeting.0));
        response
    }
    fn http_value(value: &'static str) -> autumn_web::test::HeaderValue {
        autumn_web::test::HeaderValue::from_static(value)
    }
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![count])
            .layer(axum::middleware::from_fn(stamp))
            .with_state(Counter::default())
            .with_state(Greeting("hi")),
    )
    .build();
    let response = client.post("/count").send().await;
    response.assert_ok().assert_header("x-greeting", "hi");
}

#[autumn_web::test]
async fn a_replayed_retry_does_not_run_the_handler_again() {
    let counter = Counter::default();
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![count])
            .with_state(counter.clone())
            .idempotent(),
    )
    .build();
    for _ in 0..3 {
        let response = client
            .post("/count")
            .header("idempotency-key", "k1")
            .send()
            .await;
        assert_eq!(response.text(), "1");
    }
    assert_eq!(counter.0.load(Ordering::SeqCst), 1);
}
