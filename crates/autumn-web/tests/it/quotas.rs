//! `[idempotency.quota]` through the real launch path, over real sockets:
//! a caller over its quota gets 429 for new keys and tokens while its
//! replays and every other caller go on; the principal pays wherever it
//! calls from; replicas sharing Redis hold a caller to one quota, not one
//! each.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::principal::{Parts, PrincipalFuture, PrincipalResolver};
use autumn_web::test::TestClient;

use crate::support::redis_support;
use crate::support::served::Served;

/// Runs of `/orders`, by the `x-test` header each test sends.
static RUNS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

fn runs(test: &str) -> usize {
    RUNS.lock()
        .expect("the runs")
        .as_ref()
        .and_then(|runs| runs.get(test).copied())
        .unwrap_or_default()
}

#[post("/orders")]
async fn place_order(headers: HeaderMap) -> (StatusCode, &'static str) {
    let test = headers
        .get("x-test")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    *RUNS
        .lock()
        .expect("the runs")
        .get_or_insert_with(HashMap::new)
        .entry(test)
        .or_default() += 1;
    (StatusCode::CREATED, "placed")
}

#[post("/notes")]
async fn save_note() -> &'static str {
    "saved"
}

/// Trusts an `x-agent` header: the principal a request acts for.
struct Agents;

impl PrincipalResolver for Agents {
    fn resolve<'a>(&'a self, parts: &'a Parts) -> PrincipalFuture<'a> {
        let agent = parts
            .headers
            .get("x-agent")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        Box::pin(async move { Ok(agent) })
    }
}

fn config(toml: &str) -> AutumnConfig {
    AutumnConfig::from_toml_str(toml).expect("valid config")
}

async fn serve(mut config: AutumnConfig) -> Served {
    // The clients' kept-alive connections are drained on stop: not for the
    // default 10 s, which is `Served::stop`'s own limit.
    config.server.shutdown_grace_ms = 1_000;
    Served::start(
        autumn_web::app()
            .routes(routes![place_order, save_note])
            .scope_by(Agents)
            .idempotent()
            .with_config(config),
    )
    .await
}

fn from(served: &Served, last: u8) -> TestClient {
    TestClient::for_server(&served.base()).from_address(IpAddr::from([127, 0, 0, last]))
}

async fn order(client: &TestClient, test: &str, key: &str) -> autumn_web::test::TestResponse {
    client
        .post("/orders")
        .header("x-test", test)
        .header("idempotency-key", key)
        .send()
        .await
}

const THREE: &str =
    "[idempotency.quota]\nmax_records = 3\n[actuator]\nmetrics_on_app_port = true\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_its_quota_a_caller_gets_429_for_new_keys_while_others_and_its_replays_go_on() {
    let served = serve(config(THREE)).await;
    let test = "over_quota";
    let flooder = from(&served, 11);
    for key in ["k1", "k2", "k3"] {
        order(&flooder, test, key).await.assert_status(201);
    }
    let refused = order(&flooder, test, "k4").await;
    refused
        .assert_status(429)
        .assert_header("content-type", "application/problem+json");
    let problem: serde_json::Value = refused.json();
    assert_eq!(problem["code"], "idempotency_quota_exceeded", "{problem}");
    // Room comes back when the oldest record expires (24 h by default).
    let retry_after: u64 = refused
        .header("retry-after")
        .and_then(|value| value.parse().ok())
        .expect("a Retry-After in seconds");
    assert!((86_000..=86_400).contains(&retry_after), "{retry_after}");
    assert_eq!(runs(test), 3, "the refused key ran nothing");
    // Its own retries are replayed.
    order(&flooder, test, "k1")
        .await
        .assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    // A form from the same address counts in the same quota.
    let form = flooder
        .post("/notes")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "text/html")
        .body("_submit_token=t-1&text=hi")
        .send()
        .await;
    form.assert_status(429);
    assert!(
        form.header("content-type")
            .is_some_and(|value| value.starts_with("text/html")),
        "a browser gets a page: {:?}",
        form.header("content-type")
    );
    // Everyone else keeps being served.
    let neighbour = from(&served, 12);
    order(&neighbour, test, "k4").await.assert_status(201);
    assert_eq!(runs(test), 4);

    let metrics: serde_json::Value = neighbour.get("/actuator/metrics").send().await.json();
    assert_eq!(metrics["idempotency"]["quota_refusals"], 1, "{metrics}");
    assert_eq!(metrics["submit_token"]["quota_refusals"], 1, "{metrics}");
    let prometheus = neighbour.get("/actuator/prometheus").send().await.text();
    assert!(
        prometheus.contains("autumn_idempotency_quota_refusals_total{layer=\"idempotency\"} 1"),
        "{prometheus}"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_pays_for_its_records_from_every_address() {
    let served = serve(config(THREE)).await;
    let test = "principal_pays";
    for (n, key) in ["k1", "k2", "k3"].into_iter().enumerate() {
        let client = from(&served, 21 + n as u8);
        client
            .post("/orders")
            .header("x-test", test)
            .header("x-agent", "agent-7")
            .header("idempotency-key", key)
            .send()
            .await
            .assert_status(201);
    }
    let elsewhere = from(&served, 29);
    let refused = elsewhere
        .post("/orders")
        .header("x-test", test)
        .header("x-agent", "agent-7")
        .header("idempotency-key", "k4")
        .send()
        .await;
    refused.assert_status(429);
    // The address it came from has a quota of its own, untouched.
    order(&elsewhere, test, "k4").await.assert_status(201);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_quota_holds_no_one() {
    let served = serve(config(
        "[idempotency.quota]\nenabled = false\nmax_records = 0\n",
    ))
    .await;
    let client = from(&served, 31);
    for n in 0..5 {
        order(&client, "disabled", &format!("k{n}"))
            .await
            .assert_status(201);
    }
    served.stop().await;
}

#[test]
fn a_quota_of_nothing_is_refused_naming_the_key() {
    let error = AutumnConfig::from_toml_str("[idempotency.quota]\nmax_records = 0\n")
        .expect_err("no caller could make a request");
    assert!(
        error.to_string().contains("idempotency.quota.max_records"),
        "{error}"
    );
}

/// Replicas sharing one Redis.
mod on_redis {
    use super::*;

    fn redis_config(prefix: &str, max_records: u64) -> AutumnConfig {
        let url = redis_support::require_redis();
        config(&format!(
            "[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\n[idempotency.quota]\nmax_records = {max_records}\n"
        ))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_replicas_hold_a_caller_to_one_quota_not_one_each() {
        let prefix = redis_support::unique_prefix();
        let a = serve(redis_config(&prefix, 4)).await;
        let b = serve(redis_config(&prefix, 4)).await;
        let test = "two_replicas";
        let (on_a, on_b) = (from(&a, 41), from(&b, 41));
        let mut statuses = Vec::new();
        for n in 0..4 {
            statuses.push(order(&on_a, test, &format!("a{n}")).await.status().as_u16());
            statuses.push(order(&on_b, test, &format!("b{n}")).await.status().as_u16());
        }
        assert_eq!(statuses, [201, 201, 201, 201, 429, 429, 429, 429]);
        // A replay on the other replica still answers.
        order(&on_b, test, "a0")
            .await
            .assert_status(201)
            .assert_header("x-idempotent-replayed", "true");
        // Another address is untouched on both.
        order(&from(&b, 42), test, "c0").await.assert_status(201);
        // The ledger names no address.
        let keys = redis_support::keys_under(&redis_support::redis_url(), &prefix).await;
        let quota: Vec<_> = keys.iter().filter(|key| key.contains(":quota:")).collect();
        assert!(!quota.is_empty(), "{keys:?}");
        assert!(quota.iter().all(|key| !key.contains("127.0.0")), "{keys:?}");
        a.stop().await;
        b.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_new_keys_on_two_replicas_are_held_to_exactly_the_quota() {
        let prefix = redis_support::unique_prefix();
        let a = serve(redis_config(&prefix, 5)).await;
        let b = serve(redis_config(&prefix, 5)).await;
        let test = "concurrent_quota";
        let clients = [from(&a, 51), from(&b, 51)];
        let tasks: Vec<_> = (0..30)
            .map(|n| {
                let client = clients[n % 2].clone();
                tokio::spawn(async move {
                    order(&client, test, &format!("k{n}"))
                        .await
                        .status()
                        .as_u16()
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for task in tasks {
            statuses.push(task.await.expect("a request"));
        }
        assert_eq!(
            statuses.iter().filter(|s| **s == 201).count(),
            5,
            "{statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 429).count(),
            25,
            "{statuses:?}"
        );
        assert_eq!(runs(test), 5);
        a.stop().await;
        b.stop().await;
    }
}
