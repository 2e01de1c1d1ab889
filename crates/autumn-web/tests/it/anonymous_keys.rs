//! `[idempotency] anonymous_keys = "refuse"` and the route attribute
//! `anonymous_keys = "..."`, through the real launch path: a keyed request
//! with no caller identity (no session, tenant, principal or
//! `Authorization`) gets 403 `idempotency_key_needs_caller` and runs
//! nothing; a caller with a session or a principal is served and replayed
//! as before; a request without a key is untouched; a route overrides the
//! app either way. And the raw key never reaches a log line, at any level.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, LazyLock, Mutex};

use autumn_web::Route;
use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::principal::{PrincipalFuture, PrincipalResolver};
use autumn_web::test::{TestApp, TestClient, TestResponse};
use serde_json::Value;

/// Runs per body (the tests run in parallel: each sends its own bodies).
static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn runs(body: &str) -> usize {
    RUNS.lock().expect("runs").get(body).copied().unwrap_or(0)
}

fn count(body: &str) -> usize {
    let mut runs = RUNS.lock().expect("runs");
    let run = runs.entry(body.to_owned()).or_default();
    *run += 1;
    *run
}

/// Follows the app-wide setting.
#[post("/signup")]
async fn signup(body: String) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    let run = count(&body);
    (
        StatusCode::CREATED,
        [("set-cookie", "welcome=1; Path=/")],
        format!("{body} run {run}"),
    )
}

/// Refuses anonymous keys whatever the app says.
#[post("/transfers", anonymous_keys = "refuse")]
async fn transfer(body: String) -> (StatusCode, String) {
    let run = count(&body);
    (StatusCode::CREATED, format!("{body} run {run}"))
}

/// Serves anonymous keys whatever the app says.
#[post("/newsletter", anonymous_keys = "allow")]
async fn newsletter(body: String) -> (StatusCode, String) {
    let run = count(&body);
    (StatusCode::CREATED, format!("{body} run {run}"))
}

/// Starts a session, so the client's next requests carry one.
#[post("/visit")]
async fn visit(session: Session) -> AutumnResult<&'static str> {
    session.insert("visited", true).await?;
    Ok("visited")
}

fn routes() -> Vec<Route> {
    routes![signup, transfer, newsletter, visit]
}

/// The caller the `x-user` header names, as an app's own authentication would.
struct HeaderUser;

impl PrincipalResolver for HeaderUser {
    fn resolve<'a>(&'a self, parts: &'a autumn_web::principal::Parts) -> PrincipalFuture<'a> {
        Box::pin(async move {
            Ok(parts
                .headers
                .get("x-user")
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned))
        })
    }
}

fn app(toml: &str) -> TestClient {
    TestApp::from_builder(
        autumn_web::app()
            .routes(routes())
            .scope_by(HeaderUser)
            .idempotent(),
    )
    .with_config(AutumnConfig::from_toml_str(toml).expect("config"))
    .build()
}

const REFUSE: &str = "[idempotency]\nanonymous_keys = \"refuse\"\n";

async fn keyed(client: &TestClient, path: &str, key: &str, body: &str) -> TestResponse {
    client
        .post(path)
        .header("idempotency-key", key)
        .body(body.to_owned())
        .send()
        .await
}

/// Asserts the refusal: 403 problem+json with the code and a detail that
/// says what to do.
#[track_caller]
fn assert_needs_caller(response: &TestResponse) {
    response.assert_status(403);
    assert_eq!(
        response.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(response.header("www-authenticate"), None);
    let problem: Value = response.json();
    assert_eq!(problem["code"], "idempotency_key_needs_caller", "{problem}");
    assert_eq!(problem["status"], 403);
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("sign in") && detail.contains("without an Idempotency-Key"),
        "{detail}"
    );
}

#[tokio::test]
async fn app_wide_refuse_answers_an_anonymous_keyed_post_403_and_runs_nothing() {
    let client = app(REFUSE);
    for _ in 0..2 {
        let refused = keyed(&client, "/signup", "signup-1", "refused-anon").await;
        assert_needs_caller(&refused);
        assert_eq!(refused.header("set-cookie"), None);
    }
    assert_eq!(runs("refused-anon"), 0, "the handler never ran");

    // A browser gets the error page, as for any other error.
    let page = client
        .post("/signup")
        .header("idempotency-key", "signup-2")
        .header("accept", "text/html")
        .body("refused-browser")
        .send()
        .await;
    page.assert_status(403);
    let content_type = page.header("content-type").unwrap_or_default();
    assert!(content_type.starts_with("text/html"), "{content_type}");
    assert_eq!(runs("refused-browser"), 0);
}

#[tokio::test]
async fn app_wide_refuse_leaves_a_request_without_a_key_alone() {
    let client = app(REFUSE);
    for run in 1..=2 {
        let response = client.post("/signup").body("no-key").send().await;
        response.assert_status(201);
        assert_eq!(response.text(), format!("no-key run {run}"));
    }
}

#[tokio::test]
async fn app_wide_refuse_serves_and_replays_a_caller_with_a_session() {
    let client = app(REFUSE);
    client.post("/visit").send().await.assert_status(200);
    let first = keyed(&client, "/signup", "session-key", "with-session").await;
    first.assert_status(201);
    assert_eq!(first.text(), "with-session run 1");
    let retry = keyed(&client, "/signup", "session-key", "with-session").await;
    retry
        .assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(retry.text(), "with-session run 1");
    assert_eq!(runs("with-session"), 1);

    // Another browser with no session sending the same key and body gets
    // neither the response nor its cookie.
    let stranger = client.new_browser();
    let refused = keyed(&stranger, "/signup", "session-key", "with-session").await;
    assert_needs_caller(&refused);
    assert_eq!(refused.header("set-cookie"), None);
    assert_eq!(runs("with-session"), 1);
}

#[tokio::test]
async fn app_wide_refuse_serves_and_replays_a_caller_with_a_principal() {
    let client = app(REFUSE);
    let send = || {
        client
            .post("/signup")
            .header("x-user", "agent-7")
            .header("idempotency-key", "principal-key")
            .body("with-principal")
            .send()
    };
    send().await.assert_status(201);
    send()
        .await
        .assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(runs("with-principal"), 1);
}

#[tokio::test]
async fn a_route_that_refuses_overrides_an_app_that_allows() {
    let client = app("");
    let refused = keyed(&client, "/transfers", "t-1", "route-refuses").await;
    assert_needs_caller(&refused);
    assert_eq!(runs("route-refuses"), 0);

    // The app-wide default still serves its other routes.
    keyed(&client, "/signup", "s-1", "app-allows")
        .await
        .assert_status(201);
    keyed(&client, "/signup", "s-1", "app-allows")
        .await
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(runs("app-allows"), 1);
}

#[tokio::test]
async fn a_route_that_allows_overrides_an_app_that_refuses() {
    let client = app(REFUSE);
    keyed(&client, "/newsletter", "n-1", "route-allows")
        .await
        .assert_status(201);
    keyed(&client, "/newsletter", "n-1", "route-allows")
        .await
        .assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(runs("route-allows"), 1);
}

#[test]
fn the_setting_is_reported_at_launch() {
    let config = AutumnConfig::from_toml_str(REFUSE).expect("config");
    let setting = config
        .effective_settings()
        .into_iter()
        .find(|setting| setting.key == "idempotency.anonymous_keys")
        .expect("listed");
    assert_eq!(setting.value, "\"refuse\"");
}

// ---- raw keys never logged ---------------------------------------------------------------------

/// Everything logged, at every level, into one buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().map(|b| b.clone()).unwrap_or_default()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut bytes) = self.0.lock() {
            bytes.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The SHA-256 digest the logs name a key by.
fn digest(key: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(key.as_bytes());
    let hex: String = digest[..6]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Set in the process [`the_raw_key_never_appears_in_any_log_line_at_trace`]
/// starts to run itself alone.
const ALONE: &str = "AUTUMN_TEST_TRACE_ALONE";

#[test]
fn the_raw_key_never_appears_in_any_log_line_at_trace() {
    // Whether a tracing callsite is enabled is cached for the whole
    // process, and other tests' threads hit the same callsites with no
    // subscriber of theirs at the same time: events this test wants were
    // now and then left disabled. So it runs in a process of its own, this
    // test binary again with only this test.
    if std::env::var_os(ALONE).is_none() {
        let name = "anonymous_keys::the_raw_key_never_appears_in_any_log_line_at_trace";
        let output = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args([name, "--exact", "--test-threads=1", "--nocapture"])
            .env(ALONE, "1")
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    const RAW: &str = "raw-key-5e1f0c2a9d";
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            let client = app("");
            // A first run, its replay, the key reused for another body, and
            // a refusal on a route that wants a caller.
            keyed(&client, "/signup", RAW, "logged-first")
                .await
                .assert_status(201);
            keyed(&client, "/signup", RAW, "logged-first")
                .await
                .assert_header("x-idempotent-replayed", "true");
            keyed(&client, "/signup", RAW, "logged-other")
                .await
                .assert_status(422);
            assert_needs_caller(&keyed(&client, "/transfers", RAW, "logged-refused").await);
        });
    });
    let log = captured.text();
    assert!(
        log.contains(&format!("idempotency.key_hash={}", digest(RAW))),
        "the key is logged by its digest: {log}"
    );
    assert!(log.contains("TRACE"), "trace events were captured: {log}");
    assert!(!log.contains(RAW), "the raw key was logged: {log}");
    assert!(!log.contains("idem:v1:"), "a storage key was logged: {log}");
}
