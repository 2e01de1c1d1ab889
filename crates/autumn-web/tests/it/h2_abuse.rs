//! HTTP/2 abuse over a real socket (h2c): rapid reset, a header block that
//! never ends, and floods of PINGs and SETTINGS from a client that never
//! reads. Each time the abusive connection is closed within a bound, and an
//! ordinary client on another connection is served within 1 s while the
//! abuse goes on.
//!
//! Each abuse is sent twice: frame by frame as the test's own bytes, and
//! through Python's `h2` library (`h2_client.py`), an HTTP/2
//! implementation no one here wrote, which also sends 100 concurrent
//! duplicate keyed streams on one connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[get("/")]
async fn root() -> &'static str {
    RUNS.fetch_add(1, Ordering::SeqCst);
    "root"
}

#[get("/hello")]
async fn hello() -> &'static str {
    "hello"
}

static PAYS: AtomicUsize = AtomicUsize::new(0);

/// Slow enough that duplicates arrive while the first run is in flight.
#[post("/pay")]
async fn pay(body: String) -> String {
    PAYS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    format!("paid {}", body.len())
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("a small frame");
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&length.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// `GET /` as an HPACK block: `:method GET`, `:scheme http`, `:path /`
/// from the static table, `:authority t` as a literal.
const GET_ROOT: &[u8] = &[0x82, 0x86, 0x84, 0x41, 0x01, b't'];

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
                .routes(routes![root, hello, pay])
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

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(15), &mut self.served)
            .await
            .expect("the server returns after shutdown")
            .expect("the server task does not panic")
            .expect("the server stops cleanly");
    }
}

const CONFIG: &str = "[server.http2]\nh2c = true\n\
    [server.timeouts]\nheader_read_timeout_ms = 1000\nkeep_alive_timeout_ms = 1000\n";

/// An h2c connection that has sent its preface and empty SETTINGS.
async fn open(address: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(PREFACE).await.expect("preface");
    stream
        .write_all(&frame(SETTINGS, 0, 0, &[]))
        .await
        .expect("settings");
    stream
}

/// An ordinary HTTP/1.1 request on a connection of its own: how long it
/// took to be answered.
async fn ordinary_request(address: SocketAddr) -> Duration {
    let started = Instant::now();
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream
        .write_all(b"GET /hello HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("an answer within 10 s")
        .expect("read");
    assert!(answer.ends_with("hello"), "{answer}");
    started.elapsed()
}

/// Reads what the server sends until it closes (or `limit` passes): the
/// frame types and a GOAWAY's error code, and whether it closed.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<(u8, Option<u32>)>, bool) {
    let deadline = tokio::time::Instant::now() + limit;
    let mut bytes = Vec::new();
    let mut buf = vec![0_u8; 64 * 1024];
    let closed = loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => break false,
            Ok(Ok(0) | Err(_)) => break true,
            Ok(Ok(n)) => bytes.extend_from_slice(&buf[..n]),
        }
    };
    let mut frames = Vec::new();
    let mut rest = &bytes[..];
    while rest.len() >= 9 {
        let length = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        let end = (9 + length).min(rest.len());
        let payload = &rest[9..end];
        let code = (rest[3] == GOAWAY && payload.len() >= 8)
            .then(|| u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]));
        frames.push((rest[3], code));
        rest = &rest[end..];
    }
    (frames, closed)
}

fn goaway_code(frames: &[(u8, Option<u32>)]) -> Option<u32> {
    frames
        .iter()
        .find(|(kind, _)| *kind == GOAWAY)
        .and_then(|(_, code)| *code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_gets_the_connection_closed_and_others_are_still_served() {
    let server = Server::start(CONFIG).await;
    let mut abuser = open(server.address).await;
    let runs_before = RUNS.load(Ordering::SeqCst);
    // 5,000 requests, each cancelled as soon as it is sent.
    let mut burst = Vec::new();
    for n in 0..5_000_u32 {
        let id = 2 * n + 1;
        burst.extend(frame(HEADERS, END_HEADERS | END_STREAM, id, GET_ROOT));
        burst.extend(frame(RST_STREAM, 0, id, &8_u32.to_be_bytes()));
    }
    let writer = tokio::spawn(async move {
        // The server may close before the whole burst is written.
        let _ = abuser.write_all(&burst).await;
        abuser
    });
    let took = ordinary_request(server.address).await;
    assert!(
        took < Duration::from_secs(1),
        "ordinary request took {took:?}"
    );
    let mut abuser = writer.await.expect("writer");
    let (frames, closed) = until_closed(&mut abuser, Duration::from_secs(5)).await;
    assert!(closed, "the abusive connection is closed");
    // ENHANCE_YOUR_CALM (0xb): too many streams reset.
    assert_eq!(goaway_code(&frames), Some(0xb), "{frames:?}");
    let ran = RUNS.load(Ordering::SeqCst) - runs_before;
    assert!(ran < 5_000, "every cancelled request ran: {ran}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_block_that_never_ends_is_cut_off() {
    let server = Server::start(CONFIG).await;
    let mut abuser = open(server.address).await;
    // HEADERS without END_HEADERS, then CONTINUATION frames of junk
    // headers, never ending: far past max_header_bytes (32 KiB).
    abuser
        .write_all(&frame(HEADERS, END_STREAM, 1, GET_ROOT))
        .await
        .expect("headers");
    // Each a literal header `x: <16 KiB of a>` without indexing.
    let mut block = vec![0x00, 0x01, b'x', 0x7f, 0x81, 0x7f];
    block.extend(std::iter::repeat_n(b'a', 16_384));
    let continuation = frame(CONTINUATION, 0, 1, &block);
    let writer = tokio::spawn(async move {
        for _ in 0..1_000 {
            if abuser.write_all(&continuation).await.is_err() {
                break;
            }
        }
        abuser
    });
    let took = ordinary_request(server.address).await;
    assert!(
        took < Duration::from_secs(1),
        "ordinary request took {took:?}"
    );
    let mut abuser = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer is stopped by the server within 10 s")
        .expect("writer");
    let (_, closed) = until_closed(&mut abuser, Duration::from_secs(5)).await;
    assert!(closed, "the connection is closed");
    server.stop().await;
}

/// Sends `make(n)` frames forever without reading, until the server stops
/// taking them; the connection must then be closed within the idle bound.
async fn flood_without_reading(kind: u8) {
    let server = Server::start(CONFIG).await;
    let mut abuser = open(server.address).await;
    let started = Instant::now();
    let flood = tokio::spawn(async move {
        let payload = [0_u8; 8];
        let one = match kind {
            PING => frame(PING, 0, 0, &payload),
            _ => frame(SETTINGS, 0, 0, &[]),
        };
        let batch: Vec<u8> = one
            .iter()
            .copied()
            .cycle()
            .take(one.len() * 1_000)
            .collect();
        loop {
            match tokio::time::timeout(Duration::from_secs(15), abuser.write_all(&batch)).await {
                Ok(Ok(())) => {}
                // Closed by the server: done.
                Ok(Err(_)) => return true,
                // The server stopped reading and never closed.
                Err(_) => return false,
            }
        }
    });
    let took = ordinary_request(server.address).await;
    assert!(
        took < Duration::from_secs(1),
        "ordinary request took {took:?}"
    );
    let closed = flood.await.expect("flood task");
    assert!(closed, "the flooding connection was left open");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "closed only after {:?}",
        started.elapsed()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_flood_from_a_client_that_never_reads_is_closed() {
    flood_without_reading(PING).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_flood_from_a_client_that_never_reads_is_closed() {
    flood_without_reading(SETTINGS).await;
}

// ------------------------------------------------ through Python's h2

/// Runs `h2_client.py` against `address` in `mode`, while an ordinary
/// request is timed on a connection of its own; returns what the client
/// saw and how long the ordinary request took.
async fn python_h2(address: SocketAddr, mode: &[&str]) -> (serde_json::Value, Duration) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/h2_client.py");
    let mut args = vec![address.ip().to_string(), address.port().to_string()];
    args.extend(mode.iter().map(|arg| (*arg).to_owned()));
    let client = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let dir = std::path::Path::new(script)
            .parent()
            .expect("the script's directory");
        autumn_testkit::api_tools::python(std::path::Path::new(script), dir, &args)
    });
    // Once the abuse has begun.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let took = ordinary_request(address).await;
    let seen = client.await.expect("the client ran");
    let seen = serde_json::from_str(&seen).unwrap_or_else(|e| panic!("{e}: {seen}"));
    (seen, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_h2_100_duplicate_streams_on_one_connection_run_the_handler_once() {
    let server = Server::start(CONFIG).await;
    let before = PAYS.load(Ordering::SeqCst);
    let (seen, _) = python_h2(server.address, &["duplicates", "h2-duplicates-1"]).await;
    let ran = PAYS.load(Ordering::SeqCst) - before;
    assert_eq!(seen["unanswered"], 0, "every stream is answered");
    // Each answer is the run's own, its replay, or "still in flight"
    // (no in-flight wait is configured): counted by kind.
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for answer in seen["answers"].as_array().expect("answers") {
        let body = answer["body"].as_str().unwrap_or_default();
        let kind = match (answer["status"].as_u64(), answer["replayed"].as_str()) {
            (Some(200), None) if body == "paid 14" => "run".to_owned(),
            (Some(200), Some("true")) if body == "paid 14" => "replayed".to_owned(),
            (Some(409), _) if body.contains("\"idempotency_key_in_flight\"") => {
                "in flight".to_owned()
            }
            (status, _) => format!("unexpected {status:?}: {body}"),
        };
        *kinds.entry(kind).or_default() += 1;
    }
    assert_eq!(ran, 1, "the handler ran once: {kinds:?}");
    assert_eq!(kinds.get("run"), Some(&1), "{kinds:?}");
    assert_eq!(kinds.values().sum::<usize>(), 100, "{kinds:?}");
    assert!(
        kinds
            .keys()
            .all(|kind| ["run", "replayed", "in flight"].contains(&kind.as_str())),
        "{kinds:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_h2_rapid_reset_is_stopped_with_enhance_your_calm() {
    let server = Server::start(CONFIG).await;
    let (seen, took) = python_h2(server.address, &["rapid-reset"]).await;
    assert!(
        took < Duration::from_secs(1),
        "ordinary request took {took:?}"
    );
    assert_eq!(seen["closed"], true, "{seen}");
    assert_eq!(seen["goaway"], 0xb, "ENHANCE_YOUR_CALM: {seen}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_h2_floods_and_an_endless_header_block_are_cut_off() {
    let server = Server::start(CONFIG).await;
    for mode in ["ping-flood", "settings-flood"] {
        let (seen, took) = python_h2(server.address, &[mode]).await;
        assert!(
            took < Duration::from_secs(1),
            "{mode}: ordinary request took {took:?}"
        );
        assert_eq!(seen["closed"], true, "{mode}: {seen}");
        assert!(
            seen["seconds"].as_f64().is_some_and(|s| s < 10.0),
            "{mode}: {seen}"
        );
    }
    let (seen, took) = python_h2(server.address, &["endless-headers"]).await;
    assert!(
        took < Duration::from_secs(1),
        "ordinary request took {took:?}"
    );
    assert_eq!(seen["closed"], true, "{seen}");
    assert!(
        seen["continuations"].as_u64().is_some_and(|n| n < 1_000),
        "the server stopped taking the block: {seen}"
    );
    server.stop().await;
}
