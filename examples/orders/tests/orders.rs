//! The orders API under TestApp, and the real binary over a socket.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

use autumn_web::test::TestApp;
use orders::{Order, Orders};
use serde_json::json;

#[tokio::test]
async fn create_list_and_reject() {
    let orders = Orders::default();
    let client = TestApp::from_builder(orders::app(orders.clone())).build();

    let created = client
        .post("/orders")
        .json(&json!({"item": "widget", "qty": 2}))
        .send()
        .await;
    created.assert_status(201);
    let order: Order = created.json();
    assert_eq!((order.item.as_str(), order.qty), ("widget", 2));

    let listed: Vec<Order> = client.get("/orders").send().await.json();
    assert_eq!(listed, vec![order]);

    for bad in [
        json!({"item": " ", "qty": 1}),
        json!({"item": "widget", "qty": 0}),
    ] {
        let rejected = client.post("/orders").json(&bad).send().await;
        rejected.assert_status(422);
        assert_eq!(
            rejected.header("content-type"),
            Some("application/problem+json")
        );
    }
    assert_eq!(orders.len(), 1, "a rejected order creates nothing");
}

#[tokio::test]
async fn a_retried_order_is_created_once() {
    let orders = Orders::default();
    let client = TestApp::from_builder(orders::app(orders.clone())).build();
    let send = || {
        client
            .post("/orders")
            .header("idempotency-key", "order-1")
            .json(&json!({"item": "widget", "qty": 2}))
            .send()
    };
    let first = send().await;
    let retry = send().await;
    retry.assert_header("x-idempotent-replayed", "true");
    assert_eq!(first.json::<Order>(), retry.json::<Order>());
    assert_eq!(orders.len(), 1);
}

/// The built binary, killed when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_binary() -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_orders"))
        .env("AUTUMN_SERVER__PORT", "0")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the orders binary starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("the server logs its address before exiting")
            .expect("readable log");
        if let Some(at) = line.find("listening on http://") {
            let url = &line[at + "listening on ".len()..];
            let end = url
                .find(|c: char| c.is_whitespace() || c.is_control())
                .unwrap_or(url.len());
            break url[..end].to_owned();
        }
    };
    // Keep draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Server { child, base }
}

async fn http(method: &str, url: &str, key: Option<&str>, body: &str) -> (u16, String) {
    use http_body_util::BodyExt as _;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut request = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .expect("request");
    let response = client.request(request).await.expect("the server answers");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn the_binary_serves_on_the_configured_port() {
    let server = start_binary();
    let orders = format!("{}/orders", server.base);
    let order = r#"{"item":"widget","qty":2}"#;

    let (status, first) = http("POST", &orders, Some("k1"), order).await;
    assert_eq!(status, 201, "{first}");
    let (status, replay) = http("POST", &orders, Some("k1"), order).await;
    assert_eq!((status, &replay), (201, &first));
    let (status, _) = http("POST", &orders, Some("k1"), r#"{"item":"gadget","qty":1}"#).await;
    assert_eq!(status, 422);
    let (status, _) = http("POST", &orders, None, r#"{"item":"","qty":1}"#).await;
    assert_eq!(status, 422);

    let (status, listed) = http("GET", &orders, None, "").await;
    assert_eq!(status, 200);
    let listed: Vec<Order> = serde_json::from_str(&listed).expect("JSON list");
    assert_eq!(listed.len(), 1);
}
