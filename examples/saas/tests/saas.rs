//! The signup app under TestApp, and the real binary over a socket.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use autumn_web::AppBuilder;
use autumn_web::config::AutumnConfig;
use autumn_web::security::SUBMIT_TOKEN_REPLAYED;
use autumn_web::test::{ServerProcess, TestApp, TestClient, TestResponse};
use saas::{SignupGate, User};
use tokio::sync::watch;

/// `app` on a fresh SQLite file in `dir`, with `extra` TOML appended to the
/// configuration.
fn client_in(dir: &Path, app: AppBuilder, extra: &str) -> TestClient {
    let url = format!("sqlite://{}", dir.join("saas.db").display());
    let config = AutumnConfig::from_toml_str(&format!("[database]\nurl = \"{url}\"\n{extra}"))
        .expect("config");
    TestApp::from_builder(app).with_config(config).build()
}

fn plain() -> AppBuilder {
    saas::app_with_delay(false, Duration::ZERO)
}

/// How many duplicate submissions in this process have started waiting
/// for the first one (the layer logs each, `submit_token.waiting`).
static WAITING: OnceLock<watch::Sender<usize>> = OnceLock::new();

/// The tests that count [`WAITING`] take turns, so each count is theirs.
static WAITERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Counts the layer's `submit_token.waiting` events into [`WAITING`].
struct WaitingWatcher;

impl tracing::Subscriber for WaitingWatcher {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.is_event() && metadata.fields().field("submit_token.waiting").is_some()
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

async fn post_signup(client: &TestClient, token: &str, email: &str, name: &str) -> TestResponse {
    client
        .post("/signup")
        .form(&[("_submit_token", token), ("email", email), ("name", name)])
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
    assert!(location.starts_with("/welcome?user="), "{location}");
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
async fn a_valid_signup_redirects_to_welcome_and_is_listed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client = client_in(dir.path(), plain(), "");
    let token = fresh_token(&client).await;
    let created = post_signup(&client, &token, "  Ada@Example.com ", " Ada Lovelace ").await;
    let location = see_other(&created);
    assert_eq!(created.header(SUBMIT_TOKEN_REPLAYED.as_str()), None);

    let users = listed(&client).await;
    assert_eq!(users.len(), 1);
    let user = &users[0];
    assert_eq!(
        (user.email.as_str(), user.name.as_str()),
        ("ada@example.com", "Ada Lovelace")
    );
    assert_eq!(location, format!("/welcome?user={}", user.id));

    let welcome = client.get(&location).send().await;
    welcome.assert_status(200);
    assert!(welcome.text().contains("Welcome, Ada Lovelace!"));
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
    let first = post_signup(&client, &token, "ada@example.com", "Ada").await;
    let again = post_signup(&client, &token, "ada@example.com", "Ada").await;
    let location = see_other(&first);
    assert_eq!(see_other(&again), location);
    again.assert_header(SUBMIT_TOKEN_REPLAYED.as_str(), "true");
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

/// A fresh PostgreSQL schema, as a URL whose connections use it.
async fn postgres_schema() -> String {
    use autumn_web::reexports::diesel_async::{AsyncConnection as _, SimpleAsyncConnection as _};
    let base = std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let schema = format!("saas_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = autumn_web::db::PgConnection::establish(&base)
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL is not reachable at {base} ({e}); start it or set TEST_DATABASE_URL")
        });
    conn.batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("create schema");
    format!("{base}?options=-c%20search_path%3D{schema}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_with_tokens_in_redis_over_two_replicas() {
    let redis =
        std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let config = format!(
        "[database]\nurl = \"{}\"\n[idempotency]\nbackend = \"redis\"\n\
         [idempotency.redis]\nurl = \"{redis}\"\nkey_prefix = \"saas-test:{}\"\n\
         [security.submit_token]\nin_flight_wait_ms = 5000\n",
        postgres_schema().await,
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
    // The same browser: it sends the session cookie the form page gave it,
    // whichever replica answers (a token posted from another session is
    // refused).
    let cookie = a
        .cookie("autumn_session")
        .expect("the form page gave a session");
    let second = tokio::spawn({
        let (b, token) = (b.clone(), token.clone());
        async move {
            b.post("/signup")
                .header("cookie", &format!("autumn_session={cookie}"))
                .form(&[
                    ("_submit_token", token.as_str()),
                    ("email", "ada@example.com"),
                    ("name", "Ada"),
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
    let welcome = b.get(&location).send().await;
    welcome.assert_status(200);
    assert!(welcome.text().contains("Welcome, Ada!"));
}

/// The built binary, run in its own directory (where it makes `saas.db`).
fn start_binary(dir: &Path, env: &[(&str, &str)]) -> ServerProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_saas"));
    command
        .current_dir(dir)
        .envs(env.iter().copied())
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
    let server = start_binary(dir.path(), &[("SAAS_SIGNUP_DELAY_MS", "500")]);
    let signup = server.url("/signup");

    let (status, _, page) = http("GET", &signup, None).await;
    assert_eq!(status, 200, "{page}");
    let token = token_field_first(&page);
    let form = format!("_submit_token={token}&email=ada%40example.com&name=Ada");

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

    // Both land on the same welcome page: main makes the duplicate wait for
    // the first post and get its answer, rather than a 409.
    for (status, headers, body) in [&first, &second] {
        assert_eq!(*status, 303, "{body}");
        assert!(
            headers["location"]
                .to_str()
                .is_ok_and(|l| l.starts_with("/welcome?user=")),
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
