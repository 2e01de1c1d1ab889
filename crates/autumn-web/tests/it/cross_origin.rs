//! Cross-origin protection through the app builder: a mutating request that
//! a browser sends for another site is refused with 403 before any app
//! layer, guard, store or handler sees it; same-origin pages, trusted
//! origins, exempt paths, safe methods and clients that are not browsers
//! pass. One test goes through the real server, where `Host` comes off the
//! wire.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use crate::support::stores::CountingStore;

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient, TestResponse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Handler runs per transfer memo (tests run in parallel: each uses its own
/// memos).
static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

#[derive(serde::Deserialize)]
struct Transfer {
    memo: String,
}

#[post("/transfer")]
async fn transfer(Form(transfer): Form<Transfer>) -> Redirect {
    *RUNS
        .lock()
        .expect("counts")
        .entry(transfer.memo)
        .or_default() += 1;
    Redirect::to("/done")
}

#[post("/api/hooks")]
async fn api_hook(Form(transfer): Form<Transfer>) -> StatusCode {
    *RUNS
        .lock()
        .expect("counts")
        .entry(transfer.memo)
        .or_default() += 1;
    StatusCode::NO_CONTENT
}

#[post("/apiary")]
async fn apiary(Form(transfer): Form<Transfer>) -> StatusCode {
    *RUNS
        .lock()
        .expect("counts")
        .entry(transfer.memo)
        .or_default() += 1;
    StatusCode::NO_CONTENT
}

#[get("/balance")]
async fn balance() -> &'static str {
    "100"
}

fn runs(memo: &str) -> usize {
    RUNS.lock().expect("counts").get(memo).copied().unwrap_or(0)
}

fn client(toml: &str) -> TestClient {
    TestApp::new()
        .routes(routes![transfer, api_hook, apiary, balance])
        .with_config(AutumnConfig::from_toml_str(toml).expect("config"))
        .build()
}

/// A form post of `memo` to `path` with these headers.
async fn post(
    client: &TestClient,
    path: &str,
    memo: &str,
    headers: &[(&str, &str)],
) -> TestResponse {
    let mut request = client.post(path);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    request.form(&[("memo", memo)]).send().await
}

/// Asserts the refusal's problem document and returns its detail.
#[track_caller]
fn assert_refused(response: &TestResponse) -> String {
    response
        .assert_status(403)
        .assert_header("content-type", "application/problem+json");
    let problem: serde_json::Value = response.json();
    assert_eq!(problem["code"], "cross_origin_request_refused", "{problem}");
    assert_eq!(problem["status"], 403, "{problem}");
    problem["detail"].as_str().expect("a detail").to_owned()
}

const EVIL: &str = "https://evil.example";

#[tokio::test]
async fn a_cross_site_form_post_is_refused_before_the_handler() {
    let client = client("");
    let memo = "cross-site";
    let response = post(
        &client,
        "/transfer",
        memo,
        &[("sec-fetch-site", "cross-site"), ("origin", EVIL)],
    )
    .await;
    let detail = assert_refused(&response);
    assert!(detail.contains(EVIL), "names the origin: {detail}");
    assert!(
        detail.contains("[security.cross_origin] trusted_origins"),
        "says how to trust it: {detail}"
    );
    assert_eq!(runs(memo), 0);

    // A sibling subdomain is another origin too.
    let response = post(
        &client,
        "/transfer",
        memo,
        &[
            ("sec-fetch-site", "same-site"),
            ("origin", "https://blog.bank.example"),
        ],
    )
    .await;
    assert_refused(&response);
    assert_eq!(runs(memo), 0);
}

#[tokio::test]
async fn same_origin_and_user_initiated_requests_pass() {
    let client = client("");
    for (site, memo) in [("same-origin", "same-origin"), ("none", "typed-in")] {
        let response = post(
            &client,
            "/transfer",
            memo,
            // A same-origin page's Origin is never compared: the browser's
            // word is enough, whatever the Host.
            &[("sec-fetch-site", site), ("origin", "https://bank.example")],
        )
        .await;
        response.assert_status(303);
        assert_eq!(runs(memo), 1, "{site}");
    }
}

#[tokio::test]
async fn clients_that_are_not_browsers_pass() {
    let client = client("");
    let memo = "curl";
    post(&client, "/transfer", memo, &[])
        .await
        .assert_status(303);
    assert_eq!(runs(memo), 1);
}

#[tokio::test]
async fn without_sec_fetch_site_the_origin_must_be_the_host() {
    let client = client("");
    let memo = "old-browser";
    let refused = post(&client, "/transfer", memo, &[("origin", EVIL)]).await;
    let detail = assert_refused(&refused);
    assert!(detail.contains(EVIL), "{detail}");
    assert!(detail.contains("localhost"), "names the host: {detail}");
    for origin in [
        "null",
        "http://localhost.evil.example",
        "http://localhost:8080",
    ] {
        let refused = post(&client, "/transfer", memo, &[("origin", origin)]).await;
        assert_refused(&refused);
    }
    assert_eq!(runs(memo), 0);

    // TestApp's requests carry `Host: localhost`, as through `run()`.
    post(
        &client,
        "/transfer",
        memo,
        &[("origin", "http://localhost")],
    )
    .await
    .assert_status(303);
    // Only host and port are compared: `Host` has no scheme.
    post(
        &client,
        "/transfer",
        memo,
        &[
            ("host", "Bank.Example:8443"),
            ("origin", "https://bank.example:8443"),
        ],
    )
    .await
    .assert_status(303);
    assert_eq!(runs(memo), 2);
}

#[tokio::test]
async fn a_trusted_origin_passes() {
    let client =
        client("[security.cross_origin]\ntrusted_origins = [\"https://admin.bank.example\"]\n");
    let memo = "trusted";
    post(
        &client,
        "/transfer",
        memo,
        &[
            ("sec-fetch-site", "same-site"),
            ("origin", "https://admin.bank.example"),
        ],
    )
    .await
    .assert_status(303);
    post(
        &client,
        "/transfer",
        memo,
        &[("origin", "https://admin.bank.example")],
    )
    .await
    .assert_status(303);
    assert_eq!(runs(memo), 2);

    // Exactly that origin: not another scheme, port or host.
    for origin in [
        "http://admin.bank.example",
        "https://admin.bank.example:8443",
        "https://evil.admin.bank.example",
    ] {
        let refused = post(
            &client,
            "/transfer",
            memo,
            &[("sec-fetch-site", "cross-site"), ("origin", origin)],
        )
        .await;
        assert_refused(&refused);
    }
    assert_eq!(runs(memo), 2);
}

#[tokio::test]
async fn exempt_paths_pass_by_whole_segments() {
    let client = client("[security.cross_origin]\nexempt_paths = [\"/api\"]\n");
    let forged = [("sec-fetch-site", "cross-site"), ("origin", EVIL)];
    let memo = "exempt";
    post(&client, "/api/hooks", memo, &forged)
        .await
        .assert_status(204);
    assert_eq!(runs(memo), 1);
    assert_refused(&post(&client, "/apiary", memo, &forged).await);
    assert_refused(&post(&client, "/transfer", memo, &forged).await);
    assert_eq!(runs(memo), 1);
}

#[tokio::test]
async fn safe_methods_pass_from_anywhere() {
    let client = client("");
    for method in [http::Method::GET, http::Method::HEAD] {
        client
            .request(method.clone(), "/balance")
            .header("sec-fetch-site", "cross-site")
            .header("origin", EVIL)
            .send()
            .await
            .assert_ok();
    }
    let preflight = client
        .request(http::Method::OPTIONS, "/transfer")
        .header("sec-fetch-site", "cross-site")
        .header("origin", EVIL)
        .send()
        .await;
    assert_ne!(preflight.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_disabled_check_passes_everything() {
    let client = client("[security.cross_origin]\nenabled = false\n");
    let memo = "disabled";
    post(
        &client,
        "/transfer",
        memo,
        &[("sec-fetch-site", "cross-site"), ("origin", EVIL)],
    )
    .await
    .assert_status(303);
    post(&client, "/transfer", memo, &[("origin", EVIL)])
        .await
        .assert_status(303);
    assert_eq!(runs(memo), 2);
}

#[test]
fn a_trusted_origin_that_is_not_one_stops_the_app() {
    let key = "security.cross_origin.trusted_origins";
    let error = AutumnConfig::from_toml_str(
        "[security.cross_origin]\ntrusted_origins = [\"https://admin.bank.example/\"]\n",
    )
    .expect_err("a trailing slash is no origin");
    assert_eq!(error.key(), Some(key));
    assert!(
        error
            .to_string()
            .contains("write `https://admin.bank.example`"),
        "{error}"
    );

    // Set in code, it is caught at launch, in one line naming the key.
    let mut config = AutumnConfig::default();
    config.security.cross_origin.trusted_origins = vec!["admin.bank.example".to_owned()];
    let error = TestApp::new()
        .routes(routes![transfer])
        .with_config(config)
        .try_build()
        .expect_err("no scheme");
    let message = error.to_string();
    assert!(message.contains(key), "{message}");
    assert!(message.contains("admin.bank.example"), "{message}");
    assert!(!message.contains('\n'), "{message}");
}

#[tokio::test]
async fn a_refused_request_reaches_no_app_layer_and_no_store() {
    let store = Arc::new(CountingStore::memory());
    let app_layer_runs = Arc::new(AtomicUsize::new(0));
    let seen = app_layer_runs.clone();
    let builder = autumn_web::app()
        .routes(routes![transfer])
        .idempotent()
        .with_idempotency_store(store.clone())
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                seen.fetch_add(1, Ordering::SeqCst);
                next.run(request)
            },
        ));
    let client = TestApp::from_builder(builder).build();
    // Both guards would claim this request: it has a key and a token.
    let send = |site: &'static str, memo: &'static str| {
        client
            .post("/transfer")
            .header("sec-fetch-site", site)
            .header("origin", EVIL)
            .header("idempotency-key", memo)
            .form(&[("_submit_token", memo), ("memo", memo)])
            .send()
    };

    assert_refused(&send("cross-site", "unstored").await);
    assert_eq!(store.calls(), 0, "no store call");
    assert_eq!(app_layer_runs.load(Ordering::SeqCst), 0, "no app layer");
    assert_eq!(runs("unstored"), 0);

    // The same request from the app's own page goes through both guards.
    send("same-origin", "stored").await.assert_status(303);
    assert_eq!(app_layer_runs.load(Ordering::SeqCst), 1);
    assert!(store.calls() >= 4, "a claim and a finish per guard");
    assert_eq!(runs("stored"), 1);
}

/// One request over a socket to `run()`'s server, answered and closed.
async fn over_the_wire(address: std::net::SocketAddr, head: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let body = "memo=wire";
    let request = format!(
        "{head}content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .expect("the server answers")
    .expect("read the response");
    response
}

#[tokio::test]
async fn through_the_real_server_the_host_is_the_one_on_the_wire() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind port 0");
    let address = listener.local_addr().expect("bound address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(
        autumn_web::app()
            .routes(routes![transfer])
            .with_config(AutumnConfig::default())
            .serve(listener, async move {
                let _ = stopped.await;
            }),
    );

    let own = over_the_wire(
        address,
        &format!("POST /transfer HTTP/1.1\r\nhost: {address}\r\norigin: http://{address}\r\n"),
    )
    .await;
    assert!(own.starts_with("HTTP/1.1 303"), "{own}");
    let forged = over_the_wire(
        address,
        &format!("POST /transfer HTTP/1.1\r\nhost: {address}\r\norigin: {EVIL}\r\n"),
    )
    .await;
    assert!(forged.starts_with("HTTP/1.1 403"), "{forged}");
    assert!(forged.contains("cross_origin_request_refused"), "{forged}");
    assert_eq!(runs("wire"), 1);

    let _ = stop.send(());
    served
        .await
        .expect("the server task does not panic")
        .expect("the server stops cleanly");
}
