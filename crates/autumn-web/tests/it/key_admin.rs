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

async fn the_actuator_inspects_and_evicts_a_key(backend: Backend) {
    let storage = backend.storage();
    let client = app(storage.config(""));
    let key = format!("admin-{backend:?}");
    let first = client
        .post("/orders")
        .header("idempotency-key", &key)
        .send()
        .await;
    first.assert_status(201);

    let report = client.get(&admin_path(&key)).send().await;
    report.assert_status(200);
    let report: Value = report.json();
    assert_eq!(report["state"], "recorded", "{report}");
    assert_eq!(report["status"], 201);
    assert!(report["record_expires_at"].as_u64().is_some(), "{report}");
    assert!(
        report.get("body").is_none(),
        "never the body unless asked: {report}"
    );
    let with_body: Value = client
        .get(&format!("{}?body=true", admin_path(&key)))
        .send()
        .await
        .json();
    assert_eq!(with_body["body"], first.text());

    let evicted = client.delete(&admin_path(&key)).send().await;
    evicted.assert_status(200);
    assert_eq!(evicted.json::<Value>()["evicted"], true);
    let gone: Value = client.get(&admin_path(&key)).send().await.json();
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

/// With a token configured, the endpoint asks for it.
#[tokio::test]
async fn a_configured_token_is_required() {
    let client = app(AutumnConfig::from_toml_str(
        "[idempotency.admin]\ntoken = \"0123456789abcdef-token\"\n",
    )
    .expect("config"));
    let path = admin_path("k");
    for refused in [
        client.get(&path).send().await,
        client
            .delete(&path)
            .header("authorization", "Bearer wrong")
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
    client
        .get(&path)
        .header("authorization", "Bearer 0123456789abcdef-token")
        .send()
        .await
        .assert_status(200);
}

fn production(toml: &str) -> AutumnConfig {
    let mut config = AutumnConfig::from_toml_str(&format!(
        "[session]\nallow_memory_in_production = true\n[idempotency]\nallow_memory_in_production = true\n{toml}"
    ))
    .expect("config");
    config.profile = Profile::new("prod");
    config
}

/// Off in production unless enabled, and enabled there only with a token.
#[tokio::test]
async fn production_serves_it_only_when_enabled_with_a_token() {
    let client = app(production(""));
    client.get(&admin_path("k")).send().await.assert_status(404);

    let error = match TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
        .with_config(production("[idempotency.admin]\nenabled = true\n"))
        .try_build()
    {
        Ok(_) => panic!("an open admin endpoint in production launched"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("idempotency.admin.token"), "{error}");

    let client = app(production(
        "[idempotency.admin]\nenabled = true\ntoken = \"0123456789abcdef-token\"\n",
    ));
    client.get(&admin_path("k")).send().await.assert_status(401);
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
    let outcome = command_app(production(""))
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
