//! Errors as each client expects them, through the real launch path: every
//! error Autumn, axum or the server produces is a problem document with a
//! stable `code` for an API client and an HTML page showing the detail for
//! a browser (by `Accept`); the app's own error bodies are left alone; a
//! handler panic answers 500 and the connection stays usable; an app's
//! page replaces the default one.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use autumn_web::config::AutumnConfig;
use autumn_web::error_pages::{ErrorInfo, ErrorPageRenderer};
use autumn_web::idempotency::IdempotencyStore;
use autumn_web::prelude::*;
use autumn_web::reexports::axum::body::Body;
use autumn_web::reexports::axum::response::Response;
use autumn_web::test::{TestApp, TestClient, TestResponse};
use axum::extract::DefaultBodyLimit;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::support::stores::DownStore;

/// `Accept` of an API client.
const API: &str = "application/json";
/// `Accept` of a browser navigating (Chromium's).
const BROWSER: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8";

#[derive(serde::Deserialize, serde::Serialize)]
struct Order {
    item: String,
}

#[post("/orders")]
async fn create_order(Json(order): Json<Order>) -> (StatusCode, String) {
    (StatusCode::CREATED, order.item)
}

#[post("/signup")]
async fn signup(Form(order): Form<Order>) -> String {
    order.item
}

/// A post that waits for GATE (after saying it STARTED).
static STARTED: LazyLock<Notify> = LazyLock::new(Notify::new);
static GATE: LazyLock<Notify> = LazyLock::new(Notify::new);

#[post("/slow")]
async fn slow(body: String) -> String {
    STARTED.notify_one();
    GATE.notified().await;
    body
}

#[get("/forever")]
async fn forever() -> &'static str {
    std::future::pending::<()>().await;
    "never"
}

#[post("/panic")]
async fn panics() -> &'static str {
    panic!("the handler's bug")
}

#[get("/")]
async fn hello() -> &'static str {
    "hi"
}

/// The app's own error bodies, which must pass through untouched.
#[get("/own-html")]
async fn own_html() -> (StatusCode, Markup) {
    (
        StatusCode::BAD_REQUEST,
        html! { h1 { "The app's own page" } },
    )
}

#[get("/own-json")]
async fn own_json() -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::CONFLICT,
        Json(serde_json::json!({ "error": "the app's own" })),
    )
}

/// An app error (problem document without a code) that also sets a cookie.
#[get("/forbidden")]
async fn forbidden() -> Response {
    let mut response = AutumnError::forbidden("you may not <see> this").into_response();
    response.headers_mut().insert(
        http::header::SET_COOKIE,
        http::HeaderValue::from_static("seen=1; Path=/"),
    );
    response
}

fn client() -> TestClient {
    TestApp::new()
        .routes(routes![
            create_order,
            signup,
            hello,
            own_html,
            own_json,
            forbidden
        ])
        .merge(
            axum::Router::new()
                .route(
                    "/small",
                    axum::routing::post(|body: axum::body::Bytes| async move { body }),
                )
                .layer(DefaultBodyLimit::max(8)),
        )
        .build()
}

/// The response is a problem document with this status and code.
fn assert_problem(response: &TestResponse, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(response.status(), status, "{}", response.text());
    assert_eq!(
        response.header("content-type"),
        Some("application/problem+json"),
        "{}",
        response.text()
    );
    let json: serde_json::Value = response.json();
    assert_eq!(json["status"], status, "{json}");
    assert_eq!(json["code"], code, "{json}");
    assert!(
        json["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{json}"
    );
    json
}

/// The response is an HTML page with this status showing `detail`.
fn assert_page(response: &TestResponse, status: u16, detail: &str) -> String {
    assert_eq!(response.status(), status, "{}", response.text());
    assert_eq!(
        response.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let page = response.text();
    assert!(page.starts_with("<!doctype html>"), "{page}");
    assert!(page.contains(&status.to_string()), "{page}");
    assert!(page.contains(detail), "missing {detail:?} in {page}");
    assert!(!page.contains("<script"), "{page}");
    assert!(
        response
            .header("vary")
            .is_some_and(|v| v.contains("accept"))
    );
    page
}

/// Sends the same request as an API client and as a browser.
async fn both_ways(
    request: impl Fn(&'static str) -> autumn_web::test::TestRequest,
) -> (TestResponse, TestResponse) {
    (request(API).send().await, request(BROWSER).send().await)
}

#[tokio::test]
async fn bad_json_is_a_problem_or_a_page() {
    let client = client();
    let (api, browser) = both_ways(|accept| {
        client
            .post("/orders")
            .header("accept", accept)
            .header("content-type", "application/json")
            .body("{\"item\":")
    })
    .await;
    let json = assert_problem(&api, 400, "bad_json");
    let detail = json["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("Failed to parse the request body as JSON"),
        "{detail}"
    );
    assert_page(&browser, 400, "Failed to parse the request body as JSON");
    assert!(browser.text().contains("bad_json"));
}

#[tokio::test]
async fn a_missing_form_field_is_a_problem_or_a_page() {
    let client = client();
    let (api, browser) = both_ways(|accept| {
        client
            .post("/signup")
            .header("accept", accept)
            .form(&[("other", "1")])
    })
    .await;
    let json = assert_problem(&api, 422, "unprocessable_form");
    assert!(
        json["detail"]
            .as_str()
            .is_some_and(|d| d.contains("missing field `item`")),
        "{json}"
    );
    assert_page(&browser, 422, "missing field `item`");
}

#[tokio::test]
async fn a_wrong_content_type_is_a_problem_or_a_page() {
    let client = client();
    let (api, browser) = both_ways(|accept| {
        client
            .post("/orders")
            .header("accept", accept)
            .header("content-type", "text/plain")
            .body("item=1")
    })
    .await;
    assert_problem(&api, 415, "unsupported_media_type");
    assert_page(&browser, 415, "Content-Type: application/json");
}

#[tokio::test]
async fn an_unknown_path_is_a_problem_or_a_page() {
    let client = client();
    let (api, browser) = both_ways(|accept| client.get("/nowhere").header("accept", accept)).await;
    let json = assert_problem(&api, 404, "not_found");
    assert_eq!(json["detail"], "there is nothing at /nowhere");
    assert_page(&browser, 404, "there is nothing at /nowhere");
    // No Accept, or any type: the problem document.
    assert_problem(&client.get("/nowhere").send().await, 404, "not_found");
    assert_problem(
        &client.get("/nowhere").header("accept", "*/*").send().await,
        404,
        "not_found",
    );
}

#[tokio::test]
async fn a_wrong_method_keeps_allow() {
    let client = client();
    let (api, browser) = both_ways(|accept| client.get("/orders").header("accept", accept)).await;
    assert_problem(&api, 405, "method_not_allowed");
    assert_page(&browser, 405, "/orders does not answer GET");
    for response in [&api, &browser] {
        assert_eq!(response.header("allow"), Some("POST"));
    }
}

#[tokio::test]
async fn a_request_timeout_is_a_problem_or_a_page() {
    let config = AutumnConfig::from_toml_str("[server.timeouts]\nrequest_timeout_ms = 50\n")
        .expect("config");
    let client = TestApp::new()
        .routes(routes![forever])
        .with_config(config)
        .build();
    let (api, browser) = both_ways(|accept| client.get("/forever").header("accept", accept)).await;
    assert_problem(&api, 408, "request_timeout");
    assert_page(&browser, 408, "longer than the server allows");
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_problem_or_a_page() {
    let client = client();
    let (api, browser) = both_ways(|accept| {
        client
            .post("/small")
            .header("accept", accept)
            .body("more than eight bytes")
    })
    .await;
    assert_problem(&api, 413, "payload_too_large");
    assert_page(&browser, 413, "length limit exceeded");
}

#[tokio::test]
async fn an_app_error_becomes_a_page_and_keeps_its_cookie() {
    let client = client();
    let (api, browser) =
        both_ways(|accept| client.get("/forbidden").header("accept", accept)).await;
    // The API client gets the app's problem document as it was.
    assert_eq!(api.status(), 403);
    assert_eq!(api.header("content-type"), Some("application/problem+json"));
    let json: serde_json::Value = api.json();
    assert_eq!(json["detail"], "you may not <see> this");
    assert!(json.get("code").is_none(), "{json}");
    let page = assert_page(&browser, 403, "you may not &lt;see&gt; this");
    assert!(!page.contains("<see>"), "{page}");
    for response in [&api, &browser] {
        assert_eq!(response.header("set-cookie"), Some("seen=1; Path=/"));
    }
}

#[tokio::test]
async fn the_apps_own_error_bodies_are_left_alone() {
    let client = client();
    for accept in [API, BROWSER] {
        let html = client
            .get("/own-html")
            .header("accept", accept)
            .send()
            .await;
        assert_eq!(html.status(), 400);
        assert_eq!(html.text(), "<h1>The app's own page</h1>");
        let json = client
            .get("/own-json")
            .header("accept", accept)
            .send()
            .await;
        assert_eq!(json.status(), 409);
        assert_eq!(json.header("content-type"), Some("application/json"));
        assert_eq!(json.text(), r#"{"error":"the app's own"}"#);
    }
}

#[tokio::test]
async fn a_key_in_flight_and_a_reused_key_are_problems_or_pages() {
    let client = TestApp::new().routes(routes![slow]).idempotent().build();
    let key = format!("in-flight-{}", uuid::Uuid::new_v4());
    let started = STARTED.notified();
    let first = tokio::spawn({
        let client = client.clone();
        let key = key.clone();
        async move {
            client
                .post("/slow")
                .header("idempotency-key", &key)
                .body("first")
                .send()
                .await
        }
    });
    started.await;
    let (api, browser) = both_ways(|accept| {
        client
            .post("/slow")
            .header("accept", accept)
            .header("idempotency-key", &key)
            .body("first")
    })
    .await;
    assert_problem(&api, 409, "idempotency_key_in_flight");
    assert_page(&browser, 409, "still being processed");
    for response in [&api, &browser] {
        assert_eq!(response.header("retry-after"), Some("1"));
    }
    GATE.notify_one();
    assert_eq!(first.await.expect("first request").status(), 200);

    let (api, browser) = both_ways(|accept| {
        client
            .post("/slow")
            .header("accept", accept)
            .header("idempotency-key", &key)
            .body("a different body")
    })
    .await;
    assert_problem(&api, 422, "idempotency_key_reused");
    assert_page(&browser, 422, "already used for a different request");
}

#[tokio::test]
async fn a_failing_store_is_a_problem_or_a_page() {
    let store: Arc<dyn IdempotencyStore> = Arc::new(DownStore);
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![create_order])
            .with_idempotency_store(store)
            .idempotent(),
    )
    .build();
    let (api, browser) = both_ways(|accept| {
        client
            .post("/orders")
            .header("accept", accept)
            .header("idempotency-key", "k-503")
            .json(&Order {
                item: "book".into(),
            })
    })
    .await;
    assert_problem(&api, 503, "idempotency_store_unavailable");
    assert_page(&browser, 503, "the idempotency store is unavailable");
    for response in [&api, &browser] {
        assert_eq!(response.header("retry-after"), Some("1"));
    }
}

/// Pages of the app's own: one for 404, a renderer for the rest.
struct Branded;

impl ErrorPageRenderer for Branded {
    fn render(&self, info: &ErrorInfo) -> Option<String> {
        (info.status() == StatusCode::METHOD_NOT_ALLOWED)
            .then(|| format!("<h1>Branded {}</h1>", info.status().as_u16()))
    }
}

#[tokio::test]
async fn the_apps_pages_replace_the_default_ones_for_browsers_only() {
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![hello])
            .with_error_page(StatusCode::NOT_FOUND, |info: &ErrorInfo| {
                html! { h1 { "Lost at " (info.path()) } p.code { (info.code().unwrap_or("")) } }
            })
            .with_error_pages(Branded),
    )
    .build();
    let page = client.get("/lost").header("accept", BROWSER).send().await;
    assert_eq!(page.status(), 404);
    assert_eq!(
        page.text(),
        "<h1>Lost at /lost</h1><p class=\"code\">not_found</p>"
    );
    let branded = client.post("/").header("accept", BROWSER).send().await;
    assert_eq!(branded.status(), 405);
    assert_eq!(branded.text(), "<h1>Branded 405</h1>");
    // Statuses neither covers get the default page.
    let config = AutumnConfig::from_toml_str("[server.timeouts]\nrequest_timeout_ms = 50\n")
        .expect("config");
    let default = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![forever])
            .with_error_pages(Branded),
    )
    .with_config(config)
    .build()
    .get("/forever")
    .header("accept", BROWSER)
    .send()
    .await;
    assert_page(&default, 408, "longer than the server allows");
    // API clients keep the problem document.
    assert_problem(
        &client.get("/lost").header("accept", API).send().await,
        404,
        "not_found",
    );
}

// Through the real server and raw sockets.

/// A served app, stopped when dropped.
struct Server {
    address: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn serve(toml: &str) -> Server {
    let config = AutumnConfig::from_toml_str(toml).expect("test configuration");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
    let address = listener.local_addr().expect("bound address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        autumn_web::app()
            .routes(routes![hello, panics, bare_head])
            .idempotent()
            .with_config(config)
            .serve(listener, async move {
                let _ = stopped.await;
            }),
    );
    Server {
        address,
        _stop: stop,
    }
}

/// Reads one response with a `content-length` body: its head and body.
async fn read_response(stream: &mut TcpStream) -> (String, String) {
    let mut received = Vec::new();
    let read = async {
        loop {
            let text = String::from_utf8_lossy(&received).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if body.len() >= length {
                    return (head.to_owned(), body[..length].to_owned());
                }
            }
            let mut chunk = [0_u8; 4096];
            let n = stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the connection closed after {text:?}");
            received.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a response within 10s")
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (n, value) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

#[tokio::test]
async fn a_panicking_handler_answers_500_and_the_connection_stays_usable() {
    let server = serve("").await;
    let mut stream = TcpStream::connect(server.address).await.expect("connect");
    let mut n = 0;
    for key in [None, Some("panic-key")] {
        for accept in [API, BROWSER] {
            n += 1;
            // A new key each time: a panic records nothing, but the key's
            // fingerprint must match the request it is reused for anyway.
            let key = key
                .map(|key| format!("idempotency-key: {key}-{n}\r\n"))
                .unwrap_or_default();
            let request = format!(
                "POST /panic HTTP/1.1\r\nhost: test\r\naccept: {accept}\r\n{key}content-length: 0\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).await.expect("write");
            let (head, body) = read_response(&mut stream).await;
            assert!(head.starts_with("HTTP/1.1 500"), "{head}");
            if accept == API {
                assert_eq!(
                    header(&head, "content-type"),
                    Some("application/problem+json")
                );
                let json: serde_json::Value = serde_json::from_str(&body).expect("json");
                assert_eq!(json["code"], "internal_error", "{json}");
                assert!(!body.contains("the handler's bug"), "{body}");
            } else {
                assert_eq!(
                    header(&head, "content-type"),
                    Some("text/html; charset=utf-8")
                );
                assert!(
                    body.contains("the server failed while handling this request"),
                    "{body}"
                );
            }
            // The same connection answers the next request.
            stream
                .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
                .await
                .expect("write");
            let (head, body) = read_response(&mut stream).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert_eq!(body, "hi");
        }
    }
}

#[tokio::test]
async fn a_head_over_max_header_bytes_gets_a_problem_document() {
    let server = serve("[server]\nmax_header_bytes = 2048\n").await;
    let mut stream = TcpStream::connect(server.address).await.expect("connect");
    let request = format!(
        "GET / HTTP/1.1\r\nhost: test\r\naccept: {BROWSER}\r\nx-big: {}\r\n\r\n",
        "a".repeat(4096)
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let (head, body) = read_response(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 431"), "{head}");
    // The head was never parsed: whoever asked gets the problem document.
    assert_eq!(
        header(&head, "content-type"),
        Some("application/problem+json"),
        "{head:?}"
    );
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(json["code"], "request_header_fields_too_large", "{json}");
    assert_eq!(json["status"], 431);
}

#[tokio::test]
async fn an_unparseable_request_gets_a_problem_document() {
    let server = serve("").await;
    let mut stream = TcpStream::connect(server.address).await.expect("connect");
    stream
        .write_all(b"GET / HTTP/1.1\r\nbad header line\r\n\r\n")
        .await
        .expect("write");
    let (head, body) = read_response(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(json["code"], "bad_request", "{json}");
}

/// The panic test's flag that the guard path was used is its status code;
/// this one proves the keyed panic released its key: a retry runs again.
static RETRIED: AtomicBool = AtomicBool::new(false);

#[post("/panic-once")]
async fn panics_once() -> &'static str {
    if !RETRIED.swap(true, Ordering::SeqCst) {
        panic!("first try");
    }
    "second try"
}

#[tokio::test]
async fn a_keyed_panic_is_not_recorded_so_a_retry_runs() {
    let client = TestApp::new()
        .routes(routes![panics_once])
        .idempotent()
        .build();
    let first = client
        .post("/panic-once")
        .header("accept", API)
        .header("idempotency-key", "panic-once")
        .send()
        .await;
    assert_problem(&first, 500, "internal_error");
    let retry = client
        .post("/panic-once")
        .header("idempotency-key", "panic-once")
        .send()
        .await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.text(), "second try");
}

/// hyper's own bare 400 head, byte for byte: what the socket under hyper
/// used to rewrite wherever it saw it.
const BARE_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n";

/// Lets `/bare-head` send its second chunk.
static SECOND_CHUNK: Notify = Notify::const_new();

/// A body of two chunks, the second exactly [`BARE_400`], sent once the
/// test has read the first: so it reaches the socket as a write of its own.
#[get("/bare-head")]
async fn bare_head() -> Response {
    let chunks = futures_util::stream::unfold(0_u8, |step| async move {
        match step {
            0 => Some((
                Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"first|")),
                1,
            )),
            1 => {
                SECOND_CHUNK.notified().await;
                Some((Ok(bytes::Bytes::from_static(BARE_400)), 2))
            }
            _ => None,
        }
    });
    Response::builder()
        .header("content-type", "application/octet-stream")
        .header(
            "content-length",
            (b"first|".len() + BARE_400.len()).to_string(),
        )
        .body(Body::from_stream(chunks))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_body_chunk_equal_to_hypers_bare_head_passes_through_untouched() {
    let server = serve("").await;
    let mut stream = TcpStream::connect(server.address).await.expect("connect");
    stream
        .write_all(b"GET /bare-head HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .expect("write");
    // The head and the first chunk, before the second is let go.
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while !received.ends_with(b"first|") {
            let mut chunk = [0_u8; 4096];
            let n = stream.read(&mut chunk).await.expect("read");
            assert!(
                n > 0,
                "closed after {:?}",
                String::from_utf8_lossy(&received)
            );
            received.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("the first chunk within 10 s");
    SECOND_CHUNK.notify_one();
    let text = String::from_utf8_lossy(&received).into_owned();
    let (head, first) = text.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(first, "first|");
    let mut rest = vec![0_u8; BARE_400.len()];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut rest))
        .await
        .expect("the second chunk within 10 s")
        .expect("read");
    assert_eq!(
        rest,
        BARE_400,
        "the app's bytes as it wrote them: {:?}",
        String::from_utf8_lossy(&rest)
    );

    // The connection is still in step: the next request is answered...
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .expect("write");
    let (head, body) = read_response(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "hi");
    // ...and hyper's own refusal on it still gets its problem document.
    stream
        .write_all(b"GET / HTTP/1.1\r\nbad header line\r\n\r\n")
        .await
        .expect("write");
    let (head, body) = read_response(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(json["code"], "bad_request", "{json}");
}
