//! Key administration and in-flight waiting through the app builder: the
//! actuator's `/actuator/idempotency/keys/{storage_key}` on memory, Redis and
//! PostgreSQL, how it is protected, and `[idempotency] in_flight_wait_ms`.

use crate::support::backend;

use std::sync::atomic::{AtomicUsize, Ordering};

use autumn_web::config::{AutumnConfig, Profile};
use autumn_web::idempotency::admin::KeyLookup;
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient, Value};
use backend::Backend;

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[post("/orders")]
async fn create() -> (StatusCode, String) {
    let run = RUNS.fetch_add(1, Ordering::SeqCst);
    (StatusCode::CREATED, format!("order {run}"))
}

fn app(config: AutumnConfig) -> TestClient {
    TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
        .with_config(config)
        .build()
}

fn admin_path(key: &str) -> String {
    format!(
        "/actuator/idempotency/keys/{}",
        KeyLookup::new("POST", "/orders", key).storage_key()
    )
}

/// The token the endpoint asks for in these tests.
const TOKEN: &str = "0123456789abcdef-token";

/// `[idempotency.admin]` with the token, and `extra` keys.
fn admin_toml(extra: &str) -> String {
    format!("[idempotency.admin]\ntoken = \"{TOKEN}\"\n{extra}\n")
}

/// `GET`/`DELETE` on `path`, with the token.
async fn as_admin(client: &TestClient, method: &str, path: &str) -> autumn_web::test::TestResponse {
    let request = match method {
        "DELETE" => client.delete(path),
        _ => client.get(path),
    };
    request
        .header("authorization", &format!("Bearer {TOKEN}"))
        .send()
        .await
}

async fn the_actuator_inspects_and_evicts_a_key(backend: Backend) {
    let storage = backend.storage();
    let client = app(storage.config(&admin_toml("allow_bodies = true")));
    let key = format!("admin-{backend:?}");
    let first = client
        .post("/orders")
        .header("idempotency-key", &key)
        .send()
        .await;
    first.assert_status(201);

    let report = as_admin(&client, "GET", &admin_path(&key)).await;
    report.assert_status(200);
    let report: Value = report.json();
    assert_eq!(report["state"], "recorded", "{report}");
    assert_eq!(report["status"], 201);
    assert!(report["record_expires_at"].as_u64().is_some(), "{report}");
    assert!(
        report.get("body").is_none(),
        "never the body unless asked: {report}"
    );
    let with_body: Value = as_admin(&client, "GET", &format!("{}?body=true", admin_path(&key)))
        .await
        .json();
    assert_eq!(with_body["body"], first.text());

    let evicted = as_admin(&client, "DELETE", &admin_path(&key)).await;
    evicted.assert_status(200);
    assert_eq!(evicted.json::<Value>()["evicted"], true);
    let gone: Value = as_admin(&client, "GET", &admin_path(&key)).await.json();
    assert_eq!(gone["state"], "absent");
    // Evicted, the key runs the handler again.
    let again = client
        .post("/orders")
        .header("idempotency-key", &key)
        .send()
        .await;
    again.assert_status(201);
    assert_ne!(again.text(), first.text());
    assert!(again.header("x-idempotent-replayed").is_none());
}

on_every_backend!(the_actuator_inspects_and_evicts_a_key);

/// The endpoint asks for the token: none, or a wrong one, is 401.
#[tokio::test]
async fn a_configured_token_is_required() {
    let client = app(AutumnConfig::from_toml_str(&admin_toml("")).expect("config"));
    let path = admin_path("k");
    for refused in [
        client.get(&path).send().await,
        client
            .delete(&path)
            .header("authorization", "Bearer wrong")
            .send()
            .await,
        client
            .delete(&path)
            .header("authorization", &format!("Bearer {TOKEN}x"))
            .send()
            .await,
    ] {
        refused.assert_status(401);
        assert_eq!(refused.header("www-authenticate"), Some("Bearer"));
        assert!(
            refused.text().contains("idempotency.admin.token"),
            "{}",
            refused.text()
        );
    }
    as_admin(&client, "GET", &path).await.assert_status(200);
}

fn in_profile(profile: &str, toml: &str) -> AutumnConfig {
    let mut config = AutumnConfig::from_toml_str(&format!(
        "[session]\nallow_memory_in_production = true\n[idempotency]\nallow_memory_in_production = true\n{toml}"
    ))
    .expect("config");
    config.profile = Profile::new(profile);
    config.security.secret_key = Some(crate::support::SECRET_KEY.to_owned());
    config
}

/// Without a token the endpoint is not served, in any profile: an
/// anonymous client can neither read a record nor evict it, so the retry
/// still replays.
#[tokio::test]
async fn without_a_token_the_endpoint_is_not_served_in_any_profile() {
    for profile in ["dev", "test", "staging", "prod"] {
        let client = app(in_profile(profile, ""));
        let key = format!("unserved-{profile}");
        let first = client
            .post("/orders")
            .header("idempotency-key", &key)
            .send()
            .await;
        first.assert_status(201);
        client
            .get(&format!("{}?body=true", admin_path(&key)))
            .send()
            .await
            .assert_status(404);
        client
            .delete(&admin_path(&key))
            .send()
            .await
            .assert_status(404);
        let retry = client
            .post("/orders")
            .header("idempotency-key", &key)
            .send()
            .await;
        assert_eq!(
            retry.header("x-idempotent-replayed"),
            Some("true"),
            "{profile}"
        );
        assert_eq!(retry.text(), first.text(), "{profile}: one run");
    }
}

/// `enabled = false` turns it off even with a token.
#[tokio::test]
async fn enabled_false_turns_the_endpoint_off_even_with_a_token() {
    let client = app(in_profile("dev", &admin_toml("enabled = false")));
    as_admin(&client, "GET", &admin_path("k"))
        .await
        .assert_status(404);
}

fn launch_error(config: AutumnConfig) -> String {
    match TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
        .with_config(config)
        .try_build()
    {
        Ok(_) => panic!("an admin endpoint without a usable token launched"),
        Err(error) => error.to_string(),
    }
}

/// Asked for without a token, or with a short one, in any profile: the
/// launch says which key to set. (Loading refuses such a file too; these
/// configurations are changed in code, after loading.)
#[tokio::test]
async fn enabled_without_a_token_or_with_a_short_one_is_refused_at_startup_in_every_profile() {
    for profile in ["dev", "staging", "prod"] {
        let mut config = in_profile(profile, "");
        config.idempotency.admin.enabled = Some(true);
        let error = launch_error(config);
        assert!(
            error.contains("idempotency.admin.token"),
            "{profile}: {error}"
        );
        let mut config = in_profile(profile, "");
        config.idempotency.admin.token = Some("short".to_owned());
        let error = launch_error(config);
        assert!(
            error.contains("at least 16 characters"),
            "{profile}: {error}"
        );
    }
    let error = AutumnConfig::from_toml_str("[idempotency.admin]\nenabled = true\n")
        .expect_err("a file asking for the endpoint without a token")
        .to_string();
    assert!(error.contains("idempotency.admin.token"), "{error}");
    let client = app(in_profile("prod", &admin_toml("enabled = true")));
    client.get(&admin_path("k")).send().await.assert_status(401);
}

/// A recorded body is shown only with `allow_bodies = true`: without it,
/// `?body=true` is 403 and names the key; the report itself still answers.
#[tokio::test]
async fn recorded_bodies_are_shown_only_when_allowed() {
    let client = app(in_profile("dev", &admin_toml("")));
    client
        .post("/orders")
        .header("idempotency-key", "bodies")
        .send()
        .await
        .assert_status(201);
    let refused = as_admin(
        &client,
        "GET",
        &format!("{}?body=true", admin_path("bodies")),
    )
    .await;
    refused.assert_status(403);
    let problem: Value = refused.json();
    assert_eq!(
        problem["code"], "idempotency_admin_bodies_disabled",
        "{problem}"
    );
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("idempotency.admin.allow_bodies")),
        "{problem}"
    );
    let report = as_admin(&client, "GET", &admin_path("bodies")).await;
    report.assert_status(200);
    assert_eq!(report.json::<Value>()["state"], "recorded");
}

// --- The command line: `AppBuilder::run_command` ---------------------------

/// The builder of the app above, on `config`, for a command line.
fn command_app(config: AutumnConfig) -> autumn_web::AppBuilder {
    autumn_web::app()
        .routes(routes![create])
        .idempotent()
        .with_config(config)
}

fn key_admin_message(outcome: Result<(), autumn_web::CommandError>) -> String {
    match outcome {
        Err(autumn_web::CommandError::KeyAdmin(message)) => message,
        other => panic!("expected a key administration error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_malformed_idempotency_command_answers_with_its_usage_and_serves_nothing() {
    let outcome = command_app(AutumnConfig::default())
        .run_command(["idempotency", "forget", "k"])
        .await;
    let message = key_admin_message(outcome);
    assert!(
        message.starts_with("usage: idempotency inspect|evict"),
        "{message}"
    );
}

#[tokio::test]
async fn the_idempotency_command_is_off_in_production_unless_enabled() {
    let outcome = command_app(in_profile("prod", ""))
        .run_command(["idempotency", "inspect", "k", "--path", "/orders"])
        .await;
    let message = key_admin_message(outcome);
    assert!(
        message.contains("key administration is off under profile `prod`"),
        "{message}"
    );
}

#[tokio::test]
async fn the_idempotency_command_inspects_a_key_in_the_apps_store() {
    let outcome = command_app(AutumnConfig::default())
        .run_command(["idempotency", "inspect", "k", "--path", "/orders"])
        .await;
    assert!(outcome.is_ok(), "{outcome:?}");
}

/// Any other command line is the app's own: it serves, so a launch failure
/// comes back as a launch error, not as a command's.
#[tokio::test]
async fn any_other_command_line_serves_the_app() {
    let mut config = AutumnConfig::default();
    config.profile = Profile::new("prod");
    config.security.secret_key = Some(crate::support::SECRET_KEY.to_owned());
    let outcome = command_app(config)
        .run_command(["--my-own-flag", "idempotency"])
        .await;
    match outcome {
        Err(autumn_web::CommandError::Launch(autumn_web::LaunchError::MemoryInProduction {
            ..
        })) => {}
        other => panic!("expected the launch's refusal, got {other:?}"),
    }
}

/// `--body` needs `allow_bodies` on the command line too.
#[tokio::test]
async fn the_idempotency_command_shows_a_body_only_when_allowed() {
    let outcome = command_app(AutumnConfig::default())
        .run_command(["idempotency", "inspect", "k", "--path", "/orders", "--body"])
        .await;
    let message = key_admin_message(outcome);
    assert!(
        message.contains("idempotency.admin.allow_bodies"),
        "{message}"
    );
    let allowed =
        AutumnConfig::from_toml_str("[idempotency.admin]\nallow_bodies = true\n").expect("config");
    let outcome = command_app(allowed)
        .run_command(["idempotency", "inspect", "k", "--path", "/orders", "--body"])
        .await;
    assert!(outcome.is_ok(), "{outcome:?}");
}
