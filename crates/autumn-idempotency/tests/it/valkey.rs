//! The Redis store on Valkey (8 or later, `valkey-server` from
//! `cargo xtask services`): the conformance suite on one server of the
//! test's own and on a six-node Valkey cluster, and a request replayed
//! through the layer.
#![cfg(feature = "redis")]

use std::sync::Arc;

use crate::support::app::Fixture;
use crate::support::redis::cluster::shared_valkey_cluster;
use crate::support::redis::{ValkeyServer, unique_prefix};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{IdempotencyStore, RedisIdempotencyStore};
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
