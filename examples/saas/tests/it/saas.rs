//! The accounts app under TestApp, and the real binary over a socket.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use autumn_web::AppBuilder;
use autumn_web::config::AutumnConfig;
use autumn_web::security::SUBMIT_TOKEN_REPLAYED;
use autumn_web::test::{ServerProcess, TestApp, TestClient, TestDatabase, TestResponse};
use saas::{SignupGate, Stats, User};
use tokio::sync::watch;

/// `app` on a fresh SQLite file in `dir`, with `extra` TOML appended to the
/// configuration.
fn client_in(dir: &Path, app: AppBuilder, extra: &str) -> TestClient {
    let url = format!("sqlite://{}", dir.join("saas.db").display());
    let config = AutumnConfig::from_toml_str(&format!("[database]\nurl = \"{url}\"\n{extra}"))
        .expect("config");
    TestApp::from_builder(app).with_config(config).build()
}

/// The session cookie's name: the default `cookie_name` with the `__Host-`
/// prefix the `Secure` cookie gets.
const SESSION_COOKIE: &str = autumn_web::session::DEFAULT_SECURE_COOKIE_NAME;

/// The session id a response sets, if it sets one.
fn set_session_cookie(response: &TestResponse) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .filter_map(|cookie| {
            let pair = cookie.split(';').next()?.trim();
            pair.strip_prefix(SESSION_COOKIE)?
                .strip_prefix('=')
                .map(str::to_owned)
        })
        .next_back()
}

fn plain() -> AppBuilder {
    saas::app_with_delay(false, Duration::ZERO)
}

/// How many duplicate submissions in this process have started waiting
/// for the first one (the layer logs each, `idempotency.waiting`).
static WAITING: OnceLock<watch::Sender<usize>> = OnceLock::new();

/// The tests that count [`WAITING`] take turns, so each count is theirs.
static WAITERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Counts the layer's `idempotency.waiting` events into [`WAITING`].
struct WaitingWatcher;

impl tracing::Subscriber for WaitingWatcher {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.is_event() && metadata.fields().field("idempotency.waiting").is_some()
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if self.enabled(event.metadata())
            && let Some(waiting) = WAITING.get()
        {
            waiting.send_modify(|count| *count += 1);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Watches [`WAITING`] from now on: the count so far, and a receiver.
fn watch_waiting() -> (usize, watch::Receiver<usize>) {
    let receiver = WAITING
        .get_or_init(|| {
            let _ = tracing::subscriber::set_global_default(WaitingWatcher);
            watch::channel(0).0
        })
        .subscribe();
    let seen = *receiver.borrow();
    (seen, receiver)
}

/// Returns once one more duplicate is waiting than when `watch_waiting`
/// gave `(seen, waiting)`.
async fn a_duplicate_waits((seen, waiting): &mut (usize, watch::Receiver<usize>)) {
    let seen = *seen;
    // A guard, not a wait for time to pass: a regression fails here
    // instead of hanging.
    tokio::time::timeout(Duration::from_secs(10), waiting.wait_for(|n| *n > seen))
        .await
        .expect("the duplicate waits for the first post")
        .expect("the count lives for the process");
}

/// The value of the first `<input>` inside the first `<form>`, which must be
/// the hidden token field.
fn token_field_first(html: &str) -> String {
    let form = html.find("<form").expect("the page has a form");
    let input = html[form..].find("<input").expect("the form has inputs") + form;
    let tag = &html[input..input + html[input..].find('>').expect("a closed tag")];
    assert!(
        tag.contains(r#"type="hidden""#) && tag.contains(r#"name="_submit_token""#),
        "the token field comes first in the form: {tag}"
    );
    let value = tag
        .split(r#"value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the token field has a value");
    assert!(value.len() >= 32, "a real token: {value:?}");
    value.to_owned()
}

/// A fresh token from `GET /signup`.
async fn fresh_token(client: &TestClient) -> String {
    let page = client.get("/signup").send().await;
    page.assert_status(200);
    token_field_first(&page.text())
}

/// The password every test user signs up with.
const PASSWORD: &str = "correct horse battery";

async fn post_signup(client: &TestClient, token: &str, email: &str, name: &str) -> TestResponse {
    client
        .post("/signup")
        .form(&[
            ("_submit_token", token),
            ("email", email),
            ("name", name),
            ("password", PASSWORD),
        ])
        .send()
        .await
}

async fn listed(client: &TestClient) -> Vec<User> {
    let response = client.get("/users.json").send().await;
    response.assert_status(200);
    response.json()
}

/// Where a 303 goes; panics on anything else.
fn see_other(response: &TestResponse) -> String {
    response.assert_status(303);
    let location = response.header("location").expect("a location").to_owned();
    assert_eq!(location, "/account", "a sign-up lands on the account page");
    location
}

#[tokio::test]
async fn the_form_carries_a_fresh_token_first() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client = client_in(dir.path(), plain(), "");
    let page = client.get("/signup").send().await;
    page.assert_status(200);
    let html = page.text();
    assert!(
        html.contains(r#"<form method="POST" action="/signup""#),
        "{html}"
    );
    assert!(html.contains("data-autumn-once"), "{html}");
    assert!(
        html.contains(r#"name="email""#) && html.contains(r#"name="name""#),
        "{html}"
    );
    assert!(
        !html.contains("<script"),
        "no guard script unless the app opts in"
    );
    let first = token_field_first(&html);
    assert_ne!(
        first,
        fresh_token(&client).await,
        "every rendering has its own token"
    );
}

#[tokio::test]
async fn the_guard_script_is_opt_in() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("saas.db").display());
    let client = TestApp::from_builder(saas::app_with_delay(true, Duration::ZERO))
        .with_config(
            AutumnConfig::from_toml_str(&format!("[database]\nurl = \"{url}\"\n")).expect("config"),
        )
        .build();
    let html = client.get("/signup").send().await.text();
    assert!(html.contains("<script>"), "{html}");
    assert!(
        html.contains("aria-disabled") && html.contains("pageshow"),
        "{html}"
    );
    token_field_first(&html);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_signup_signs_in_on_a_new_session_id_and_greets_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client = client_in(dir.path(), plain(), "");
    let token = fresh_token(&client).await;
    // Rendering the form gave this browser an id of its own, in the cookie
    // alone, to bind the token to.
    let before = client
        .cookie(SESSION_COOKIE)
        .expect("the form page sets a session cookie");
    let created = post_signup(&client, &token, "  Ada@Example.com ", " Ada Lovelace ").await;
    see_other(&created);
    assert_eq!(created.header(SUBMIT_TOKEN_REPLAYED.as_str()), None);
    let after = set_session_cookie(&created).expect("the sign-up sets the session cookie");
    assert_ne!(after, before, "signing up rotates the session id");
    assert_eq!(client.cookie(SESSION_COOKIE), Some(after));

    let users = listed(&client).await;
    assert_eq!(users.len(), 1);
    let user = &users[0];
    assert_eq!(
        (user.email.as_str(), user.name.as_str()),
        ("ada@example.com", "Ada Lovelace")
    );

    let account = client.get("/account").send().await;
    account.assert_status(200);
    let html = account.text();
    assert!(html.contains("Welcome, Ada Lovelace!"), "{html}");
    assert!(html.contains("ada@example.com"), "{html}");
    let again = client.get("/account").send().await;
    again.assert_status(200);
    let html = again.text();
    assert!(
        !html.contains("Welcome, Ada Lovelace!"),
        "the flash is shown once: {html}"
    );
    assert!(html.contains("Signed in as"), "{html}");

    let page = client.get("/users").send().await;
    page.assert_status(200);
    assert!(page.text().contains("ada@example.com"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_signup_is_422_with_errors_values_and_a_new_token() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client = client_in(dir.path(), plain(), "");
    let token = fresh_token(&client).await;
    let rejected = post_signup(&client, &token, "not-an-address", "   ").await;
    rejected.assert_status(422);
    let html = rejected.text();
    assert!(html.contains("Enter an email address like"), "{html}");
    assert!(html.contains("Enter your name."), "{html}");
    assert!(html.contains(r#"value="not-an-address""#), "{html}");
    let new_token = token_field_first(&html);
    assert_ne!(new_token, token, "the re-rendered form has a fresh token");
    assert!(listed(&client).await.is_empty());

    // The corrected form, posted with its new token, goes through.
    see_other(&post_signup(&client, &new_token, "grace@example.com", "Grace").await);

    // A taken email is refused too, whatever its case.
    let token = fresh_token(&client).await;
    let taken = post_signup(&client, &token, "GRACE@example.com", "Another Grace").await;
    taken.assert_status(422);
    let html = taken.text();
    assert!(html.contains("already registered"), "{html}");
    assert_ne!(token_field_first(&html), token);
    assert_eq!(listed(&client).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_token_twice_creates_one_user_and_replays_the_303() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client = client_in(dir.path(), plain(), "");
    let token = fresh_token(&client).await;
    let posted_with = client.cookie(SESSION_COOKIE).expect("a session cookie");
    let first = post_signup(&client, &token, "ada@example.com", "Ada").await;
    // Sent again by a browser that did not get the answer (a lost response,
    // a double-click): it still has the cookie it posted with.
    let again = client
        .post("/signup")
        .header("cookie", &format!("{SESSION_COOKIE}={posted_with}"))
        .form(&[
            ("_submit_token", token.as_str()),
            ("email", "ada@example.com"),
            ("name", "Ada"),
            ("password", PASSWORD),
        ])
        .send()
        .await;
    let location = see_other(&first);
    assert_eq!(see_other(&again), location);
    again.assert_header(SUBMIT_TOKEN_REPLAYED.as_str(), "true");
    assert_eq!(
        set_session_cookie(&again),
        set_session_cookie(&first),
        "the replay signs the browser in on the same new session"
    );
    assert_eq!(listed(&client).await.len(), 1);

    // Sent again by the browser that did get the answer (Back and submit
    // again, a reload that resends the post): it carries the new session id
    // the sign-up set, which the record answers too.
    let resent = post_signup(&client, &token, "ada@example.com", "Ada").await;
    assert_eq!(see_other(&resent), location);
    resent.assert_header(SUBMIT_TOKEN_REPLAYED.as_str(), "true");
    assert_eq!(listed(&client).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_posts_of_one_token_create_one_user_the_duplicate_waiting_for_the_first() {
    let _turn = WAITERS.lock().await;
    let mut waiting = watch_waiting();
    let dir = tempfile::tempdir().expect("temp dir");
    let gate = SignupGate::default();
    let client = client_in(
        dir.path(),
        saas::app_with_gate(false, gate.clone()),
        "[security.submit_token]\nin_flight_wait_ms = 5000\n",
    );
    let token = fresh_token(&client).await;
    let post = |token: String| {
        let client = client.clone();
        tokio::spawn(async move { post_signup(&client, &token, "ada@example.com", "Ada").await })
    };
    let first = post(token.clone());
    gate.started().await;
    // The first post is in its handler; the second arrives, finds its token
    // in flight and waits. Only then does the first one finish.
    let second = post(token);
    a_duplicate_waits(&mut waiting).await;
    gate.open();
    let (first, second) = (first.await.expect("first"), second.await.expect("second"));
    let location = see_other(&first);
    assert_eq!(first.header(SUBMIT_TOKEN_REPLAYED.as_str()), None);
    assert_eq!(see_other(&second), location);
    second.assert_header(SUBMIT_TOKEN_REPLAYED.as_str(), "true");
    assert_eq!(listed(&client).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_posts_of_one_token_create_one_user_the_duplicate_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gate = SignupGate::default();
    let client = client_in(dir.path(), saas::app_with_gate(false, gate.clone()), "");
    let token = fresh_token(&client).await;
    let first = tokio::spawn({
        let (client, token) = (client.clone(), token.clone());
        async move { post_signup(&client, &token, "ada@example.com", "Ada").await }
    });
    gate.started().await;
    // The first post is in its handler: the duplicate is refused at once.
    let second = post_signup(&client, &token, "ada@example.com", "Ada").await;
    second.assert_status(409);
    gate.open();
    see_other(&first.await.expect("first post"));
    assert_eq!(listed(&client).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_with_tokens_in_redis_over_two_replicas() {
    let database = TestDatabase::postgres();
    let redis =
        std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let config = format!(
        "[database]\nurl = \"{}\"\n[idempotency]\nbackend = \"redis\"\n\
         [idempotency.redis]\nurl = \"{redis}\"\nkey_prefix = \"saas-test:{}\"\n\
         [security.submit_token]\nin_flight_wait_ms = 5000\n",
        database.url(),
        uuid::Uuid::new_v4().simple()
    );
    let gate = SignupGate::default();
    let replica = || {
        TestApp::from_builder(saas::app_with_gate(false, gate.clone()))
            .with_config(AutumnConfig::from_toml_str(&config).expect("config"))
            .build()
    };
    let (a, b) = (replica(), replica());

    // A double-click whose two posts reach two replicas: the second waits
    // on the first one's lock in Redis and replays its 303.
    let turn = WAITERS.lock().await;
    let mut waiting = watch_waiting();
    let token = fresh_token(&a).await;
    let first = tokio::spawn({
        let (a, token) = (a.clone(), token.clone());
        async move { post_signup(&a, &token, "ada@example.com", "Ada").await }
    });
    gate.started().await;
    // The same browser: b gets a's cookie, the id the token is bound to.
    let cookie = format!(
        "{SESSION_COOKIE}={}",
        a.cookie(SESSION_COOKIE)
            .expect("the form page sets a session cookie")
    );
    let second = tokio::spawn({
        let (b, token) = (b.clone(), token.clone());
        async move {
            b.post("/signup")
                .header("cookie", &cookie)
                .form(&[
                    ("_submit_token", token.as_str()),
                    ("email", "ada@example.com"),
                    ("name", "Ada"),
                    ("password", PASSWORD),
                ])
                .send()
                .await
        }
    });
    a_duplicate_waits(&mut waiting).await;
    gate.open();
    let first = first.await.expect("first post");
    let second = second.await.expect("second post");
    drop(turn);
    let location = see_other(&first);
    assert_eq!(see_other(&second), location);
    second.assert_header(SUBMIT_TOKEN_REPLAYED.as_str(), "true");
    assert_eq!(
        set_session_cookie(&second),
        set_session_cookie(&first),
        "the replay carries the session cookie the first post set"
    );

    // Sessions live in Redis too: the other replica knows the session the
    // sign-up rotated to.
    let signed_in = format!(
        "{SESSION_COOKIE}={}",
        a.cookie(SESSION_COOKIE).expect("signed in")
    );
    let account = b.get(&location).header("cookie", &signed_in).send().await;
    account.assert_status(200);
    assert!(account.text().contains("Welcome, Ada!"));

    // Validation and the unique email hold on PostgreSQL too. (Each post
    // that gets past validation passes the gate: open it ahead.)
    gate.open();
    let rejected = post_signup(&b, &fresh_token(&b).await, "ADA@example.com", "Ada").await;
    rejected.assert_status(422);
    assert!(rejected.text().contains("already registered"));
    gate.open();
    see_other(&post_signup(&b, &fresh_token(&b).await, "grace@example.com", "Grace").await);

    let users = listed(&a).await;
    assert_eq!(
        users.iter().map(|u| u.email.as_str()).collect::<Vec<_>>(),
        ["ada@example.com", "grace@example.com"]
    );
    assert_eq!(listed(&b).await, users);
}

/// The built binary, run in its own directory (where it makes `saas.db`).
fn start_binary(dir: &Path, env: &[(&str, &str)]) -> ServerProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_saas"));
    command
        .current_dir(dir)
        .envs(env.iter().copied())
        // The tests read the counters on the app's one port.
        .env("AUTUMN_ACTUATOR__METRICS_ON_APP_PORT", "true")
        .env_remove("AUTUMN_DATABASE__URL")
        .env_remove("AUTUMN_SECURITY__SUBMIT_TOKEN__IN_FLIGHT_WAIT_MS");
    ServerProcess::start(command)
}

/// Status, headers and body of one request; redirects are not followed.
async fn http(method: &str, url: &str, form: Option<&str>) -> (u16, http::HeaderMap, String) {
    use http_body_util::BodyExt as _;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut request = http::Request::builder().method(method).uri(url);
    if form.is_some() {
        request = request.header("content-type", "application/x-www-form-urlencoded");
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(
            form.unwrap_or_default().to_owned(),
        )))
        .expect("request");
    let response = client.request(request).await.expect("the server answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_turns_a_double_click_into_one_account_on_its_sqlite_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = start_binary(dir.path(), &[(saas::POST_DELAY_VAR, "500")]);
    let signup = server.url("/signup");

    let (status, _, page) = http("GET", &signup, None).await;
    assert_eq!(status, 200, "{page}");
    let token = token_field_first(&page);
    let form =
        format!("_submit_token={token}&email=ada%40example.com&name=Ada&password=long+enough");

    // A double-click: two posts of one form at once, while the handler
    // sleeps. Whichever runs first, the other is its duplicate.
    let (one, other) = tokio::join!(
        http("POST", &signup, Some(&form)),
        http("POST", &signup, Some(&form))
    );
    let (first, second) = if one.1.contains_key(SUBMIT_TOKEN_REPLAYED) {
        (other, one)
    } else {
        (one, other)
    };

    // Both land on the account page: main makes the duplicate wait for
    // the first post and get its answer, rather than a 409.
    for (status, headers, body) in [&first, &second] {
        assert_eq!(*status, 303, "{body}");
        assert!(
            headers["location"].to_str().is_ok_and(|l| l == "/account"),
            "{headers:?}"
        );
    }
    assert_eq!(first.1["location"], second.1["location"]);
    assert_eq!(first.1.get(SUBMIT_TOKEN_REPLAYED), None);
    assert_eq!(second.1[SUBMIT_TOKEN_REPLAYED], "true");

    let (status, _, users) = http("GET", &server.url("/users.json"), None).await;
    assert_eq!(status, 200);
    let users: Vec<User> = serde_json::from_str(&users).expect("JSON list");
    assert_eq!(users.len(), 1, "{users:?}");
    assert!(
        dir.path().join("saas.db").exists(),
        "users are kept in ./saas.db by default"
    );

    let (status, _, metrics) = http("GET", &server.url("/actuator/metrics"), None).await;
    assert_eq!(status, 200);
    let metrics: serde_json::Value = serde_json::from_str(&metrics).expect("JSON metrics");
    let tokens = &metrics["submit_token"];
    assert_eq!(
        [
            &tokens["hits"],
            &tokens["misses"],
            &tokens["conflicts"],
            &tokens["lock_renewal_failures"],
            &tokens["unrecorded_too_large"],
        ],
        [1, 1, 0, 0, 0],
        "{metrics}"
    );
    assert_eq!(
        tokens["store"]["entries"], 1,
        "one consumed token: {metrics}"
    );
}

/// A 1x1 PNG.
const PNG: &[u8] = b"\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\x0d\x49\x44\x41\x54\x78\xda\x63\x64\x60\xf8\x5f\x0f\x00\x02\x87\x01\x80\xeb\x47\xba\x92\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82";

/// Where a test keeps its data: what the tests above use.
#[derive(Debug, Clone, Copy)]
enum Backends {
    /// Everything in a SQLite file, tokens in memory.
    Sqlite,
    /// Users in PostgreSQL, tokens and sessions in Redis.
    PostgresRedis,
}

const BACKENDS: [Backends; 2] = [Backends::Sqlite, Backends::PostgresRedis];

/// The plain app on `backends`, with a duplicate waiting for the first post;
/// and its PostgreSQL database, if it has one, to keep while the test runs.
async fn client_on(backends: Backends, dir: &Path) -> (TestClient, Option<TestDatabase>) {
    let wait = "[security.submit_token]\nin_flight_wait_ms = 5000\n";
    match backends {
        Backends::Sqlite => (client_in(dir, plain(), wait), None),
        Backends::PostgresRedis => {
            let database = TestDatabase::postgres();
            let redis = std::env::var("TEST_REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
            let config = format!(
                "[database]\nurl = \"{}\"\n[idempotency]\nbackend = \"redis\"\n\
                 [idempotency.redis]\nurl = \"{redis}\"\nkey_prefix = \"saas-test:{}\"\n\
                 {wait}",
                database.url(),
                uuid::Uuid::new_v4().simple()
            );
            let client = TestApp::from_builder(plain())
                .with_config(AutumnConfig::from_toml_str(&config).expect("config"))
                .build();
            (client, Some(database))
        }
    }
}

async fn stats(client: &TestClient) -> Stats {
    let response = client.get("/stats.json").send().await;
    response.assert_status(200);
    response.json()
}

/// Signs Ada up on `client`, which is then signed in.
async fn signed_up(client: &TestClient) {
    let token = fresh_token(client).await;
    see_other(&post_signup(client, &token, "ada@example.com", "Ada").await);
}

/// The token of the first form on the page at `path`.
async fn token_of(client: &TestClient, path: &str) -> String {
    let page = client.get(path).send().await;
    page.assert_status(200);
    token_field_first(&page.text())
}

/// A chosen file: its name, content type and bytes.
type File<'a> = (&'a str, &'a str, &'a [u8]);

/// A profile form as a browser sends it: the token first, the display
/// name, then the file, if one was chosen. Returns the content type and the
/// body.
fn profile_form(token: &str, name: &str, file: Option<File<'_>>) -> (String, Vec<u8>) {
    const BOUNDARY: &str = "----saas-test-boundary";
    let mut body = Vec::new();
    for (field, value) in [("_submit_token", token), ("name", name)] {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{field}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    // No file chosen: browsers send an empty part with an empty file name.
    let (file_name, content_type, bytes) = file.unwrap_or(("", "application/octet-stream", b""));
    body.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"avatar\"; \
             filename=\"{file_name}\"\r\nContent-Type: {content_type}\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={BOUNDARY}"), body)
}

async fn post_profile(
    client: &TestClient,
    token: &str,
    name: &str,
    file: Option<File<'_>>,
) -> TestResponse {
    let (content_type, body) = profile_form(token, name, file);
    client
        .post("/account/profile")
        .header("content-type", &content_type)
        .body(body)
        .send()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_account_pages_need_a_signed_in_session() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client = client_in(dir.path(), plain(), "");
    for path in ["/account", "/account/avatar"] {
        let response = client.get(path).send().await;
        response.assert_status(303);
        response.assert_header("location", "/login");
    }
    // A made-up session id is nobody.
    let forged = client
        .get("/account")
        .header(
            "cookie",
            &format!("{SESSION_COOKIE}=made-up-session-id-0123456789"),
        )
        .send()
        .await;
    forged.assert_status(303);
    forged.assert_header("location", "/login");
    // The profile form posted without signing in changes nothing.
    let token = token_of(&client, "/login").await;
    let posted = post_profile(
        &client,
        &token,
        "Mallory",
        Some(("a.png", "image/png", PNG)),
    )
    .await;
    posted.assert_status(303);
    posted.assert_header("location", "/login");
    assert_eq!(stats(&client).await, Stats::default());
    // Nobody to log out: the page sends them home.
    let logout = client.get("/logout").send().await;
    logout.assert_status(303);
    logout.assert_header("location", "/");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logging_out_and_in_again_checks_the_password_and_rotates_the_id() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client = client_in(dir.path(), plain(), "");
    signed_up(&client).await;
    let first_id = client.cookie(SESSION_COOKIE).expect("signed in");

    // Logging in from a live session (here, signed in already) moves it to
    // a new id too, and the old one signs nobody in any more: an id known
    // before logging in, planted or stolen, is worth nothing after it.
    let token = token_of(&client, "/login").await;
    let again = client
        .post("/login")
        .form(&[
            ("_submit_token", token.as_str()),
            ("email", "ada@example.com"),
            ("password", PASSWORD),
        ])
        .send()
        .await;
    again.assert_status(303);
    let signed_up_as = set_session_cookie(&again).expect("a session cookie");
    assert_ne!(signed_up_as, first_id, "the live session got a new id");
    let retired = client
        .get("/account")
        .header("cookie", &format!("{SESSION_COOKIE}={first_id}"))
        .send()
        .await;
    retired.assert_status(303);
    retired.assert_header("location", "/login");
    client.get("/account").send().await.assert_status(200);

    let token = token_of(&client, "/logout").await;
    let out = client
        .post("/logout")
        .form(&[("_submit_token", token.as_str())])
        .send()
        .await;
    out.assert_status(303);
    out.assert_header("location", "/");
    assert_eq!(client.cookie(SESSION_COOKIE), None, "the cookie is removed");
    // The old id is retired: sent again, it signs nobody in.
    let stale = client
        .get("/account")
        .header("cookie", &format!("{SESSION_COOKIE}={signed_up_as}"))
        .send()
        .await;
    stale.assert_status(303);
    stale.assert_header("location", "/login");

    let token = token_of(&client, "/login").await;
    let before = client
        .cookie(SESSION_COOKIE)
        .expect("the form page sets a cookie");
    let login = |email: &'static str, password: &'static str| {
        client
            .post("/login")
            .form(&[
                ("_submit_token", token.as_str()),
                ("email", email),
                ("password", password),
            ])
            .send()
    };
    for (email, password) in [
        ("ada@example.com", "not the password"),
        ("nobody@example.com", PASSWORD),
    ] {
        let refused = login(email, password).await;
        refused.assert_status(422);
        let html = refused.text();
        assert!(html.contains("do not match an account"), "{html}");
        assert!(html.contains(&format!(r#"value="{email}""#)), "{html}");
        assert!(
            !html.contains(password),
            "the password is never echoed: {html}"
        );
        assert_eq!(set_session_cookie(&refused), None, "nobody was signed in");
    }
    assert_eq!(stats(&client).await.logins, 1, "the first login only");

    // A refusal released the token: the corrected form goes through.
    let signed_in = login("ADA@example.com", PASSWORD).await;
    signed_in.assert_status(303);
    signed_in.assert_header("location", "/account");
    let after = set_session_cookie(&signed_in).expect("a session cookie");
    assert_ne!(after, before, "logging in rotates the session id");
    let account = client.get("/account").send().await;
    account.assert_status(200);
    assert!(
        account.text().contains("Signed in as"),
        "{}",
        account.text()
    );

    // Sent again from the same browser (a resend, a retry whose answer was
    // lost, so it still has the cookie it posted with): replayed, with the
    // session cookie the first answer set, and one login.
    let again = client
        .post("/login")
        .header("cookie", &format!("{SESSION_COOKIE}={before}"))
        .form(&[
            ("_submit_token", token.as_str()),
            ("email", "ada@example.com"),
            ("password", PASSWORD),
        ])
        .send()
        .await;
    again.assert_status(303);
    again.assert_header(SUBMIT_TOKEN_REPLAYED.as_str(), "true");
    assert_eq!(set_session_cookie(&again), Some(after));
    assert_eq!(stats(&client).await.logins, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_password_is_refused_and_never_shown_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client = client_in(dir.path(), plain(), "");
    let token = fresh_token(&client).await;
    let refused = client
        .post("/signup")
        .form(&[
            ("_submit_token", token.as_str()),
            ("email", "ada@example.com"),
            ("name", "Ada"),
            ("password", "short7!"),
        ])
        .send()
        .await;
    refused.assert_status(422);
    let html = refused.text();
    assert!(html.contains("at least 8 characters"), "{html}");
    assert!(!html.contains("short7!"), "{html}");
    assert!(listed(&client).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_profile_form_posted_twice_stores_one_avatar() {
    for backends in BACKENDS {
        let dir = tempfile::tempdir().expect("temp dir");
        let (client, _database) = client_on(backends, dir.path()).await;
        signed_up(&client).await;
        let token = token_of(&client, "/account").await;
        let file = Some(("me.png", "image/png", PNG));
        // Both at once, as a double-click sends them: one runs, the other
        // waits for it or comes after it, and is answered with its 303.
        let (one, other) = tokio::join!(
            post_profile(&client, &token, "Ada L.", file),
            post_profile(&client, &token, "Ada L.", file)
        );
        for response in [&one, &other] {
            response.assert_status(303);
            response.assert_header("location", "/account");
        }
        let replays = [&one, &other]
            .iter()
            .filter(|r| r.header(SUBMIT_TOKEN_REPLAYED.as_str()) == Some("true"))
            .count();
        assert_eq!(replays, 1, "{backends:?}: one ran, one was replayed");
        let counts = stats(&client).await;
        assert_eq!(
            (counts.avatar_uploads, counts.avatars),
            (1, 1),
            "{backends:?}: {counts:?}"
        );

        let avatar = client.get("/account/avatar").send().await;
        avatar.assert_status(200);
        avatar.assert_header("content-type", "image/png");
        assert_eq!(avatar.bytes().as_ref(), PNG);
        let html = client.get("/account").send().await.text();
        assert!(html.contains("Your profile was saved."), "{html}");
        assert!(html.contains(r#"src="/account/avatar""#), "{html}");
        assert!(html.contains("Ada L."), "{html}");

        // A new rendering of the form is a new submission: it replaces the
        // picture, still one per user.
        let token = token_of(&client, "/account").await;
        post_profile(&client, &token, "Ada L.", file)
            .await
            .assert_status(303);
        let counts = stats(&client).await;
        assert_eq!(
            (counts.avatar_uploads, counts.avatars),
            (2, 1),
            "{backends:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_profile_form_gets_the_page_again_and_stores_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client = client_in(dir.path(), plain(), "");
    signed_up(&client).await;
    let token = token_of(&client, "/account").await;
    let too_big = [PNG, &vec![0; saas::MAX_AVATAR_BYTES]].concat();
    let cases: [(&str, File<'_>, u16, &str); 4] = [
        (
            "Ada",
            ("me.png", "image/png", b"not a picture"),
            422,
            "not the kind of picture",
        ),
        (
            "Ada",
            ("me.txt", "text/plain", b"hello"),
            422,
            "Choose a PNG, JPEG, GIF or WebP",
        ),
        (
            "Ada",
            ("big.png", "image/png", &too_big),
            413,
            "larger than 1 MiB",
        ),
        (
            "  ",
            ("me.png", "image/png", PNG),
            422,
            "Enter a display name.",
        ),
    ];
    for (name, file, status, message) in cases {
        let refused = post_profile(&client, &token, name, Some(file)).await;
        refused.assert_status(status);
        assert!(
            refused
                .header("content-type")
                .is_some_and(|t| t.starts_with("text/html")),
            "an HTML page"
        );
        let html = refused.text();
        assert!(html.contains(message), "{message}: {html}");
        // The page again, with a new form.
        assert_ne!(token_field_first(&html), token);
    }
    assert_eq!(stats(&client).await.avatar_uploads, 0);

    // Refusals release the token: the corrected form goes through, and
    // without a file it changes the name only.
    let saved = post_profile(&client, &token, "Ada King", None).await;
    saved.assert_status(303);
    let counts = stats(&client).await;
    assert_eq!((counts.avatar_uploads, counts.avatars), (0, 0));
    assert_eq!(listed(&client).await[0].name, "Ada King");
    client
        .get("/account/avatar")
        .send()
        .await
        .assert_status(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_posted_from_another_session_is_refused_and_changes_nothing() {
    for backends in BACKENDS {
        let dir = tempfile::tempdir().expect("temp dir");
        let (client, _database) = client_on(backends, dir.path()).await;
        signed_up(&client).await;
        let token = token_of(&client, "/account").await;
        let file = Some(("me.png", "image/png", PNG));
        post_profile(&client, &token, "Ada", file)
            .await
            .assert_status(303);

        // The same form from another browser (no session cookie), and from
        // another session (a cookie of its own), this one asking for HTML as
        // a browser does.
        let (content_type, body) = profile_form(&token, "Mallory", file);
        for (cookie, accept) in [
            ("theme=dark".to_owned(), "application/json"),
            (
                format!("{SESSION_COOKIE}=another-browser-0123456789abcdef"),
                "text/html,application/xhtml+xml",
            ),
        ] {
            let refused = client
                .post("/account/profile")
                .header("cookie", &cookie)
                .header("accept", accept)
                .header("content-type", &content_type)
                .body(body.clone())
                .send()
                .await;
            refused.assert_status(409);
            assert_eq!(set_session_cookie(&refused), None, "{backends:?}");
            if accept.starts_with("text/html") {
                let html = refused.text();
                assert!(
                    html.contains("already submitted from another session"),
                    "{html}"
                );
                assert!(html.contains("submit_token_other_session"), "{html}");
            } else {
                let problem: serde_json::Value = refused.json();
                assert_eq!(problem["code"], "submit_token_other_session", "{problem}");
            }
        }
        let counts = stats(&client).await;
        assert_eq!(
            (counts.avatar_uploads, counts.avatars),
            (1, 1),
            "{backends:?}"
        );
        assert_eq!(listed(&client).await[0].name, "Ada", "{backends:?}");

        // A login's answer carries the new session's cookie: replayed to
        // another browser it would sign that browser in. It is refused.
        let token = token_of(&client, "/login").await;
        let login = |cookie: Option<String>| {
            let mut request = client.post("/login").form(&[
                ("_submit_token", token.as_str()),
                ("email", "ada@example.com"),
                ("password", PASSWORD),
            ]);
            if let Some(cookie) = cookie {
                request = request.header("cookie", &cookie);
            }
            request.send()
        };
        let signed_in = login(None).await;
        signed_in.assert_status(303);
        assert!(set_session_cookie(&signed_in).is_some());
        let stolen = login(Some(format!("{SESSION_COOKIE}=thief-0123456789abcdef"))).await;
        stolen.assert_status(409);
        assert_eq!(
            set_session_cookie(&stolen),
            None,
            "{backends:?}: no session handed over"
        );
        assert_eq!(stats(&client).await.logins, 1, "{backends:?}");
    }
}

/// Guessing passwords, as an attacker would: over real sockets, each
/// client from an address of its own (every `127.0.0.0/8` address is this
/// machine on Linux).
mod guessing {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::support::chromium::Served;

    fn address(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    /// The saas app, served on a socket, on a fresh SQLite file in `dir`.
    async fn served(dir: &Path) -> (Served, TestClient) {
        let url = format!("sqlite://{}", dir.join("saas.db").display());
        let config =
            AutumnConfig::from_toml_str(&format!("[database]\nurl = \"{url}\"\n")).expect("config");
        let served = Served::start(plain().with_config(saas::configure(config))).await;
        let client = TestClient::for_server(&format!("http://{}", served.address));
        (served, client)
    }

    /// `count` logins as `email` with a wrong password from `client`, on one
    /// rendered form (a refused post does not use its token up); their
    /// statuses.
    async fn wrong_passwords(client: &TestClient, email: &str, count: usize) -> Vec<u16> {
        let token = token_of(client, "/login").await;
        let mut statuses = Vec::with_capacity(count);
        for _ in 0..count {
            let response = client
                .post("/login")
                .form(&[
                    ("_submit_token", token.as_str()),
                    ("email", email),
                    ("password", "not the password"),
                ])
                .send()
                .await;
            if response.status() == 429 {
                assert!(
                    response.header("retry-after").is_some(),
                    "{:?}",
                    response.headers()
                );
            }
            statuses.push(response.status().as_u16());
        }
        statuses
    }

    async fn log_in(client: &TestClient, email: &str) -> TestResponse {
        let token = token_of(client, "/login").await;
        client
            .post("/login")
            .form(&[
                ("_submit_token", token.as_str()),
                ("email", email),
                ("password", PASSWORD),
            ])
            .send()
            .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thousand_wrong_passwords_are_refused_and_another_user_signs_in_meanwhile() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (served, client) = served(dir.path()).await;
        // Two users, each signed up from an address of their own.
        for (last, email, name) in [
            (3, "ada@example.com", "Ada"),
            (4, "grace@example.com", "Grace"),
        ] {
            let user = client.from_address(address(last));
            let token = fresh_token(&user).await;
            see_other(&post_signup(&user, &token, email, name).await);
        }
        let attacker = client.from_address(address(2));
        let attack = tokio::spawn({
            let attacker = attacker.clone();
            async move { wrong_passwords(&attacker, "ada@example.com", 1_000).await }
        });
        // Meanwhile Grace signs in from her own address.
        let grace = client.from_address(address(4));
        see_other(&log_in(&grace, "grace@example.com").await);
        let statuses = attack.await.expect("the attack runs");
        let checked = statuses.iter().filter(|s| **s == 422).count();
        let refused = statuses.iter().filter(|s| **s == 429).count();
        // Ten guesses at Ada's password, whatever the address: the rest
        // were refused before a password was checked.
        assert_eq!(checked, 10, "{statuses:?}");
        assert_eq!(checked + refused, 1_000, "{statuses:?}");
        // The attacker's address is held back on every account now.
        assert_eq!(
            wrong_passwords(&attacker, "grace@example.com", 1).await,
            [429]
        );
        // Grace, from her address, is not.
        see_other(&log_in(&grace, "grace@example.com").await);
        served.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_account_guessed_at_from_many_addresses_gets_ten_guesses() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (served, client) = served(dir.path()).await;
        let ada = client.from_address(address(3));
        let token = fresh_token(&ada).await;
        see_other(&post_signup(&ada, &token, "ada@example.com", "Ada").await);
        let mut statuses = Vec::new();
        for last in 10..30 {
            let attacker = client.from_address(address(last));
            statuses.extend(wrong_passwords(&attacker, "ADA@example.com", 1).await);
        }
        // Each address is well within its own limit; the account is not.
        assert_eq!(
            statuses.iter().filter(|s| **s == 422).count(),
            10,
            "{statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 429).count(),
            10,
            "{statuses:?}"
        );
        served.stop().await;
    }
}
