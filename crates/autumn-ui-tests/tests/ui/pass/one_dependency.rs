//! What the guides show, written with `autumn_web` (and `serde`) alone:
//! `html!`, `State`, the prelude's extractors and `#[autumn_web::test]`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use autumn_web::prelude::*;
use autumn_web::test::{TestApp, Value, json};

#[derive(Clone)]
struct Visits(Arc<AtomicU64>);

#[derive(serde::Deserialize)]
struct Search {
    q: String,
}

#[get("/hello/{name}")]
async fn hello(
    Path(name): Path<String>,
    Query(search): Query<Search>,
    State(visits): State<Visits>,
    headers: HeaderMap,
) -> Markup {
    let seen = visits.0.fetch_add(1, Ordering::Relaxed) + 1;
    html! {
        (DOCTYPE)
        h1 { "Hello, " (name) }
        p { "visit " (seen) ", search " (search.q) }
        @if headers.contains_key("x-debug") { p { "debug" } }
    }
}

#[post("/echo")]
async fn echo(Json(value): Json<Value>) -> Json<Value> {
    Json(value)
}

async fn scenario() {
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![hello, echo])
            .with_state(Visits(Arc::new(AtomicU64::new(0)))),
    )
    .build();
    let page = client.get("/hello/ada?q=%3Cb%3E").send().await;
    page.assert_ok();
    assert!(page.text().contains("<h1>Hello, ada</h1>"));
    assert!(page.text().contains("search &lt;b&gt;"));
    let echoed = client.post("/echo").json(&json!({"a": 1})).send().await;
    assert_eq!(echoed.json::<Value>()["a"], 1);
}

// trybuild builds a binary, where `#[test]` functions are compiled out:
// `main` runs the scenario so it is checked, and run.
#[autumn_web::test]
async fn renders_with_state() {
    scenario().await;
}

#[autumn_web::main]
async fn main() {
    scenario().await;
}
