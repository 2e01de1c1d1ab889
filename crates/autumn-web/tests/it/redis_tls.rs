//! An app whose `idempotency.redis.url` is `rediss://` starts and replays
//! keyed requests over TLS, against a real redis-server that speaks TLS only
//! (`--port 0`), trusting a CA made for the test through
//! `idempotency.redis.tls_ca_file` and presenting a client certificate when
//! the server asks for one; an ACL user in the URL works. A TLS file that
//! cannot be used, a server certificate from another CA and a wrong
//! password each stop the launch in one line naming what to fix. A
//! `rediss+cluster://` URL does the same against a real Redis Cluster whose
//! six nodes speak TLS only, to clients and to each other. A Valkey server
//! built with TLS takes the same app and certificates.
#![cfg(feature = "redis")]

use std::path::Path;

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::redis::{RedisConnection, RedisTls};
use autumn_web::test::TestApp;

use crate::support::redis_support::cluster::shared_tls_cluster;
use crate::support::redis_support::{ClientCerts, RedisServer, unique_prefix};
use autumn_testkit::tls::TestCa;

static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[post("/orders")]
async fn create() -> (StatusCode, String) {
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    (StatusCode::CREATED, format!("order {run}"))
}

/// `[idempotency]` on Redis at `url` with `redis_keys` (TLS files), under
/// `prefix`.
fn config(url: &str, prefix: &str, redis_keys: &str) -> AutumnConfig {
    AutumnConfig::from_toml_str(&format!(
        "[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\n{redis_keys}"
    ))
    .expect("a valid config")
}

fn app(config: AutumnConfig) -> TestApp {
    TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
        .with_config(config)
}

fn launch_error(config: AutumnConfig) -> String {
    match app(config).try_build() {
        Ok(_) => panic!("expected a launch error"),
        Err(error) => {
            let message = error.to_string();
            assert!(!message.contains('\n'), "one line: {message}");
            message
        }
    }
}

/// TOML for a path (quoted, backslashes escaped).
fn toml_path(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

/// A keyed request runs once and its retry is replayed.
async fn a_keyed_request_is_replayed(config: AutumnConfig, key: &str) {
    let client = app(config).build();
    let first = client
        .post("/orders")
        .header("idempotency-key", key)
        .send()
        .await;
    first.assert_status(201);
    let retry = client
        .post("/orders")
        .header("idempotency-key", key)
        .send()
        .await;
    retry
        .assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(first.text(), retry.text());
}

/// The keys under `prefix:` on the server `connection` reaches.
async fn keys_under(connection: &RedisConnection, prefix: &str) -> Vec<String> {
    let pattern = format!("{prefix}:*");
    connection
        .run(|mut link| {
            let pattern = pattern.clone();
            async move {
                ::redis::cmd("KEYS")
                    .arg(pattern)
                    .query_async(&mut link)
                    .await
            }
        })
        .await
        .expect("KEYS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_on_redis_over_tls_starts_and_replays_a_keyed_request() {
    let ca = TestCa::new();
    let server = RedisServer::with_tls(&ca, ClientCerts::NotAsked);
    let url = server.url();
    assert!(url.starts_with("rediss://localhost:"), "{url}");
    let prefix = unique_prefix();
    let tls_keys = format!("tls_ca_file = {}\n", toml_path(ca.ca_file()));

    a_keyed_request_is_replayed(config(&url, &prefix, &tls_keys), "tls-order-1").await;

    // The record is in the TLS-only server (`port` 0: nothing else
    // answers), written over the app's TLS connection.
    let connection = RedisConnection::with_tls(&url, &RedisTls::new().with_ca_file(ca.ca_file()))
        .expect("a rediss:// URL");
    let port: Vec<String> = connection
        .run(|mut link| async move {
            ::redis::cmd("CONFIG")
                .arg("GET")
                .arg("port")
                .query_async(&mut link)
                .await
        })
        .await
        .expect("CONFIG GET port");
    assert_eq!(port, ["port", "0"]);
    assert!(
        !keys_under(&connection, &prefix).await.is_empty(),
        "the app's keys are on the TLS server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_on_a_redis_cluster_over_tls_starts_and_replays_a_keyed_request() {
    let cluster = tokio::task::block_in_place(shared_tls_cluster);
    let url = cluster.url();
    assert!(url.starts_with("rediss+cluster://127.0.0.1:"), "{url}");
    let ca_file = cluster.ca_file().expect("a TLS cluster's CA");
    let prefix = unique_prefix();
    let tls_keys = format!("tls_ca_file = {}\n", toml_path(ca_file));

    a_keyed_request_is_replayed(config(&url, &prefix, &tls_keys), "tls-cluster-order-1").await;

    // Every node has its plaintext port off and TLS on its cluster bus:
    // the app can only have reached them over TLS.
    for port in cluster.ports() {
        let answer = |setting: &str| {
            cluster
                .query_node(port, &["CONFIG", "GET", setting])
                .unwrap_or_else(|error| panic!("CONFIG GET {setting} on node {port}: {error}"))
        };
        assert_eq!(answer("port"), "port\n0", "node {port}");
        assert_eq!(answer("tls-cluster"), "tls-cluster\nyes", "node {port}");
    }
    // The record is in the cluster (KEYS goes to every master), written
    // over the app's TLS connections.
    let connection = RedisConnection::with_tls(&url, &RedisTls::new().with_ca_file(ca_file))
        .expect("a rediss+cluster:// URL");
    assert!(connection.is_cluster());
    assert!(
        !keys_under(&connection, &prefix).await.is_empty(),
        "the app's keys are on the TLS cluster"
    );
}

#[test]
fn a_tls_cluster_url_without_its_ca_file_stops_the_launch_saying_so() {
    let cluster = shared_tls_cluster();
    let message = launch_error(config(&cluster.url(), &unique_prefix(), ""));
    assert!(
        message.contains(&format!(
            "cannot reach Redis for idempotency.redis.url ({})",
            cluster.url()
        )),
        "{message}"
    );
    assert!(
        message.contains("invalid peer certificate: UnknownIssuer"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_presents_its_client_certificate_to_a_server_that_requires_one() {
    let ca = TestCa::new();
    let server = RedisServer::with_tls(&ca, ClientCerts::Required);
    let prefix = unique_prefix();
    let ca_only = format!("tls_ca_file = {}\n", toml_path(ca.ca_file()));
    let message = launch_error(config(&server.url(), &prefix, &ca_only));
    assert!(
        message.contains(&format!(
            "cannot reach Redis for idempotency.redis.url ({})",
            server.url()
        )),
        "{message}"
    );

    let with_cert = format!(
        "{ca_only}tls_cert_file = {}\ntls_key_file = {}\n",
        toml_path(ca.client_cert()),
        toml_path(ca.client_key())
    );
    a_keyed_request_is_replayed(config(&server.url(), &prefix, &with_cert), "mtls-order-1").await;
}

#[test]
fn a_server_certificate_from_another_ca_stops_the_launch_saying_so() {
    let ca = TestCa::new();
    let server = RedisServer::with_tls(&ca, ClientCerts::NotAsked);
    let other = TestCa::new();
    let keys = format!("tls_ca_file = {}\n", toml_path(other.ca_file()));
    let message = launch_error(config(&server.url(), &unique_prefix(), &keys));
    assert!(
        message.contains(&format!(
            "cannot reach Redis for idempotency.redis.url ({})",
            server.url()
        )),
        "{message}"
    );
    assert!(
        message.contains("invalid peer certificate: UnknownIssuer"),
        "{message}"
    );
}

#[test]
fn a_tls_file_that_cannot_be_used_stops_the_launch_in_one_line_naming_its_key() {
    let ca = TestCa::new();
    let url = "rediss://localhost:6380";
    let missing = ca.dir().join("missing-ca.pem");
    let message = launch_error(config(
        url,
        "p",
        &format!("tls_ca_file = {}\n", toml_path(&missing)),
    ));
    assert!(
        message.starts_with(&format!(
            "idempotency.redis.tls_ca_file ({}) cannot be used: cannot read it:",
            missing.display()
        )),
        "{message}"
    );

    let not_pem = ca.dir().join("not-a-certificate.pem");
    std::fs::write(&not_pem, "hello\n").expect("write a file");
    let message = launch_error(config(
        url,
        "p",
        &format!("tls_ca_file = {}\n", toml_path(&not_pem)),
    ));
    assert_eq!(
        message,
        format!(
            "idempotency.redis.tls_ca_file ({}) cannot be used: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            not_pem.display()
        )
    );

    let message = launch_error(config(
        url,
        "p",
        &format!(
            "tls_cert_file = {}\ntls_key_file = {}\n",
            toml_path(ca.client_cert()),
            toml_path(ca.client_cert())
        ),
    ));
    assert!(
        message.starts_with(&format!(
            "idempotency.redis.tls_key_file ({}) cannot be used: holds no usable PEM private key",
            ca.client_cert().display()
        )),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_in_the_url_works_and_a_wrong_password_stops_the_launch() {
    let server = RedisServer::with_acl_user("orders-app", "correct-horse");
    let prefix = unique_prefix();
    a_keyed_request_is_replayed(
        config(&server.url_as("orders-app", "correct-horse"), &prefix, ""),
        "acl-order-1",
    )
    .await;

    let message = launch_error(config(
        &server.url_as("orders-app", "battery-staple"),
        &prefix,
        "",
    ));
    assert!(
        message.contains("refused the user and password in the URL (AUTH failed)"),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "redis://orders-app:***@127.0.0.1:{}",
            server.port()
        )),
        "{message}"
    );
    assert!(!message.contains("battery-staple"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_on_valkey_over_tls_presents_its_client_certificate_and_replays() {
    use crate::support::redis_support::ValkeyServer;
    let ca = TestCa::new();
    let server = ValkeyServer::with_tls(&ca, ClientCerts::Required);
    let prefix = unique_prefix();
    let keys = format!(
        "tls_ca_file = {}\ntls_cert_file = {}\ntls_key_file = {}\n",
        toml_path(ca.ca_file()),
        toml_path(ca.client_cert()),
        toml_path(ca.client_key())
    );
    a_keyed_request_is_replayed(config(&server.url(), &prefix, &keys), "valkey-tls-order-1").await;

    // What answered is Valkey, over TLS only: the record is on it.
    let connection = RedisConnection::with_tls(
        &server.url(),
        &RedisTls::new()
            .with_ca_file(ca.ca_file())
            .with_client_cert(ca.client_cert(), ca.client_key()),
    )
    .expect("a rediss:// URL");
    let info: String = connection
        .run(|mut link| async move {
            ::redis::cmd("INFO")
                .arg("server")
                .query_async(&mut link)
                .await
        })
        .await
        .expect("INFO server");
    assert!(
        info.contains(&format!("valkey_version:{}", server.version())),
        "{info}"
    );
    assert!(
        !keys_under(&connection, &prefix).await.is_empty(),
        "the app's keys are on the Valkey server"
    );
}
