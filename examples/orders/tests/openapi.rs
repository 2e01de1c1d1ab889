//! The orders example's OpenAPI document as its clients meet it: the
//! committed file is the app's, and a client generated from it by a
//! generator no one here wrote places an order and retries it safely.

use std::process::Command;

use autumn_testkit::api_tools;
use autumn_web::config::AutumnConfig;
use autumn_web::test::ServerProcess;

/// The document the app builds under the default configuration, as
/// `orders openapi FILE` writes it.
fn built() -> bytes::Bytes {
    orders::app(orders::Orders::default())
        .with_config(AutumnConfig::default())
        .openapi_document()
        .expect("the app builds")
}

#[test]
fn the_committed_document_is_the_one_the_app_builds() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
    let committed = std::fs::read(path).unwrap_or_default();
    assert!(
        committed == built(),
        "examples/orders/openapi.json is not the app's document: run `cargo xtask openapi` and commit it"
    );
}

#[test]
fn the_binary_writes_the_same_document() {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("openapi.json");
    let status = Command::new(env!("CARGO_BIN_EXE_orders"))
        .env_clear()
        .arg("openapi")
        .arg(&file)
        .status()
        .expect("the orders binary runs");
    assert!(status.success(), "{status}");
    assert_eq!(std::fs::read(&file).expect("the file"), built());
}

/// `openapi-python-client` generates a client from the served document;
/// `client/retry.py` places an order with it and retries with the same
/// key: the retry is the first answer replayed, and one order exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_python_client_retries_without_a_second_order() {
    let server = ServerProcess::start(Command::new(env!("CARGO_BIN_EXE_orders")));
    let document = server.client().get("/openapi.json").send().await;
    let dir = tempfile::tempdir().expect("a directory");
    api_tools::python_client(document.bytes(), dir.path(), "orders_client");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/client/retry.py");
    let base = server.base_url().to_owned();
    let path = dir.path().to_owned();
    let seen = tokio::task::spawn_blocking(move || {
        api_tools::python(std::path::Path::new(script), &path, &[&base])
    })
    .await
    .expect("the client ran");
    let seen: serde_json::Value = serde_json::from_str(&seen).expect("one JSON line");
    assert_eq!(seen["first"]["status"], 201, "{seen}");
    assert_eq!(seen["retry"]["status"], 201, "{seen}");
    assert_eq!(seen["retry"]["replayed"], "true", "{seen}");
    assert_eq!(seen["retry"]["id"], seen["first"]["id"], "{seen}");
    assert_eq!(seen["shown"], seen["first"]["id"], "{seen}");
    let id = seen["first"]["id"].as_str().expect("an id");
    assert_eq!(seen["location"], format!("/orders/{id}"), "{seen}");
    let all: Vec<orders::Order> = server.client().get("/orders").send().await.json();
    assert_eq!(all.len(), 1, "one order for one key: {all:?}");
}
