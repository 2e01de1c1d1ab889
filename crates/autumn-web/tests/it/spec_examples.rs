//! The spec's own examples, as written, compile and pass.

use std::sync::Arc;
use std::time::Duration;

use autumn_web::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
use autumn_web::prelude::*;
use autumn_web::test::TestApp;
use autumn_web::{post, routes};
use tower::ServiceExt as _;

#[tokio::test]
async fn duplicate_post_replays() {
    #[post("/orders")]
    async fn create() -> &'static str {
        "created"
    }

    let client = TestApp::new().routes(routes![create]).idempotent().build();

    let r1 = client
        .post("/orders")
        .header("idempotency-key", "test-key-1")
        .send()
        .await;
    r1.assert_ok();
    assert_eq!(r1.header("x-idempotent-replayed"), None);

    let r2 = client
        .post("/orders")
        .header("idempotency-key", "test-key-1")
        .send()
        .await;
    r2.assert_ok();
    assert_eq!(r2.header("x-idempotent-replayed"), Some("true"));
}

#[tokio::test]
async fn the_layer_wraps_a_raw_axum_router() {
    async fn handler(body: String) -> String {
        format!("echo {body}")
    }

    let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
    let layer = IdempotencyLayer::new(store.clone() as Arc<_>);

    let app = axum::Router::new()
        .route("/echo", axum::routing::post(handler))
        .layer(layer);

    let request = || {
        http::Request::post("/echo")
            .header("idempotency-key", "raw-1")
            .body(axum::body::Body::from("hi"))
            .expect("request")
    };
    let first = app.clone().oneshot(request()).await.expect("infallible");
    assert!(first.headers().get("x-idempotent-replayed").is_none());
    let second = app.oneshot(request()).await.expect("infallible");
    assert_eq!(second.headers()["x-idempotent-replayed"], "true");
    assert!(!store.is_empty());
}

#[derive(serde::Deserialize)]
struct CreateForm {
    title: String,
}

#[get("/form")]
async fn form() -> Markup {
    html! {
        form method="POST" action="/submit" {
            input type="text" name="title";
            button { "Submit" }
        }
    }
}

#[post("/submit")]
async fn submit(Form(form): Form<CreateForm>) -> AutumnResult<Redirect> {
    if form.title.trim().is_empty() {
        return Err(AutumnError::unprocessable("title must not be blank"));
    }
    Ok(Redirect::to("/thanks"))
}

#[tokio::test]
async fn a_maud_form_page_and_a_form_post_run_under_test_app() {
    let client = TestApp::new().routes(routes![form, submit]).build();

    let page = client.get("/form").send().await;
    page.assert_ok();
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(
        page.text()
            .contains(r#"<form method="POST" action="/submit">"#)
    );

    #[derive(serde::Serialize)]
    struct Filled<'a> {
        title: &'a str,
        _submit_token: &'a str,
    }
    let posted = client
        .post("/submit")
        .form(&Filled {
            title: "Hello",
            _submit_token: "ignored-by-serde",
        })
        .send()
        .await;
    posted.assert_status(StatusCode::SEE_OTHER);
    assert_eq!(posted.header("location"), Some("/thanks"));

    let blank = client.post("/submit").form(&[("title", " ")]).send().await;
    blank.assert_status(422);
    assert_eq!(
        blank.header("content-type"),
        Some("application/problem+json")
    );
    assert!(blank.text().contains("title must not be blank"));
}
