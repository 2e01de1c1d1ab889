//! The Redis store on Valkey (8 or later, built with TLS: `valkey-server`
//! from `cargo xtask services`): the conformance suite on one server of the
//! test's own and on a six-node Valkey cluster, each in plaintext and
//! TLS-only, and a request replayed through the layer.
#![cfg(feature = "redis")]

use std::sync::Arc;

use crate::support::app::Fixture;
use crate::support::redis::cluster::{shared_valkey_cluster, shared_valkey_tls_cluster};
use crate::support::redis::{ClientCerts, ValkeyServer, unique_prefix};
use autumn_base::redis::{RedisConnection, RedisTls};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{IdempotencyStore, RedisIdempotencyStore};
use autumn_testkit::tls::TestCa;
use http::StatusCode;

fn store(url: &str, prefix: &str, clock: &ManualClock) -> Arc<RedisIdempotencyStore> {
    Arc::new(
        RedisIdempotencyStore::new(url, prefix)
            .expect("a valid URL")
            .with_clock(Arc::new(clock.clone())),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_passes_the_conformance_suite_on_valkey() {
    let server = ValkeyServer::new();
    let url = server.url();
    // Really Valkey: it says so itself.
    let info: String = ::redis::cmd("INFO")
        .arg("server")
        .query_async(&mut crate::support::redis::plain_connection(&url).await)
        .await
        .expect("INFO server");
    assert!(
        info.contains(&format!("valkey_version:{}", server.version())),
        "{info}"
    );
    crate::support::conformance::run_all_shared(|clocks| {
        let prefix = unique_prefix();
        clocks
            .iter()
            .map(|clock| store(&url, &prefix, clock) as Arc<dyn IdempotencyStore>)
            .collect()
    })
    .await;

    let clock = ManualClock::new();
    let f = Fixture::with_store(store(&url, &unique_prefix(), &clock), clock, |layer| layer);
    assert_eq!(
        f.post("/orders").key("v-1").send().await.status,
        StatusCode::CREATED
    );
    assert!(f.post("/orders").key("v-1").send().await.replayed());
    assert_eq!(f.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_store_passes_the_conformance_suite_on_a_valkey_cluster() {
    let url = shared_valkey_cluster().url();
    crate::support::conformance::run_all_shared(|clocks| {
        let prefix = unique_prefix();
        clocks
            .iter()
            .map(|clock| store(&url, &prefix, clock) as Arc<dyn IdempotencyStore>)
            .collect()
    })
    .await;
}

/// The store on `connection`, through the layer: a keyed request runs once
/// and its retry is replayed.
async fn a_keyed_request_is_replayed(connection: RedisConnection, key: &str) {
    let clock = ManualClock::new();
    let store = RedisIdempotencyStore::from_connection(connection, &unique_prefix())
        .with_clock(Arc::new(clock.clone()));
    let f = Fixture::with_store(Arc::new(store), clock, |layer| layer);
    assert_eq!(
        f.post("/orders").key(key).send().await.status,
        StatusCode::CREATED
    );
    assert!(f.post("/orders").key(key).send().await.replayed());
    assert_eq!(f.runs(), 1);
}

/// `INFO server` and `CONFIG GET port` over `connection`: which server
/// answered, and its plaintext port.
async fn server_info(connection: &RedisConnection) -> (String, String) {
    connection
        .run(|mut link| async move {
            let info: String = ::redis::cmd("INFO")
                .arg("server")
                .query_async(&mut link)
                .await?;
            let port: Vec<String> = ::redis::cmd("CONFIG")
                .arg("GET")
                .arg("port")
                .query_async(&mut link)
                .await?;
            Ok((info, port.get(1).cloned().unwrap_or_default()))
        })
        .await
        .expect("INFO server and CONFIG GET port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_passes_the_conformance_suite_on_valkey_over_tls_with_a_client_certificate()
{
    let ca = TestCa::new();
    let server = ValkeyServer::with_tls(&ca, ClientCerts::Required);
    let url = server.url();
    assert!(url.starts_with("rediss://localhost:"), "{url}");
    let tls = RedisTls::new()
        .with_ca_file(ca.ca_file())
        .with_client_cert(ca.client_cert(), ca.client_key());
    let connection = RedisConnection::with_tls(&url, &tls).expect("a rediss:// URL");
    assert!(connection.is_tls());
    // Valkey itself speaks TLS here (no proxy in front): it says which
    // server it is, and that its plaintext port is off.
    let (info, port) = server_info(&connection).await;
    assert!(
        info.contains(&format!("valkey_version:{}", server.version())),
        "{info}"
    );
    assert_eq!(port, "0");
    // Without a client certificate, Valkey refuses the handshake.
    let anonymous = RedisConnection::with_tls(&url, &RedisTls::new().with_ca_file(ca.ca_file()))
        .expect("a rediss:// URL");
    tokio::time::timeout(std::time::Duration::from_secs(10), anonymous.ping())
        .await
        .expect("an answer within 10 s")
        .expect_err("Valkey asks for a client certificate");

    crate::support::conformance::run_all_shared(|clocks| {
        let prefix = unique_prefix();
        clocks
            .iter()
            .map(|clock| {
                Arc::new(
                    RedisIdempotencyStore::from_connection(connection.clone(), &prefix)
                        .with_clock(Arc::new(clock.clone())),
                ) as Arc<dyn IdempotencyStore>
            })
            .collect()
    })
    .await;
    a_keyed_request_is_replayed(connection, "valkey-tls-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_store_passes_the_conformance_suite_on_a_valkey_cluster_over_tls() {
    let cluster = tokio::task::block_in_place(shared_valkey_tls_cluster);
    let url = cluster.url();
    assert!(url.starts_with("rediss+cluster://127.0.0.1:"), "{url}");
    let tls = RedisTls::new().with_ca_file(cluster.ca_file().expect("a TLS cluster's CA"));
    let connection = RedisConnection::with_tls(&url, &tls).expect("a rediss+cluster:// URL");
    assert!(connection.is_cluster() && connection.is_tls());
    // Every node is Valkey with its plaintext port off and TLS on its
    // cluster bus.
    for port in cluster.ports() {
        let answer = |args: &[&str]| {
            cluster
                .query_node(port, args)
                .unwrap_or_else(|error| panic!("{args:?} on node {port}: {error}"))
        };
        assert!(
            answer(&["INFO", "server"]).contains("valkey_version:"),
            "node {port}"
        );
        assert_eq!(answer(&["CONFIG", "GET", "port"]), "port\n0", "node {port}");
        assert_eq!(
            answer(&["CONFIG", "GET", "tls-cluster"]),
            "tls-cluster\nyes",
            "node {port}"
        );
    }

    crate::support::conformance::run_all_shared(|clocks| {
        let prefix = unique_prefix();
        clocks
            .iter()
            .map(|clock| {
                Arc::new(
                    RedisIdempotencyStore::from_connection(connection.clone(), &prefix)
                        .with_clock(Arc::new(clock.clone())),
                ) as Arc<dyn IdempotencyStore>
            })
            .collect()
    })
    .await;
    a_keyed_request_is_replayed(connection, "valkey-tls-cluster-1").await;
}
