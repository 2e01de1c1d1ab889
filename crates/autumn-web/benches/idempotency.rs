//! What the idempotency layer costs a real HTTP client, and what the in-memory
//! store holds per recorded response.
//!
//! Run with `cargo bench -p autumn-web --bench idempotency` (or
//! `cargo xtask bench`). Only the ratios printed by one run mean anything:
//! absolute numbers move with whatever else the machine is doing.
//!
//! Knobs (environment): `AUTUMN_BENCH_SECS` (measured seconds per scenario
//! run, default 2), `AUTUMN_BENCH_WARMUP_MS` (per run, default 300),
//! `AUTUMN_BENCH_ROUNDS` (default 5; 0 = memory only), `AUTUMN_BENCH_CONCURRENCY` (default 16),
//! `AUTUMN_BENCH_KEYS` (keys for the memory part, default 100000).
//!
//! Design: one multi-thread tokio runtime (one worker per core) runs both
//! servers and the client. On a 2-core machine separate runtimes would only
//! oversubscribe the cores; the client's share of the work is the same in every
//! scenario, so the ratios still compare the server paths (they understate the
//! layer's server-side cost by the client's share, which is what a real client
//! on the same box would see).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use autumn_web::idempotency::clock::ManualClock;
use autumn_web::idempotency::key::storage_key;
use autumn_web::idempotency::{
    IdempotencyFuture, IdempotencyLayer, IdempotencyRecord, IdempotencyStore,
    MemoryIdempotencyStore,
};
use axum::Json;
use axum::extract::State;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

const REQUEST_BODY: &[u8] = br#"{"sku":"ABC-123","quantity":2,"note":"bench"}"#;
const REPLAY_KEYS: [&str; 4] = ["replay-0", "replay-1", "replay-2", "replay-3"];
const FIRST_TIME_TARGET: f64 = 0.85;
const REPLAY_TARGET: f64 = 0.95;

fn main() {
    let config = Config::from_env();
    // Memory first, on the main thread before any runtime thread exists, so
    // the process heap is as quiet as it gets.
    memory_per_key(config.keys);
    expiry_keeps_memory_flat(config.keys);

    if config.rounds == 0 {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(http_bench(&config));
}

struct Config {
    measure: Duration,
    warmup: Duration,
    rounds: usize,
    concurrency: usize,
    keys: usize,
}

impl Config {
    fn from_env() -> Self {
        fn var(name: &str, default: u64) -> u64 {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        }
        Self {
            measure: Duration::from_secs(var("AUTUMN_BENCH_SECS", 2)),
            warmup: Duration::from_millis(var("AUTUMN_BENCH_WARMUP_MS", 300)),
            rounds: usize::try_from(var("AUTUMN_BENCH_ROUNDS", 5)).expect("rounds fit usize"),
            concurrency: usize::try_from(var("AUTUMN_BENCH_CONCURRENCY", 16))
                .expect("concurrency fits usize"),
            keys: usize::try_from(var("AUTUMN_BENCH_KEYS", 100_000)).expect("keys fit usize"),
        }
    }
}

// ---------------------------------------------------------------------------
// The app
// ---------------------------------------------------------------------------

/// A small create handler: reads a JSON order, answers 201 with ~70 bytes.
async fn create_order(
    State(next_id): State<Arc<AtomicU64>>,
    Json(order): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let id = next_id.fetch_add(1, Ordering::Relaxed);
    (
        StatusCode::CREATED,
        Json(json!({
            "id": format!("ord_{id:010}"),
            "status": "created",
            "sku": order.get("sku").cloned().unwrap_or(Value::Null),
        })),
    )
}

fn router() -> axum::Router {
    axum::Router::new()
        .route("/orders", axum::routing::post(create_order))
        .with_state(Arc::new(AtomicU64::new(1)))
}

async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("server runs");
    });
    addr
}

// ---------------------------------------------------------------------------
// HTTP throughput
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Bare,
    FirstTime,
    Replay,
    NoKey,
}

impl Scenario {
    const ALL: [Self; 4] = [Self::Bare, Self::FirstTime, Self::Replay, Self::NoKey];

    fn label(self) -> &'static str {
        match self {
            Self::Bare => "bare (no layer, no key)",
            Self::FirstTime => "layer, first-time key",
            Self::Replay => "layer, replayed key",
            Self::NoKey => "layer, no key",
        }
    }
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn build_request(uri: &Uri, key: Option<HeaderValue>) -> Request<Full<Bytes>> {
    let mut request = Request::post(uri.clone())
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .body(Full::new(Bytes::from_static(REQUEST_BODY)))
        .expect("valid request");
    if let Some(key) = key {
        request.headers_mut().insert("idempotency-key", key);
    }
    request
}

/// Sends `request`, reads the whole response, and checks it is a 201 that is
/// (or is not) marked as a replay.
async fn send(client: &HttpClient, request: Request<Full<Bytes>>, expect_replayed: bool) {
    let response = client.request(request).await.expect("request completes");
    let status = response.status();
    let replayed = response
        .headers()
        .get("x-idempotent-replayed")
        .is_some_and(|v| v == "true");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body completes")
        .to_bytes();
    assert_eq!(status, StatusCode::CREATED, "unexpected status: {body:?}");
    assert_eq!(
        replayed, expect_replayed,
        "x-idempotent-replayed should be {expect_replayed} (body {body:?})"
    );
}

struct Targets {
    bare: Uri,
    layer: Uri,
}

/// One scenario run: completed requests per wall-clock second, and per second
/// of CPU this process used (client and server together). The second is what
/// to read on a shared machine: another process stealing a core lowers the
/// first but barely moves the second.
#[derive(Debug, Clone, Copy)]
struct Sample {
    per_sec: f64,
    per_cpu_sec: f64,
}

/// CPU time this process (all threads) has used, from `/proc/self/stat`.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which ends at the last ')': state is
    // field 3, utime field 14, stime field 15, in clock ticks.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux target Rust supports.
    Some(Duration::from_millis(ticks * 10))
}

/// Runs one scenario with `concurrency` keep-alive connections: `warmup`,
/// then `measure` during which completed requests are counted.
async fn run_scenario(
    client: &HttpClient,
    targets: &Targets,
    scenario: Scenario,
    run: usize,
    config: &Config,
) -> Sample {
    let uri = match scenario {
        Scenario::Bare => targets.bare.clone(),
        _ => targets.layer.clone(),
    };
    let start = Instant::now() + config.warmup;
    let end = start + config.measure;
    let tasks: Vec<_> = (0..config.concurrency)
        .map(|task| {
            let client = client.clone();
            let uri = uri.clone();
            tokio::spawn(async move {
                let expect_replayed = scenario == Scenario::Replay;
                let mut counted = 0u64;
                let mut n = 0usize;
                while Instant::now() < end {
                    let key = match scenario {
                        Scenario::Bare | Scenario::NoKey => None,
                        Scenario::FirstTime => Some(
                            HeaderValue::try_from(format!("bench-{run}-{task}-{n}"))
                                .expect("valid key"),
                        ),
                        Scenario::Replay => Some(HeaderValue::from_static(
                            REPLAY_KEYS[(task + n) % REPLAY_KEYS.len()],
                        )),
                    };
                    send(&client, build_request(&uri, key), expect_replayed).await;
                    let done = Instant::now();
                    if done >= start && done < end {
                        counted += 1;
                    }
                    n += 1;
                }
                counted
            })
        })
        .collect();
    tokio::time::sleep_until(start.into()).await;
    let cpu_start = cpu_time();
    tokio::time::sleep_until(end.into()).await;
    let cpu_used = cpu_time()
        .zip(cpu_start)
        .map(|(end, start)| end.saturating_sub(start));
    let mut total = 0u64;
    for task in tasks {
        total += task.await.expect("client task completes");
    }
    let total = total as f64;
    Sample {
        per_sec: total / config.measure.as_secs_f64(),
        per_cpu_sec: cpu_used
            .filter(|cpu| !cpu.is_zero())
            .map_or(f64::NAN, |cpu| total / cpu.as_secs_f64()),
    }
}

fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut sorted: Vec<f64> = values.into_iter().collect();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

async fn http_bench(config: &Config) {
    let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
    let bare = serve(router()).await;
    let layered = serve(router().layer(IdempotencyLayer::new(store.clone()))).await;
    let targets = Targets {
        bare: format!("http://{bare}/orders").parse().expect("uri"),
        layer: format!("http://{layered}/orders").parse().expect("uri"),
    };
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(config.concurrency)
        .build_http();

    // Record the keys the replay scenario hammers: the first request with
    // each runs the handler, so it must not be marked as a replay.
    for key in REPLAY_KEYS {
        let request = build_request(&targets.layer, Some(HeaderValue::from_static(key)));
        send(&client, request, false).await;
    }

    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "\n== HTTP/1.1 keep-alive, {} connections, {} rounds x {} scenarios, {:.1}s measured \
         (+{:.1}s warm-up) each; server and client share one {workers}-worker runtime",
        config.concurrency,
        config.rounds,
        Scenario::ALL.len(),
        config.measure.as_secs_f64(),
        config.warmup.as_secs_f64(),
    );
    // samples[scenario][round]
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); Scenario::ALL.len()];
    let mut run = 0;
    for round in 1..=config.rounds {
        let mut line = format!("round {round}:");
        for (index, scenario) in Scenario::ALL.into_iter().enumerate() {
            let sample = run_scenario(&client, &targets, scenario, run, config).await;
            run += 1;
            samples[index].push(sample);
            line.push_str(&format!(
                "  {scenario:?} {:.0}/s ({:.0}/cpu-s)",
                sample.per_sec, sample.per_cpu_sec
            ));
        }
        println!("{line}");
    }

    println!(
        "\n{:<24} {:>10} {:>12}",
        "median of rounds", "req/s", "req/cpu-s"
    );
    for (index, scenario) in Scenario::ALL.into_iter().enumerate() {
        println!(
            "{:<24} {:>10.0} {:>12.0}",
            scenario.label(),
            median(samples[index].iter().map(|s| s.per_sec)),
            median(samples[index].iter().map(|s| s.per_cpu_sec)),
        );
    }
    // Each ratio is taken within a round (runs seconds apart), then the
    // median over rounds: drift between rounds cancels out.
    let ratio = |index: usize, metric: fn(&Sample) -> f64| {
        median(
            samples[index]
                .iter()
                .zip(&samples[0])
                .map(|(s, bare)| metric(s) / metric(bare)),
        )
    };
    println!(
        "\n{:<24} {:>10} {:>12}   target",
        "ratio to bare", "req/s", "req/cpu-s"
    );
    for (index, name, target) in [
        (1, "first-time / bare", Some(FIRST_TIME_TARGET)),
        (2, "replay / bare", Some(REPLAY_TARGET)),
        (3, "no-key / bare", None),
    ] {
        let wall = ratio(index, |s| s.per_sec);
        let cpu = ratio(index, |s| s.per_cpu_sec);
        let verdict = match target {
            Some(t) if cpu >= t && wall >= t => format!(">= {t:.2}x  ok"),
            Some(t) if cpu >= t || wall >= t => format!(">= {t:.2}x  ok on one measure only"),
            Some(t) => format!(">= {t:.2}x  BELOW TARGET"),
            None => "(pass-through)".to_owned(),
        };
        println!("{name:<24} {wall:>9.3}x {cpu:>11.3}x   {verdict}");
    }
    println!(
        "(ratios: median over rounds of the ratio within each round)\nstore entries after the run: {}",
        store.len()
    );
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

/// Drives a store future that the memory store completes without waiting.
fn ready<T>(mut future: IdempotencyFuture<'_, T>) -> T {
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(result) => result.expect("the memory store does not fail"),
        Poll::Pending => panic!("the memory store answered Pending"),
    }
}

/// Resident set size in bytes, from `/proc/self/status`.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Records one small response under `key` the way the layer does: lock,
/// record, unlock (the layer's `finish` both records and unlocks).
fn record_one(store: &MemoryIdempotencyStore, key: &str, i: usize) {
    let owner = format!("{i:032x}");
    assert!(
        ready(store.try_lock(key, &owner, Duration::from_secs(60))),
        "fresh key locks"
    );
    // A fresh allocation per record, as the layer's collected response body.
    let body = Bytes::from(
        format!(r#"{{"id":"ord_{i:010}","status":"created","sku":"ABC-123"}}"#).into_bytes(),
    );
    let record = IdempotencyRecord::new(
        StatusCode::CREATED,
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body,
    );
    let mut body_hash = vec![0u8; 32];
    body_hash[..8].copy_from_slice(&(i as u64).to_le_bytes());
    assert!(
        ready(store.set(key, &owner, record, body_hash, Duration::from_secs(86_400))),
        "record stored"
    );
    ready(store.unlock(key, &owner));
}

fn memory_per_key(n: usize) {
    println!("== memory held by MemoryIdempotencyStore, {n} small records");
    let Some(_) = rss_bytes() else {
        println!("(no /proc/self/status here; skipped)");
        return;
    };
    // Keys are made before the baseline so only the store's own copies count.
    // Shaped like the layer's storage keys: `idem:v1:` + 64 hex chars.
    let keys: Vec<String> = (0..n)
        .map(|i| storage_key("POST", "/orders", b"", &format!("mem-{i}")))
        .collect();
    let store = MemoryIdempotencyStore::new(Duration::from_secs(3600));
    let before = rss_bytes().expect("rss");
    for (i, key) in keys.iter().enumerate() {
        record_one(&store, key, i);
    }
    let after = rss_bytes().expect("rss");
    assert_eq!(store.len(), n);
    let per_key = after.saturating_sub(before) as f64 / n as f64;
    println!(
        "RSS {:.1} MiB -> {:.1} MiB: {per_key:.0} bytes per key (target ~400; \
         includes allocator overhead and hash-table slack)",
        before as f64 / 1_048_576.0,
        after as f64 / 1_048_576.0,
    );
    drop(keys);
}

fn expiry_keeps_memory_flat(n: usize) {
    let ttl = Duration::from_secs(60);
    let clock = ManualClock::new();
    let store = MemoryIdempotencyStore::with_clock(ttl, Arc::new(clock.clone()));
    let mib = || {
        rss_bytes().map_or_else(
            || "n/a".to_owned(),
            |b| format!("{:.1} MiB", b as f64 / 1_048_576.0),
        )
    };
    println!(
        "\n== expiry: TTL {}s, batches of {n} unique keys, clock advanced {}s between batches",
        ttl.as_secs(),
        ttl.as_secs() + 1
    );
    println!("before:  store.len() 0 (RSS {})", mib());
    for batch in 1..=6 {
        let before = store.len();
        // Keys made one at a time, so the batch itself holds no memory.
        for i in 0..n {
            let key = storage_key("POST", "/orders", b"", &format!("exp-{batch}-{i}"));
            record_one(&store, &key, i);
        }
        println!(
            "batch {batch}: store.len() {before} -> {} (RSS {})",
            store.len(),
            mib()
        );
        // Past the TTL, and past the per-shard sweep interval.
        clock.advance(ttl + Duration::from_secs(1));
    }
}
