//! `/actuator/*` tells the truth: each store and the database UP or DOWN with
//! the reason, 503 when a required one is down (against real Redis and
//! PostgreSQL servers of the test's own, stopped under the app), liveness
//! and readiness, the Prometheus text format, and the `[actuator]` switches.

use crate::support::{database, redis_support as redis};

use std::io::{Read as _, Write as _};
use std::time::Duration;

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient};
use serde_json::Value;

#[post("/orders")]
async fn create() -> (StatusCode, &'static str) {
    (StatusCode::CREATED, "order 1")
}

/// `toml`, with every health report fresh: these tests stop and start
/// services between two probes, faster than the report's cache would
/// notice (its own test is a unit test on a paused clock).
fn config(toml: &str) -> AutumnConfig {
    let mut config = AutumnConfig::from_toml_str(toml).expect("config");
    config.actuator.health_cache_ms = 0;
    config
}

/// An app on the stores `toml` names (built from the configuration, not
/// given in code, so health checks the configured backends).
fn app_with(toml: &str) -> TestClient {
    TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
        .with_config(config(toml))
        .build()
}

async fn health(client: &TestClient, path: &str) -> (StatusCode, Value) {
    let response = client.get(path).send().await;
    (response.status(), response.json())
}

fn redis_toml(url: &str) -> String {
    format!(
        "[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{url}\"\nkey_prefix = \"{}\"\n[security.submit_token]\nenabled = false\n",
        redis::unique_prefix()
    )
}

#[tokio::test]
async fn health_reports_each_store_and_the_database_up() {
    let redis_url = redis::require_redis();
    let database = database::empty_postgres_schema();
    let client = app_with(&format!(
        "[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{redis_url}\"\nkey_prefix = \"{}\"\n\
         [security.submit_token]\nbackend = \"database\"\n[session]\nenabled = true\nbackend = \"memory\"\n\
         [database]\nurl = \"{database}\"\n",
        redis::unique_prefix()
    ));
    let (status, body) = health(&client, "/actuator/health").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "UP", "{body}");
    let components = &body["components"];
    for (name, backend) in [
        ("idempotency", "redis"),
        ("submit_token", "database"),
        ("session", "memory"),
        ("db", "database"),
    ] {
        assert_eq!(components[name]["status"], "UP", "{name}: {body}");
        assert_eq!(components[name]["details"]["backend"], backend, "{body}");
        assert_eq!(components[name]["required"], true, "{body}");
    }
}

#[tokio::test]
async fn a_stopped_redis_is_down_with_its_reason_and_health_answers_503_until_it_is_back() {
    let mut server = redis::RedisServer::new();
    let client = app_with(&redis_toml(&server.url()));
    let (status, body) = health(&client, "/actuator/health").await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &"UP".into()));

    server.stop();
    let (status, body) = health(&client, "/actuator/health").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["status"], "DOWN", "{body}");
    let idempotency = &body["components"]["idempotency"];
    assert_eq!(idempotency["status"], "DOWN", "{body}");
    assert_eq!(idempotency["details"]["reason"], "unreachable", "{body}");
    // The error names the server's address: it goes to the log, never to
    // a report that load balancers (and so, often, anyone) can read.
    assert!(idempotency["details"].get("error").is_none(), "{body}");
    assert!(!body.to_string().contains("127.0.0.1"), "{body}");

    let (status, body) = health(&client, "/actuator/health/readiness").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["status"], "DOWN", "{body}");
    // Readiness names the components like health does.
    let idempotency = &body["components"]["idempotency"];
    assert_eq!(idempotency["status"], "DOWN", "{body}");
    assert_eq!(idempotency["details"]["backend"], "redis", "{body}");
    assert!(idempotency["details"].get("error").is_none(), "{body}");
    assert!(!body.to_string().contains("127.0.0.1"), "{body}");
    // A store being down is no reason to restart the process.
    let (status, body) = health(&client, "/actuator/health/liveness").await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &"UP".into()));

    server.start();
    let (status, body) = health(&client, "/actuator/health").await;
    assert_eq!(status, StatusCode::OK, "back once Redis is: {body}");
}

#[tokio::test]
async fn an_optional_component_down_leaves_the_app_up_and_ready() {
    let mut server = redis::RedisServer::new();
    let toml = format!(
        "{}[actuator]\noptional = [\"idempotency\", \"session\"]\n",
        redis_toml(&server.url())
    );
    let client = app_with(&toml);
    server.stop();
    let (status, body) = health(&client, "/actuator/health").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "UP", "{body}");
    for name in ["idempotency", "session"] {
        assert_eq!(body["components"][name]["status"], "DOWN", "{body}");
        assert_eq!(body["components"][name]["required"], false, "{body}");
    }
    let (status, _) = health(&client, "/actuator/health/readiness").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_stopped_database_is_down_and_health_answers_503() {
    let server = database::PrivatePostgres::start();
    let client = app_with(&format!(
        "[idempotency]\nbackend = \"database\"\n[security.submit_token]\nenabled = false\n[database]\nurl = \"{}\"\n",
        server.url()
    ));
    let (status, body) = health(&client, "/actuator/health").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["components"]["db"]["status"], "UP", "{body}");

    server.stop();
    let (status, body) = health(&client, "/actuator/health").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    for name in ["db", "idempotency"] {
        let component = &body["components"][name];
        assert_eq!(component["status"], "DOWN", "{name}: {body}");
        assert_eq!(
            component["details"]["reason"], "unreachable",
            "{name} has a reason: {body}"
        );
        assert!(!body.to_string().contains("127.0.0.1"), "{body}");
    }
    let (status, _) = health(&client, "/actuator/health/readiness").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    server.resume();
    let (status, body) = health(&client, "/actuator/health").await;
    assert_eq!(status, StatusCode::OK, "back once PostgreSQL is: {body}");
}

#[tokio::test]
async fn prometheus_reports_the_idempotency_counters_in_the_text_format() {
    let client = TestApp::new()
        .routes(routes![create])
        .with_config(config("[actuator]\nmetrics_on_app_port = true\n"))
        .idempotent()
        .build();
    for _ in 0..2 {
        client
            .post("/orders")
            .header("idempotency-key", "prometheus-key")
            .send()
            .await
            .assert_status(StatusCode::CREATED);
    }
    let response = client.get("/actuator/prometheus").send().await;
    response.assert_ok();
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = response.text();
    for line in [
        "# TYPE autumn_idempotency_replays_total counter",
        "autumn_idempotency_replays_total{layer=\"idempotency\"} 1",
        "autumn_idempotency_first_runs_total{layer=\"idempotency\"} 1",
        "autumn_idempotency_conflicts_total{layer=\"idempotency\"} 0",
        "autumn_idempotency_first_runs_total{layer=\"submit_token\"} 0",
        "# TYPE autumn_idempotency_store_entries gauge",
        "autumn_idempotency_store_entries{layer=\"idempotency\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?}:\n{text}");
    }
    // Every sample line is `name{labels} value`, every family has HELP and
    // TYPE (a histogram's samples are its name with `_bucket`, `_sum` or
    // `_count`).
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
        assert!(value.parse::<f64>().is_ok(), "{line}");
        let name = series.split('{').next().unwrap_or_default();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .find(|base| text.contains(&format!("# TYPE {base} histogram\n")))
            .unwrap_or(name);
        assert!(text.contains(&format!("# HELP {family} ")), "{name}");
        assert!(text.contains(&format!("# TYPE {family} ")), "{name}");
    }
}

#[tokio::test]
async fn the_actuator_can_be_turned_off() {
    let client = app_with("[actuator]\nenabled = false\n");
    for path in [
        "/actuator/health",
        "/actuator/health/liveness",
        "/actuator/metrics",
        "/actuator/prometheus",
    ] {
        client
            .get(path)
            .send()
            .await
            .assert_status(StatusCode::NOT_FOUND);
    }
    let on = app_with("");
    on.get("/actuator/health").send().await.assert_ok();
}

#[test]
fn an_actuator_port_equal_to_the_app_port_is_refused() {
    let error = AutumnConfig::from_toml_str("[server]\nport = 8080\n[actuator]\nport = 8080\n")
        .expect_err("the same port twice");
    assert_eq!(error.key(), Some("actuator.port"), "{error}");
    let error = AutumnConfig::from_toml_str("[actuator]\noptional = [\"cache\"]\n")
        .expect_err("an unknown component");
    assert_eq!(error.key(), Some("actuator.optional"), "{error}");
}

/// `GET path` over a plain connection to `port`: the status and body.
fn get(port: u16, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn the_actuator_can_move_to_a_port_of_its_own() {
    let actuator_port = autumn_testkit::free_port();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    listener.set_nonblocking(true).expect("non-blocking");
    let app_port = listener.local_addr().expect("address").port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let toml = format!("[actuator]\nport = {actuator_port}\n");
    let served = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            autumn_web::app()
                .routes(routes![create])
                .with_config(config(&toml))
                .serve(listener, async move {
                    let _ = stopped.await;
                })
                .await
        })
    });
    // Both listeners are bound before `serve` accepts: wait for the actuator's.
    let mut answered = None;
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", actuator_port)).is_ok() {
            answered = Some(get(actuator_port, "/actuator/health"));
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let (status, body) = answered.expect("the actuator port answers");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"status\":\"UP\""), "{body}");
    assert_eq!(
        get(app_port, "/actuator/health").0,
        404,
        "not on the app's port"
    );
    assert_eq!(get(actuator_port, "/orders").0, 404, "not the app's routes");

    let _ = stop.send(());
    served
        .join()
        .expect("the server thread")
        .expect("the server stops cleanly");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", actuator_port)).is_err(),
        "the actuator stops with the app"
    );
}

/// A TCP proxy to `upstream` that can stop passing bytes on (a service that
/// hangs rather than refuses), on the current runtime.
struct Freezable {
    port: u16,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Freezable {
    async fn to(upstream: u16) -> Self {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("address").port();
        let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = frozen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let (mut client_in, mut client_out) = client.into_split();
                let (mut server_in, mut server_out) = server.into_split();
                let up = flag.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    while let Ok(n @ 1..) = client_in.read(&mut buffer).await {
                        // Frozen: swallow the command, answer nothing.
                        if !up.load(Ordering::SeqCst)
                            && server_out.write_all(&buffer[..n]).await.is_err()
                        {
                            return;
                        }
                    }
                });
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_in, &mut client_out).await;
                });
            }
        });
        Self { port, frozen }
    }

    fn freeze(&self) {
        self.frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

// Two workers: the proxy keeps serving while the app's startup check blocks one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_hangs_is_down_after_the_health_timeout() {
    let server = redis::RedisServer::new();
    let proxy = Freezable::to(server.port()).await;
    let toml = format!(
        "{}[actuator]\nhealth_timeout_ms = 300\n",
        redis_toml(&format!("redis://127.0.0.1:{}", proxy.port))
    );
    let client = app_with(&toml);
    let (status, body) = health(&client, "/actuator/health").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    proxy.freeze();
    let started = std::time::Instant::now();
    let (status, body) = health(&client, "/actuator/health").await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    for name in ["idempotency", "session"] {
        let component = &body["components"][name];
        assert_eq!(component["status"], "DOWN", "{body}");
        assert_eq!(component["details"]["reason"], "timeout", "{body}");
    }
    // Bounded by the timeout, not by the hung service.
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// An app on `cluster`, checked `UP` and ready while every node runs.
async fn up_on_cluster(cluster: &redis::cluster::RedisCluster) -> TestClient {
    let client = app_with(&format!(
        "{}[actuator]\nhealth_timeout_ms = 3000\n",
        redis_toml(&cluster.url())
    ));
    let (status, body) = health(&client, "/actuator/health").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["components"]["idempotency"]["status"], "UP", "{body}");
    assert_eq!(
        body["components"]["idempotency"]["details"]["backend"], "redis",
        "{body}"
    );
    let (status, _) = health(&client, "/actuator/health/readiness").await;
    assert_eq!(status, StatusCode::OK);
    client
}

/// A `redis+cluster://` store: `UP` on a running cluster; `DOWN` (503,
/// with a reason naming the cluster) within the health timeout once no node
/// answers, while the process stays live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_is_up_while_it_runs_and_down_when_unreachable() {
    let mut cluster = redis::cluster::RedisCluster::start();
    let client = up_on_cluster(&cluster).await;

    // No node answers at all.
    for port in redis::cluster::node_ports(&cluster.url()).expect("cluster URL") {
        cluster.kill(port);
    }
    let started = std::time::Instant::now();
    let (status, body) = health(&client, "/actuator/health").await;
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "answered within the health timeout, took {:?}",
        started.elapsed()
    );
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["status"], "DOWN", "{body}");
    let idempotency = &body["components"]["idempotency"];
    assert_eq!(idempotency["status"], "DOWN", "{body}");
    assert_eq!(idempotency["details"]["reason"], "unreachable", "{body}");
    let (status, _) = health(&client, "/actuator/health/readiness").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "not ready");
    let (status, _) = health(&client, "/actuator/health/liveness").await;
    assert_eq!(status, StatusCode::OK, "still live");
}

/// A Redis Cluster with one master down and no replica taking over: the
/// other nodes still answer `PING`, but the cluster reports
/// `cluster_state:fail` once it agrees the master is gone, and health says
/// so (503, a reason naming the cluster and the state) while the process
/// stays live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_with_a_dead_master_and_no_failover_is_down_with_the_cluster_state() {
    let mut cluster = redis::cluster::RedisCluster::start();
    let client = up_on_cluster(&cluster).await;

    // The replica must not take over: the master's slots stay unserved.
    let (master, replica) = cluster.master_and_replica_of("order-1");
    redis::cluster::query(
        replica,
        &["CONFIG", "SET", "cluster-replica-no-failover", "yes"],
    )
    .expect("CONFIG SET cluster-replica-no-failover");
    cluster.kill(master);

    // The cluster marks the master failed after its node timeout (2 s) and
    // gossip: poll health until it says so, within a bound.
    let started = std::time::Instant::now();
    let (status, body) = loop {
        let (status, body) = health(&client, "/actuator/health").await;
        let reason = body["components"]["idempotency"]["details"]["reason"]
            .as_str()
            .unwrap_or_default();
        if status == StatusCode::SERVICE_UNAVAILABLE && reason == "cluster_down" {
            break (status, body);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "health never reported the cluster's failed state: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["status"], "DOWN", "{body}");
    let idempotency = &body["components"]["idempotency"];
    assert_eq!(idempotency["status"], "DOWN", "{body}");
    assert_eq!(idempotency["details"]["backend"], "redis", "{body}");
    assert_eq!(idempotency["details"]["reason"], "cluster_down", "{body}");
    assert!(!body.to_string().contains("127.0.0.1"), "{body}");
    // Every other node still answers PING: the state, not reachability,
    // made it DOWN.
    assert!(
        redis::cluster::node_ports(&cluster.url())
            .expect("cluster URL")
            .into_iter()
            .filter(|&port| port != master)
            .all(|port| redis::cluster::query(port, &["PING"]).is_ok_and(|pong| pong == "PONG")),
        "the other nodes are up"
    );
    let (status, _) = health(&client, "/actuator/health/readiness").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "not ready");
    let (status, _) = health(&client, "/actuator/health/liveness").await;
    assert_eq!(status, StatusCode::OK, "still live");
    drop(cluster);
}

/// Set once the handler below holds the app pool's one connection.
static HOLDING: tokio::sync::Notify = tokio::sync::Notify::const_new();
/// Lets the handler below give its connection back.
static RELEASE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Holds a connection of the app's pool until released.
#[get("/hold")]
async fn hold(db: Db) -> &'static str {
    HOLDING.notify_one();
    RELEASE.notified().await;
    drop(db);
    "released"
}

/// The database check has a connection of its own: with the app's only
/// connection taken by a handler, health still answers `UP` (on the app's
/// pool it would wait, time out and report the database down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_the_database_without_taking_the_apps_connections() {
    let schema = database::fresh_postgres_schema();
    let mut config = config(&format!(
        "[actuator]\nhealth_timeout_ms = 500\n[database]\nurl = \"{}\"\npool_size = 1\n",
        schema.url()
    ));
    config.actuator.health_cache_ms = 0;
    let client = TestApp::from_builder(autumn_web::app().routes(routes![hold]))
        .with_config(config)
        .build();
    let held = tokio::spawn({
        let client = client.clone();
        async move { client.get("/hold").send().await.text() }
    });
    HOLDING.notified().await;
    for _ in 0..20 {
        let (status, body) = health(&client, "/actuator/health").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["components"]["db"]["status"], "UP", "{body}");
    }
    RELEASE.notify_one();
    assert_eq!(held.await.expect("the handler ran"), "released");
}

/// Without a port of its own, the actuator serves health on the app's port
/// (load balancers need it) and the counters only when asked for: they tell
/// anyone who reaches the port the app's traffic.
#[tokio::test]
async fn the_counters_are_not_on_the_apps_port_unless_asked_for() {
    let client = app_with("");
    for path in ["/actuator/metrics", "/actuator/prometheus"] {
        client
            .get(path)
            .send()
            .await
            .assert_status(StatusCode::NOT_FOUND);
    }
    let (status, _) = health(&client, "/actuator/health").await;
    assert_eq!(status, StatusCode::OK);
    let client = app_with("[actuator]\nmetrics_on_app_port = true\n");
    for path in ["/actuator/metrics", "/actuator/prometheus"] {
        client.get(path).send().await.assert_status(StatusCode::OK);
    }
}
