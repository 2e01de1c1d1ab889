//! The Redis store on a real Redis Cluster (six servers of the test's own:
//! three masters, three replicas): the conformance suite, the command count
//! as the masters see it, replicas of the app sharing the cluster, and a
//! master crashing while a request runs.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use crate::support::app::Fixture;
use crate::support::redis::cluster::{RedisCluster, query, shared_cluster};
use crate::support::redis::{Monitor, client_commands, command_name, unique_prefix};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{IdempotencyStore, RedisIdempotencyStore};
use http::StatusCode;

fn store(url: &str, prefix: &str, clock: &ManualClock) -> Arc<RedisIdempotencyStore> {
    Arc::new(
        RedisIdempotencyStore::new(url, prefix)
            .expect("a valid Redis Cluster URL")
            .with_clock(Arc::new(clock.clone())),
    )
}

/// One replica of the app on the cluster at `url`.
fn replica(url: &str, prefix: &str, clock: &ManualClock) -> Fixture {
    Fixture::with_store(store(url, prefix, clock), clock.clone(), |layer| layer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_store_passes_the_conformance_suite() {
    let url = shared_cluster().url();
    crate::support::conformance::run_all_shared(|clocks| {
        let prefix = unique_prefix();
        clocks
            .iter()
            .map(|clock| store(&url, &prefix, clock) as Arc<dyn IdempotencyStore>)
            .collect()
    })
    .await;
}

#[tokio::test]
async fn one_seed_node_is_enough_to_find_the_whole_cluster() {
    let cluster = shared_cluster();
    let prefix = unique_prefix();
    let f = replica(&cluster.url_with_one_seed(), &prefix, &ManualClock::new());
    // Keys spread over the three masters' slots: each must reach its owner.
    for i in 0..30 {
        let key = format!("k{i}");
        assert_eq!(
            f.post("/orders").key(&key).send().await.status,
            StatusCode::CREATED
        );
        assert!(f.post("/orders").key(&key).send().await.replayed());
    }
    assert_eq!(f.runs(), 30);
}

#[tokio::test]
async fn a_first_time_request_costs_two_commands_and_a_replay_one_on_the_cluster() {
    let cluster = shared_cluster();
    let prefix = unique_prefix();
    let f = replica(&cluster.url(), &prefix, &ManualClock::new());
    // Warm up: connect, learn the slots, load the scripts on every node.
    assert_eq!(
        f.post("/orders").key("warm-up").send().await.status,
        StatusCode::CREATED
    );
    let mut monitors = Vec::new();
    for port in cluster.master_ports() {
        monitors.push(Monitor::connect(&format!("redis://127.0.0.1:{port}")).await);
    }
    assert_eq!(monitors.len(), 3, "three masters");

    // What every master ran since the last look, this test's commands only
    // (other tests share the cluster, under other prefixes).
    async fn ours(monitors: &mut [Monitor], prefix: &str) -> Vec<String> {
        let mut seen = Vec::new();
        for monitor in monitors.iter_mut() {
            let lines = monitor.mark().await;
            seen.extend(
                client_commands(&lines, prefix)
                    .into_iter()
                    .map(str::to_owned),
            );
        }
        seen
    }

    for i in 0..10 {
        let key = format!("k{i}");
        let first = f.post("/orders").key(&key).body("x").send().await;
        assert_eq!(first.status, StatusCode::CREATED);
        assert!(!first.replayed());
        let lines = ours(&mut monitors, &prefix).await;
        assert_eq!(
            lines.len(),
            2,
            "claim + finish, on the slot's master: {lines:#?}"
        );
        assert!(
            lines.iter().all(|line| command_name(line) == "EVALSHA"),
            "{lines:#?}"
        );

        let replay = f.post("/orders").key(&key).body("x").send().await;
        assert!(replay.replayed());
        let lines = ours(&mut monitors, &prefix).await;
        assert_eq!(lines.len(), 1, "claim: {lines:#?}");
        assert_eq!(command_name(&lines[0]), "EVALSHA");
    }
    assert_eq!(f.runs(), 11, "warm-up + ten first-time requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_duplicates_over_two_replicas_run_the_handler_once_on_the_cluster() {
    let url = shared_cluster().url();
    let prefix = unique_prefix();
    let clock = ManualClock::new();
    let (a, b) = (
        replica(&url, &prefix, &clock),
        replica(&url, &prefix, &clock),
    );
    crate::support::app::burst(&[&a, &b], 200).await;
}

/// Polls the replica on `port` (read-only mode) until it holds `pattern`'s
/// keys: the master's write reached it.
fn wait_until_replicated(port: u16, pattern: &str) {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("a URL");
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .expect("the replica");
    let () = ::redis::cmd("READONLY")
        .query(&mut connection)
        .expect("READONLY");
    autumn_testkit::eventually(
        &format!("{pattern} to reach the replica on port {port}"),
        Duration::from_secs(10),
        || {
            let keys: Vec<String> = ::redis::cmd("KEYS")
                .arg(pattern)
                .query(&mut connection)
                .expect("KEYS");
            !keys.is_empty()
        },
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_crash_fails_requests_closed_runs_nothing_twice_and_service_resumes() {
    use tokio::task::block_in_place;

    // A cluster of the test's own: this one loses a master.
    let mut cluster = block_in_place(RedisCluster::start);
    let prefix = unique_prefix();
    let clock = ManualClock::new();
    let url = cluster.url();
    let (a, b) = (
        replica(&url, &prefix, &clock),
        replica(&url, &prefix, &clock),
    );

    // Replica A runs a request; its lock is on the slot's master, and has
    // reached that master's replica.
    let first = tokio::spawn(a.post("/gated").key("k").send());
    a.started.notified().await;
    let pattern = format!("{prefix}:*");
    let (master, standby) = block_in_place(|| {
        let key = cluster
            .master_ports()
            .into_iter()
            .map(|port| query(port, &["KEYS", &pattern]).unwrap_or_default())
            .find(|found| !found.is_empty())
            .expect("the lock is on a master");
        let (master, standby) = cluster.master_and_replica_of(&key);
        wait_until_replicated(standby, &pattern);
        (master, standby)
    });

    // The master crashes. Until its replica takes over, a duplicate on
    // either replica of the app fails closed: nothing runs.
    block_in_place(|| cluster.kill(master));
    for replica in [&a, &b] {
        let duplicate = replica.post("/gated").key("k").send().await;
        assert!(
            matches!(
                duplicate.status,
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::CONFLICT
            ),
            "a duplicate while the slot has no master: {} {}",
            duplicate.status,
            duplicate.text()
        );
    }

    // The replica takes over; the request that was running finishes and
    // its response is recorded on the new master.
    block_in_place(|| cluster.promote(standby));
    a.gate.notify_one();
    let first = first.await.expect("the first request");
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    assert_eq!(first.text(), "gated 1");

    // Service resumed without restarting anything: the retry replays on
    // either replica, and new keys run.
    for replica in [&a, &b] {
        let retry = replica.post("/gated").key("k").send().await;
        assert!(retry.replayed(), "{} {}", retry.status, retry.text());
        assert_eq!(retry.text(), "gated 1");
    }
    for i in 0..20 {
        let key = format!("after-{i}");
        let answer = b.post("/orders").key(&key).send().await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
    }
    assert_eq!((a.runs(), b.runs()), (1, 20), "the gated handler ran once");
    block_in_place(move || drop(cluster));
}
