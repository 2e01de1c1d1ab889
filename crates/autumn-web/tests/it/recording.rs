//! What the guards record, through the real launch path on every backend: a
//! response too large to record is sent whole but leaves a marker, so its
//! retry (or a form's resubmission) is refused with 409 and never runs the
//! handler twice; a route that records server errors replays its 5xx, one
//! that does not runs again.

use crate::support::backend;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use backend::Backend;

use autumn_web::Route;
use autumn_web::config::{AutumnConfig, RecordErrorsMode};
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use autumn_web::test::{TestApp, TestClient, TestResponse};
use serde_json::{Value, json};

/// The record limit the apps here are configured with.
const LIMIT: usize = 1024;
/// What the large handlers add to their answer: well past [`LIMIT`].
const LARGE: usize = 4 * LIMIT;

/// Runs per id (the cases run in parallel, on every backend).
static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn unique(label: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{label}-{}", NEXT.fetch_add(1, Ordering::SeqCst))
}

fn runs(id: &str) -> usize {
    RUNS.lock().expect("runs").get(id).copied().unwrap_or(0)
}

/// Counts a run of `id`, returning its number.
fn count(id: &str) -> usize {
    let mut runs = RUNS.lock().expect("runs");
    let run = runs.entry(id.to_owned()).or_default();
    *run += 1;
    *run
}

fn id_of(body: &Value) -> String {
    body["id"].as_str().unwrap_or_default().to_owned()
}

/// Answers 201 with a body larger than the record limit.
#[post("/reports")]
async fn report(Json(body): Json<Value>) -> (StatusCode, String) {
    let id = id_of(&body);
    let run = count(&id);
    (
        StatusCode::CREATED,
        format!("{id} run {run} {}", "x".repeat(LARGE)),
    )
}

/// Fails late, after its work: its 5xx is recorded.
#[post("/checkout", record_errors = "server")]
async fn checkout(Json(body): Json<Value>) -> (StatusCode, String) {
    count(&id_of(&body));
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "the receipt service is down".to_owned(),
    )
}

/// Fails the same way, under the app's setting.
#[post("/retryable")]
async fn retryable(Json(body): Json<Value>) -> (StatusCode, String) {
    count(&id_of(&body));
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "the provider timed out".to_owned(),
    )
}

/// Fails the same way, and says its errors are never recorded.
#[post("/never-recorded", record_errors = "none")]
async fn never_recorded(Json(body): Json<Value>) -> (StatusCode, String) {
    count(&id_of(&body));
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "the provider timed out".to_owned(),
    )
}

#[derive(serde::Deserialize)]
struct Export {
    title: String,
}

#[get("/exports/new")]
async fn export_form(token: SubmitToken, field: SubmitFormField) -> Markup {
    html! {
        form method="POST" action="/exports" {
            (submit_token_field(&token, &field))
            input type="text" name="title";
        }
    }
}

/// Answers a form post with a page larger than the record limit.
#[post("/exports")]
async fn export(Form(export): Form<Export>) -> String {
    let run = count(&export.title);
    format!("{} run {run} {}", export.title, "x".repeat(LARGE))
}

/// The configuration of `backend`'s fresh storage, records capped at
/// [`LIMIT`] bytes, changed by `change`. The app outlives the storage: its
/// schema stays.
fn config(backend: Backend, change: impl FnOnce(&mut AutumnConfig)) -> AutumnConfig {
    let mut storage = backend.storage();
    storage.keep_schema();
    let mut config = storage.config("");
    config.idempotency.max_record_bytes = LIMIT;
    config.security.submit_token.max_record_bytes = LIMIT;
    change(&mut config);
    config
}

/// An app guarding `routes` with keys on `backend`. `AppBuilder::idempotent`
/// (not `TestApp::idempotent`, which always uses memory) puts the guard on
/// the configured backend.
fn keyed(
    backend: Backend,
    routes: Vec<Route>,
    change: impl FnOnce(&mut AutumnConfig),
) -> TestClient {
    TestApp::from_builder(autumn_web::app().routes(routes).idempotent())
        .with_config(config(backend, change))
        .build()
}

async fn send(client: &TestClient, path: &str, key: &str, body: &Value) -> TestResponse {
    client
        .post(path)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(body.to_string())
        .send()
        .await
}

/// Asserts a problem document with this status and code; returns it.
#[track_caller]
fn problem(response: &TestResponse, status: u16, code: &str) -> Value {
    response.assert_status(status);
    assert_eq!(
        response.header("content-type"),
        Some("application/problem+json")
    );
    let problem: Value = response.json();
    assert_eq!(problem["code"], code, "{problem}");
    problem
}

async fn a_response_too_large_to_record_never_runs_twice(backend: Backend) {
    let client = keyed(backend, routes![report], |_| {});
    let id = unique("report");
    let body = json!({ "id": id });

    let first = send(&client, "/reports", "big", &body).await;
    first.assert_status(201);
    assert_eq!(first.header("x-idempotent-honoured"), Some("true"));
    let text = first.text();
    assert!(text.starts_with(&format!("{id} run 1 ")), "{}", &text[..40]);
    assert!(text.len() > LARGE, "the client gets the whole response");

    // Not recorded, but the handler ran: the retry is refused, not run.
    let retry = send(&client, "/reports", "big", &body).await;
    let refused = problem(&retry, 409, "idempotency_response_not_recorded");
    assert_eq!(refused["new_key_needed"], true, "{refused}");
    assert_eq!(retry.header("x-idempotent-replayed"), None);
    assert_eq!(retry.header("retry-after"), None);
    assert_eq!(runs(&id), 1, "the handler ran once");

    // Another request under the same key is still another request.
    let other = send(&client, "/reports", "big", &json!({ "id": id, "n": 2 })).await;
    problem(&other, 422, "idempotency_key_reused");
    assert_eq!(runs(&id), 1);

    // A new key is a new request.
    send(&client, "/reports", "big-2", &body)
        .await
        .assert_status(201);
    assert_eq!(runs(&id), 2);
}

async fn a_form_whose_answer_is_too_large_is_never_submitted_twice(backend: Backend) {
    let client = TestApp::new()
        .routes(routes![export_form, export])
        .with_config(config(backend, |_| {}))
        .build();
    let page = client.get("/exports/new").send().await.text();
    let token = page
        .split("value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the form has a token")
        .to_owned();
    let title = unique("export");
    let submit = || {
        client
            .post("/exports")
            .form(&[("_submit_token", token.as_str()), ("title", title.as_str())])
            .send()
    };

    let first = submit().await;
    first.assert_status(200);
    assert!(
        first.text().len() > LARGE,
        "the browser gets the whole page"
    );
    let again = submit().await;
    problem(&again, 409, "submit_token_response_not_recorded");
    assert_eq!(again.header("x-submit-token-replayed"), None);
    assert_eq!(runs(&title), 1, "the handler ran once");
}

async fn a_route_that_records_server_errors_replays_its_5xx(backend: Backend) {
    let client = keyed(backend, routes![checkout, retryable], |_| {});
    let id = unique("checkout");
    let body = json!({ "id": id });

    let first = send(&client, "/checkout", "c", &body).await;
    first.assert_status(503);
    assert_eq!(first.header("x-idempotent-replayed"), None);
    let retry = send(&client, "/checkout", "c", &body).await;
    retry
        .assert_status(503)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(runs(&id), 1, "the handler ran once");

    // Without the opt-in, a 5xx releases the key: the retry runs again.
    let id = unique("retryable");
    let body = json!({ "id": id });
    send(&client, "/retryable", "r", &body)
        .await
        .assert_status(503);
    let retry = send(&client, "/retryable", "r", &body).await;
    retry.assert_status(503);
    assert_eq!(retry.header("x-idempotent-replayed"), None);
    assert_eq!(runs(&id), 2, "not recorded: the retry ran");
}

async fn the_app_wide_setting_records_server_errors_unless_a_route_says_none(backend: Backend) {
    let client = keyed(backend, routes![retryable, never_recorded], |config| {
        config.idempotency.record_errors = RecordErrorsMode::Server;
    });
    let id = unique("app-wide");
    let body = json!({ "id": id });
    send(&client, "/retryable", "a", &body)
        .await
        .assert_status(503);
    send(&client, "/retryable", "a", &body)
        .await
        .assert_status(503)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(runs(&id), 1);

    let id = unique("opted-out");
    let body = json!({ "id": id });
    send(&client, "/never-recorded", "n", &body)
        .await
        .assert_status(503);
    let retry = send(&client, "/never-recorded", "n", &body).await;
    assert_eq!(retry.header("x-idempotent-replayed"), None);
    assert_eq!(runs(&id), 2);
}

on_every_backend!(
    a_response_too_large_to_record_never_runs_twice,
    a_form_whose_answer_is_too_large_is_never_submitted_twice,
    a_route_that_records_server_errors_replays_its_5xx,
    the_app_wide_setting_records_server_errors_unless_a_route_says_none,
);
