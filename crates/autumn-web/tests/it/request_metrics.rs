//! The request metrics at `/actuator/prometheus` and `/actuator/metrics`,
//! through the real launch path: requests are counted by route template
//! (never the raw path) and unknown paths under one label, with their
//! durations; the in-flight gauge follows a handler that waits; the open
//! connections follow real sockets on a served app; the idempotency store's
//! round trips are timed by backend and operation; the database pool's
//! connections in use are reported.

use std::net::SocketAddr;
use std::time::Duration;

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

#[get("/orders/{id}")]
async fn order(Path(id): Path<u32>) -> String {
    format!("order {id}")
}

#[post("/orders")]
async fn create() -> (StatusCode, &'static str) {
    (StatusCode::CREATED, "order 1")
}

/// The metrics served on the app's port.
fn config(extra: &str) -> AutumnConfig {
    AutumnConfig::from_toml_str(&format!("[actuator]\nmetrics_on_app_port = true\n{extra}"))
        .expect("config")
}

fn app(routes: Vec<Route>, extra: &str) -> TestClient {
    TestApp::from_builder(autumn_web::app().routes(routes).idempotent())
        .with_config(config(extra))
        .build()
}

async fn prometheus(client: &TestClient) -> String {
    let response = client.get("/actuator/prometheus").send().await;
    response.assert_ok();
    response.text()
}

async fn metrics(client: &TestClient) -> Value {
    let response = client.get("/actuator/metrics").send().await;
    response.assert_ok();
    response.json()
}

#[track_caller]
fn assert_lines(text: &str, lines: &[&str]) {
    for line in lines {
        assert!(
            text.lines().any(|l| l == *line),
            "missing {line:?}:\n{text}"
        );
    }
}

#[tokio::test]
async fn two_paths_of_one_route_are_one_series_under_its_template() {
    let client = app(routes![order], "");
    for path in ["/orders/1", "/orders/2"] {
        client.get(path).send().await.assert_ok();
    }
    let text = prometheus(&client).await;
    assert_lines(
        &text,
        &[
            "# TYPE autumn_http_requests_total counter",
            "autumn_http_requests_total{method=\"GET\",route=\"/orders/{id}\",status=\"2xx\"} 2",
            "# TYPE autumn_http_request_duration_seconds histogram",
            "autumn_http_request_duration_seconds_bucket{method=\"GET\",route=\"/orders/{id}\",le=\"+Inf\"} 2",
            "autumn_http_request_duration_seconds_count{method=\"GET\",route=\"/orders/{id}\"} 2",
        ],
    );
    let series: Vec<_> = text
        .lines()
        .filter(|l| l.starts_with("autumn_http_requests_total{") && l.contains("/orders"))
        .collect();
    assert_eq!(series.len(), 1, "one series for both paths: {series:?}");
    assert!(!text.contains("/orders/1"), "never the raw path:\n{text}");
    assert!(!text.contains("/orders/2"), "never the raw path:\n{text}");
    // The sum is seconds: two requests in a test take well under one.
    let sum: f64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "autumn_http_request_duration_seconds_sum{method=\"GET\",route=\"/orders/{id}\"} ",
            )
        })
        .and_then(|value| value.parse().ok())
        .expect("a sum");
    assert!(sum > 0.0 && sum < 1.0, "{sum}");

    let report = metrics(&client).await;
    let orders: Vec<_> = report["http"]["requests"]
        .as_array()
        .expect("a list of series")
        .iter()
        .filter(|series| series["route"] == "/orders/{id}")
        .collect();
    assert_eq!(orders.len(), 1, "{report}");
    assert_eq!(orders[0]["method"], "GET", "{report}");
    assert_eq!(orders[0]["count"], 2, "{report}");
    assert_eq!(orders[0]["statuses"]["2xx"], 2, "{report}");
    let buckets = orders[0]["duration"]["buckets"]
        .as_array()
        .expect("the buckets, in order");
    assert_eq!(buckets.len(), 12, "{report}");
    assert_eq!(buckets[0]["le"], "0.005", "{report}");
    assert_eq!(buckets[11], serde_json::json!({"le": "+Inf", "count": 2}));
}

#[tokio::test]
async fn unknown_paths_and_methods_are_counted_under_one_label_each() {
    let client = app(routes![order], "");
    for path in ["/nowhere/1", "/nowhere/2", "/orders/1/extra"] {
        client
            .get(path)
            .send()
            .await
            .assert_status(StatusCode::NOT_FOUND);
    }
    let purge = http::Method::from_bytes(b"PURGE").expect("a method");
    let status = client.request(purge, "/orders/1").send().await.status();
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let text = prometheus(&client).await;
    assert_lines(
        &text,
        &[
            "autumn_http_requests_total{method=\"GET\",route=\"unmatched\",status=\"4xx\"} 3",
            "autumn_http_requests_total{method=\"other\",route=\"unmatched\",status=\"4xx\"} 1",
        ],
    );
    assert!(!text.contains("nowhere"), "{text}");
    assert!(!text.contains("PURGE"), "{text}");
    // The scrapes are counted like any route.
    client.get("/actuator/prometheus").send().await.assert_ok();
    let text = prometheus(&client).await;
    assert_lines(
        &text,
        &[
            "autumn_http_requests_total{method=\"GET\",route=\"/actuator/prometheus\",status=\"2xx\"} 2",
        ],
    );
}

/// Set once [`wait`] runs.
static WAITING: tokio::sync::Notify = tokio::sync::Notify::const_new();
/// Lets [`wait`] answer.
static ANSWER: tokio::sync::Notify = tokio::sync::Notify::const_new();

#[get("/wait")]
async fn wait() -> &'static str {
    WAITING.notify_one();
    ANSWER.notified().await;
    "answered"
}

#[tokio::test]
async fn a_request_is_in_flight_while_its_handler_waits_and_not_after() {
    let client = app(routes![wait], "");
    // The scrape that reads the gauge is in flight itself.
    assert_eq!(metrics(&client).await["http"]["in_flight"], 1);
    let waiting = tokio::spawn({
        let client = client.clone();
        async move { client.get("/wait").send().await.text() }
    });
    WAITING.notified().await;
    let report = metrics(&client).await;
    assert_eq!(report["http"]["in_flight"], 2, "{report}");
    assert_lines(
        &prometheus(&client).await,
        &["autumn_http_requests_in_flight 2"],
    );

    ANSWER.notify_one();
    assert_eq!(waiting.await.expect("the request ran"), "answered");
    let report = metrics(&client).await;
    assert_eq!(report["http"]["in_flight"], 1, "{report}");
    let answered = report["http"]["requests"]
        .as_array()
        .expect("a list of series")
        .iter()
        .find(|series| series["route"] == "/wait")
        .cloned();
    assert_eq!(
        answered.map(|series| series["count"].clone()),
        Some(1.into()),
        "{report}"
    );
}

/// Reads one response with a `content-length` body from `stream`.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut chunk = [0_u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&received);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .expect("a content-length");
            if body.len() >= length {
                return text.into_owned();
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("an answer within 10 s")
            .expect("read");
        assert!(n > 0, "closed before the answer: {text}");
        received.extend_from_slice(&chunk[..n]);
    }
}

/// The open connections the app reports, asked on `stream` (kept alive).
async fn connections_open(stream: &mut TcpStream) -> u64 {
    stream
        .write_all(b"GET /actuator/prometheus HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .expect("send");
    let response = read_response(stream).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
        .lines()
        .find_map(|l| l.strip_prefix("autumn_http_connections_open "))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no connections gauge: {response}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_connections_count_kept_alive_sockets_until_they_close() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind port 0");
    let address: SocketAddr = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(
        autumn_web::app()
            .routes(routes![order])
            .with_config(config(""))
            .serve(listener, async move {
                let _ = stopped.await;
            }),
    );
    let mut first = TcpStream::connect(address).await.expect("connect");
    assert_eq!(connections_open(&mut first).await, 1);
    let mut second = TcpStream::connect(address).await.expect("connect");
    assert_eq!(connections_open(&mut second).await, 2);
    assert_eq!(connections_open(&mut first).await, 2, "both kept alive");

    drop(second);
    // The server learns of the close when it next reads that socket: ask
    // again (each question a round trip) until it has, within a bound.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let open = connections_open(&mut first).await;
        if open == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the closed connection still counts: {open} open"
        );
        tokio::task::yield_now().await;
    }

    drop(first);
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the server stops")
        .expect("the server task")
        .expect("served cleanly");
}

#[tokio::test]
async fn the_idempotency_stores_round_trips_are_timed_by_backend_and_operation() {
    let client = app(routes![create], "");
    for _ in 0..2 {
        client
            .post("/orders")
            .header("idempotency-key", "timed-key")
            .send()
            .await
            .assert_status(StatusCode::CREATED);
    }
    let text = prometheus(&client).await;
    // A first run claims and finishes; its replay claims.
    assert_lines(
        &text,
        &[
            "# TYPE autumn_store_duration_seconds histogram",
            "autumn_store_duration_seconds_count{store=\"idempotency\",backend=\"memory\",op=\"claim\"} 2",
            "autumn_store_duration_seconds_count{store=\"idempotency\",backend=\"memory\",op=\"finish\"} 1",
            "autumn_store_duration_seconds_bucket{store=\"idempotency\",backend=\"memory\",op=\"claim\",le=\"+Inf\"} 2",
        ],
    );
    let report = metrics(&client).await;
    let claims = report["stores"]
        .as_array()
        .expect("a list of stores")
        .iter()
        .find(|entry| entry["store"] == "idempotency" && entry["op"] == "claim")
        .cloned()
        .unwrap_or_default();
    assert_eq!(claims["backend"], "memory", "{report}");
    assert_eq!(claims["count"], 2, "{report}");
}

#[cfg(feature = "sqlite")]
mod pool {
    use super::*;
    use autumn_web::db::{Db, SqliteConnection};

    /// Set once [`hold`] holds a connection.
    static HOLDING: tokio::sync::Notify = tokio::sync::Notify::const_new();
    /// Lets [`hold`] give it back.
    static RELEASE: tokio::sync::Notify = tokio::sync::Notify::const_new();

    #[get("/hold")]
    async fn hold(db: Db<SqliteConnection>) -> &'static str {
        HOLDING.notify_one();
        RELEASE.notified().await;
        drop(db);
        "released"
    }

    #[tokio::test]
    async fn the_database_pool_reports_its_connections_in_use_and_idle() {
        let url = crate::support::database::fresh_sqlite_file();
        let client = TestApp::from_builder(autumn_web::app().routes(routes![hold]))
            .with_config(config(&format!(
                "[database]\nurl = \"{url}\"\npool_size = 3\n"
            )))
            .build();
        let held = tokio::spawn({
            let client = client.clone();
            async move { client.get("/hold").send().await.text() }
        });
        HOLDING.notified().await;
        let text = prometheus(&client).await;
        assert_lines(
            &text,
            &[
                "# TYPE autumn_db_pool_connections gauge",
                "autumn_db_pool_connections{state=\"in_use\"} 1",
                "autumn_db_pool_max_connections 3",
                "autumn_db_pool_waiting 0",
            ],
        );
        assert_eq!(metrics(&client).await["db_pool"]["in_use"], 1);

        RELEASE.notify_one();
        assert_eq!(held.await.expect("the handler ran"), "released");
        let report = metrics(&client).await;
        assert_eq!(report["db_pool"]["in_use"], 0, "{report}");
        assert_eq!(report["db_pool"]["max"], 3, "{report}");
        assert!(report["db_pool"]["idle"].as_u64() >= Some(1), "{report}");
    }
}
