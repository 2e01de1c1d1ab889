//! Stopping in order, on real servers: readiness says 503 at once while the
//! listener keeps serving for `shutdown_delay_ms`; then requests in flight,
//! and runs whose client hung up, finish and are recorded, so their
//! retries after a restart replay; and one app's drain does not wait for
//! another app's runs in the same process.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use autumn_testkit::redis::{require_redis, unique_prefix};
use autumn_web::config::AutumnConfig;
use autumn_web::idempotency::detached_runs;
use autumn_web::prelude::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Runs started, by the `x-test` tag of the request.
static STARTED: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn started(tag: &str) -> usize {
    STARTED.lock().expect("lock").get(tag).copied().unwrap_or(0)
}

#[get("/hello")]
async fn hello() -> &'static str {
    "hello"
}

/// Counts its run, then takes `x-delay-ms` (default 300) to answer.
#[post("/orders")]
async fn create(headers: HeaderMap) -> (StatusCode, String) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let tag = header("x-test");
    *STARTED.lock().expect("lock").entry(tag).or_default() += 1;
    let delay = header("x-delay-ms").parse().unwrap_or(300);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    (
        StatusCode::CREATED,
        format!("order for {}", header("idempotency-key")),
    )
}

struct Server {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<Result<(), autumn_web::LaunchError>>,
}

impl Server {
    async fn start(toml: &str) -> Self {
        let config = AutumnConfig::from_toml_str(toml).expect("test configuration");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
        let address = listener.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(
            autumn_web::app()
                .routes(routes![hello, create])
                .idempotent()
                .with_config(config)
                .serve(listener, async move {
                    let _ = stopped.await;
                }),
        );
        Self {
            address,
            stop: Some(stop),
            served,
        }
    }

    fn signal(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Waits for the server to return after [`signal`](Self::signal).
    async fn stopped(mut self) {
        tokio::time::timeout(Duration::from_secs(20), &mut self.served)
            .await
            .expect("the server returns after shutdown")
            .expect("the server task does not panic")
            .expect("the server stops cleanly");
    }
}

/// Sends one request on a fresh connection.
async fn send(address: SocketAddr, head: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("write");
    stream
}

/// The whole answer on `stream` (the request said `connection: close`).
async fn answer(mut stream: TcpStream) -> String {
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(15), stream.read_to_string(&mut text))
        .await
        .expect("an answer within 15 s")
        .expect("read");
    text
}

fn post(key: &str, tag: &str, delay_ms: u64) -> String {
    format!(
        "POST /orders HTTP/1.1\r\nhost: t\r\nconnection: close\r\nidempotency-key: {key}\r\n\
         x-test: {tag}\r\nx-delay-ms: {delay_ms}\r\ncontent-type: application/json\r\n\
         content-length: 2\r\n\r\n{{}}"
    )
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_keyed_requests_in_flight_at_shutdown_finish_record_and_replay_after_a_restart() {
    let redis = require_redis();
    let prefix = unique_prefix();
    let toml = format!(
        "[server]\nshutdown_grace_ms = 10000\n[idempotency]\nbackend = \"redis\"\n\
         [idempotency.redis]\nurl = \"{redis}\"\nkey_prefix = \"{prefix}\"\n"
    );
    let tag = format!("drain-{prefix}");
    let mut first = Server::start(&toml).await;
    let mut waiting = Vec::new();
    let mut hung_up = Vec::new();
    for n in 0..50 {
        let stream = send(first.address, &post(&format!("k{n}"), &tag, 400)).await;
        // Every fifth client hangs up once its run started: that run goes
        // on detached, and the drain must wait for it too.
        if n % 5 == 0 {
            hung_up.push(stream);
        } else {
            waiting.push(tokio::spawn(answer(stream)));
        }
    }
    until("50 runs started", || started(&tag) == 50).await;
    drop(hung_up);
    first.signal();
    for answer in waiting {
        let text = answer.await.expect("client task");
        assert!(text.starts_with("HTTP/1.1 201"), "{text}");
    }
    first.stopped().await;

    // A new replica on the same store: every retry is a replay.
    let second = Server::start(&toml).await;
    for n in 0..50 {
        let key = format!("k{n}");
        let text = answer(send(second.address, &post(&key, &tag, 0)).await).await;
        assert!(text.starts_with("HTTP/1.1 201"), "{key}: {text}");
        assert!(
            text.contains("x-idempotent-replayed: true"),
            "{key} ran again or was lost: {text}"
        );
        assert!(text.ends_with(&format!("order for {key}")), "{text}");
    }
    assert_eq!(started(&tag), 50, "no second run");
    let mut second = second;
    second.signal();
    second.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_says_503_at_once_while_the_server_keeps_serving_for_the_delay() {
    let mut server = Server::start("[server]\nshutdown_delay_ms = 1500\n").await;
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
    let ready = answer(send(server.address, &get("/actuator/health/readiness")).await).await;
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    let signalled = Instant::now();
    server.signal();
    // Readiness turns at once...
    let deadline = Instant::now() + Duration::from_secs(5);
    let refused = loop {
        let text = answer(send(server.address, &get("/actuator/health/readiness")).await).await;
        if text.starts_with("HTTP/1.1 503") {
            break text;
        }
        assert!(Instant::now() < deadline, "readiness still says: {text}");
    };
    assert!(refused.contains("OUT_OF_SERVICE"), "{refused}");
    // ...while new connections are still served, until the delay is over.
    let hello = answer(send(server.address, &get("/hello")).await).await;
    assert!(hello.ends_with("hello"), "{hello}");
    assert!(signalled.elapsed() < Duration::from_millis(1500));
    server.stopped().await;
    assert!(signalled.elapsed() >= Duration::from_millis(1500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_apps_drain_does_not_wait_for_another_apps_detached_run() {
    let tag = format!("other-{}", unique_prefix());
    let mut busy = Server::start("[server]\nshutdown_grace_ms = 10000\n").await;
    let idle = Server::start("[server]\nshutdown_grace_ms = 10000\n").await;
    // A run on the busy app whose client hangs up: it goes on, detached.
    let stream = send(busy.address, &post("slow-1", &tag, 3000)).await;
    until("the slow run started", || started(&tag) == 1).await;
    drop(stream);
    until("the run detached", || detached_runs() >= 1).await;

    let mut idle = idle;
    let started_stop = Instant::now();
    idle.signal();
    idle.stopped().await;
    assert!(
        started_stop.elapsed() < Duration::from_secs(2),
        "the idle app waited for the busy app's run: {:?}",
        started_stop.elapsed()
    );
    busy.signal();
    busy.stopped().await;
}
