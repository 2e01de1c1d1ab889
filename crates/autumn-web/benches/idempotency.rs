//! What the idempotency layer costs a real HTTP client, what the in-memory
//! store holds per recorded response, what the submit-token layer costs a
//! `GET` that renders a form (minting included), and (with the `redis` /
//! `postgres` features) what the Redis and PostgreSQL stores cost:
//! throughput and store round trips per request.
//!
//! Run with `cargo bench -p autumn-web --bench idempotency --features
//! redis,postgres` (or `cargo xtask bench`); without the features only the
//! memory store is measured. Only the ratios printed by one run mean
//! anything: absolute numbers move with whatever else the machine is doing.
//!
//! Knobs (environment): `AUTUMN_BENCH_SECS` (measured seconds per scenario
//! run, default 1), `AUTUMN_BENCH_WARMUP_MS` (per run, default 300),
//! `AUTUMN_BENCH_ROUNDS` (default 15; 0 = memory only), `AUTUMN_BENCH_CONCURRENCY` (default 16),
//! `AUTUMN_BENCH_KEYS` (keys for the memory part, default 100000),
//! `AUTUMN_BENCH_ONLY` (comma-separated short names from the per-round lines,
//! e.g. `first`, to profile some scenarios alone; prints no ratios),
//! `AUTUMN_BENCH_COUNT` (requests per batch when counting store round trips,
//! default 200), `TEST_REDIS_URL` (default `redis://127.0.0.1:6379`),
//! `TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//! A store whose service does not answer is skipped, with a line saying so.
//!
//! Design: one multi-thread tokio runtime (one worker per core) runs both
//! servers and the client. On a 2-core machine separate runtimes would only
//! oversubscribe the cores; the client's share of the work is the same in every
//! scenario, so the ratios still compare the server paths (they understate the
//! layer's server-side cost by the client's share, which is what a real client
//! on the same box would see). The Redis and PostgreSQL servers run outside
//! this process: their CPU is not in req/cpu-s, so compare those stores on
//! req/s.
//!
//! Store round trips are counted, not timed, from what the server receives:
//! Redis through MONITOR (client commands only: `INFO commandstats` and
//! `total_commands_processed` also count the calls Lua scripts make), and
//! PostgreSQL through a loopback proxy that parses the frontend protocol
//! (every Execute is a statement, every Sync or simple Query a round trip),
//! which other sessions on the same database cannot disturb, unlike
//! `pg_stat_database` counters.

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
use autumn_web::security::{SubmitToken, SubmitTokenLayer};
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
/// A form page behind the submit-token layer, minting its token, against the
/// same page with no layer.
const MINT_TARGET: f64 = 0.97;

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
    /// Requests per batch when counting store round trips.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    count: usize,
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
            // Many short rounds rather than a few long ones: on a shared
            // machine one round's ratio moves by up to 10%, and the median
            // of fifteen moves far less than the median of five.
            measure: Duration::from_secs(var("AUTUMN_BENCH_SECS", 1)),
            warmup: Duration::from_millis(var("AUTUMN_BENCH_WARMUP_MS", 300)),
            rounds: usize::try_from(var("AUTUMN_BENCH_ROUNDS", 15)).expect("rounds fit usize"),
            concurrency: usize::try_from(var("AUTUMN_BENCH_CONCURRENCY", 16))
                .expect("concurrency fits usize"),
            keys: usize::try_from(var("AUTUMN_BENCH_KEYS", 100_000)).expect("keys fit usize"),
            count: usize::try_from(var("AUTUMN_BENCH_COUNT", 200).max(1))
                .expect("count fits usize"),
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

fn orders_uri(addr: SocketAddr) -> Uri {
    format!("http://{addr}/orders").parse().expect("uri")
}

/// A small form page around `token` (~200 bytes), the same size with or
/// without the layer.
fn form_page(token: &str) -> axum::response::Html<String> {
    axum::response::Html(format!(
        "<!doctype html><title>New comment</title><form method=\"POST\" action=\"/comments\">\
         <input type=\"hidden\" name=\"_submit_token\" value=\"{token}\">\
         <textarea name=\"body\"></textarea><button>Post</button></form>"
    ))
}

/// `GET /form` with no layer: the page around a fixed 32-character value.
fn bare_form_router() -> axum::Router {
    axum::Router::new().route(
        "/form",
        axum::routing::get(|| async { form_page("00000000000000000000000000000000") }),
    )
}

/// `GET /form` behind the submit-token layer: the handler takes a
/// `SubmitToken` and puts its token in the page, so a token is minted for
/// every request.
fn mint_form_router() -> axum::Router {
    let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)));
    axum::Router::new()
        .route(
            "/form",
            axum::routing::get(|token: SubmitToken| async move { form_page(token.token()) }),
        )
        .layer(SubmitTokenLayer::new(store))
}

fn form_uri(addr: SocketAddr) -> Uri {
    format!("http://{addr}/form").parse().expect("uri")
}

// ---------------------------------------------------------------------------
// HTTP throughput
// ---------------------------------------------------------------------------

/// Which store the layer in front of the route uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Memory,
    #[cfg(feature = "redis")]
    Redis,
    #[cfg(feature = "postgres")]
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            #[cfg(feature = "redis")]
            Self::Redis => "redis",
            #[cfg(feature = "postgres")]
            Self::Postgres => "postgres",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `POST /orders` with no layer, sent the same requests as `FirstTime`
    /// (a unique `Idempotency-Key` each, which the route ignores): the
    /// baseline the layer's ratios are taken against.
    Bare,
    FirstTime,
    /// `FirstTime` against a store whose records expire after a second, so
    /// it stops growing: what a first-time request costs once the store has
    /// reached its steady size, without the cost of growing it.
    FirstSteady,
    Replay,
    NoKey,
    /// `GET /form`, no layer.
    FormBare,
    /// `GET /form` behind the submit-token layer, minting a token.
    FormMint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scenario {
    kind: Kind,
    /// The layer's store (ignored for `Bare`).
    backend: Backend,
}

impl Scenario {
    const fn new(kind: Kind, backend: Backend) -> Self {
        Self { kind, backend }
    }

    /// The memory-store scenarios, always run, in this order.
    const BASE: [Self; 7] = [
        Self::new(Kind::Bare, Backend::Memory),
        Self::new(Kind::FirstTime, Backend::Memory),
        Self::new(Kind::FirstSteady, Backend::Memory),
        Self::new(Kind::Replay, Backend::Memory),
        Self::new(Kind::NoKey, Backend::Memory),
        Self::new(Kind::FormBare, Backend::Memory),
        Self::new(Kind::FormMint, Backend::Memory),
    ];

    fn label(self) -> String {
        let store = match self.backend {
            Backend::Memory => "layer",
            #[cfg(feature = "redis")]
            Backend::Redis => "redis layer",
            #[cfg(feature = "postgres")]
            Backend::Postgres => "postgres layer",
        };
        match self.kind {
            Kind::Bare => "bare (no layer, unique keys)".to_owned(),
            Kind::FirstTime => format!("{store}, first-time key"),
            Kind::Replay => format!("{store}, replayed key"),
            Kind::NoKey => format!("{store}, no key"),
            Kind::FirstSteady => "layer, first-time key, 1 s store".to_owned(),
            Kind::FormBare => "bare GET /form (no layer)".to_owned(),
            Kind::FormMint => "submit-token layer, mint GET".to_owned(),
        }
    }

    /// For the per-round lines.
    fn short(self) -> String {
        let kind = match self.kind {
            Kind::Bare => return "bare".to_owned(),
            Kind::FormBare => return "get-bare".to_owned(),
            Kind::FormMint => return "get-mint".to_owned(),
            Kind::FirstTime => "first",
            Kind::Replay => "replay",
            Kind::NoKey => "no-key",
            Kind::FirstSteady => "first-steady",
        };
        if self.backend == Backend::Memory {
            kind.to_owned()
        } else {
            format!("{}-{kind}", self.backend.name())
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

/// Sends one request with `key`, expecting it to run the handler (`false`)
/// or to be replayed (`true`).
/// Sends `GET /form`, reads the whole page, and checks it is a 200 whose
/// token was minted (`private, no-cache`) or not (no `Cache-Control`).
async fn send_get(client: &HttpClient, uri: &Uri, expect_minted: bool) {
    let request = Request::get(uri.clone())
        .body(Full::new(Bytes::new()))
        .expect("valid request");
    let response = client.request(request).await.expect("request completes");
    let status = response.status();
    let minted = response
        .headers()
        .get(http::header::CACHE_CONTROL)
        .is_some_and(|v| v == "private, no-cache");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body completes")
        .to_bytes();
    assert_eq!(status, StatusCode::OK, "unexpected status: {body:?}");
    assert_eq!(minted, expect_minted, "minted should be {expect_minted}");
}

#[cfg(any(feature = "redis", feature = "postgres"))]
async fn send_key(client: &HttpClient, uri: &Uri, key: &str, expect_replayed: bool) {
    let key = HeaderValue::try_from(key).expect("valid key");
    send(client, build_request(uri, Some(key)), expect_replayed).await;
}

struct Targets {
    bare: Uri,
    /// `GET /form` without and with the submit-token layer.
    form_bare: Uri,
    form_mint: Uri,
    /// The layer over a store that keeps records for one second.
    steady: Uri,
    /// One server per store, each with the layer over that store.
    layers: Vec<(Backend, Uri)>,
}

impl Targets {
    fn uri(&self, scenario: Scenario) -> Uri {
        match scenario.kind {
            Kind::Bare => return self.bare.clone(),
            Kind::FormBare => return self.form_bare.clone(),
            Kind::FormMint => return self.form_mint.clone(),
            Kind::FirstSteady => return self.steady.clone(),
            Kind::FirstTime | Kind::Replay | Kind::NoKey => {}
        }
        self.layers
            .iter()
            .find(|(backend, _)| *backend == scenario.backend)
            .map(|(_, uri)| uri.clone())
            .expect("a server for every scenario's store")
    }
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
    let uri = targets.uri(scenario);
    let kind = scenario.kind;
    let start = Instant::now() + config.warmup;
    let end = start + config.measure;
    let tasks: Vec<_> = (0..config.concurrency)
        .map(|task| {
            let client = client.clone();
            let uri = uri.clone();
            tokio::spawn(async move {
                let expect_replayed = kind == Kind::Replay;
                let mut counted = 0u64;
                let mut n = 0usize;
                while Instant::now() < end {
                    let key = match kind {
                        Kind::NoKey | Kind::FormBare | Kind::FormMint => None,
                        // The bare route gets the very requests the layer
                        // gets (it ignores the key), so the client's work
                        // and the bytes on the wire are the same in both.
                        Kind::Bare | Kind::FirstTime | Kind::FirstSteady => Some(
                            HeaderValue::try_from(format!("bench-{run}-{task}-{n}"))
                                .expect("valid key"),
                        ),
                        Kind::Replay => Some(HeaderValue::from_static(
                            REPLAY_KEYS[(task + n) % REPLAY_KEYS.len()],
                        )),
                    };
                    match kind {
                        Kind::FormBare | Kind::FormMint => {
                            send_get(&client, &uri, kind == Kind::FormMint).await;
                        }
                        _ => send(&client, build_request(&uri, key), expect_replayed).await,
                    }
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

/// How a ratio measured on both measures compares with its target.
fn verdict(target: f64, wall: f64, cpu: f64) -> String {
    if cpu >= target && wall >= target {
        format!(">= {target:.2}x  ok")
    } else if cpu >= target || wall >= target {
        format!(">= {target:.2}x  ok on one measure only")
    } else {
        format!(">= {target:.2}x  BELOW TARGET")
    }
}

/// The 25th and 75th percentiles (nearest rank).
fn middle_half(mut values: Vec<f64>) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values.get((values.len() * q / 4).min(values.len().saturating_sub(1)));
    (
        at(1).copied().unwrap_or(f64::NAN),
        at(3).copied().unwrap_or(f64::NAN),
    )
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
    // Only the store features add servers.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(unused_mut))]
    let mut targets = Targets {
        bare: orders_uri(bare),
        form_bare: form_uri(serve(bare_form_router()).await),
        form_mint: form_uri(serve(mint_form_router()).await),
        steady: orders_uri(
            serve(router().layer(IdempotencyLayer::new(Arc::new(
                MemoryIdempotencyStore::new(Duration::from_secs(1)),
            ))))
            .await,
        ),
        layers: vec![(Backend::Memory, orders_uri(layered))],
    };
    let mut scenarios = Scenario::BASE.to_vec();

    // The external stores, each skipped (with a line saying so) when its
    // service does not answer. Dropping them deletes what they stored.
    #[cfg(feature = "redis")]
    let redis = redis_store::RedisBench::setup().await;
    #[cfg(feature = "redis")]
    if let Some(redis) = &redis {
        let addr = serve(router().layer(redis.layer())).await;
        targets.layers.push((Backend::Redis, orders_uri(addr)));
    }
    #[cfg(feature = "postgres")]
    let postgres = pg_store::PgBench::setup(config.concurrency).await;
    #[cfg(feature = "postgres")]
    if let Some(postgres) = &postgres {
        let addr = serve(router().layer(postgres.layer())).await;
        targets.layers.push((Backend::Postgres, orders_uri(addr)));
    }
    for &(backend, _) in &targets.layers[1..] {
        scenarios.push(Scenario::new(Kind::FirstTime, backend));
        scenarios.push(Scenario::new(Kind::Replay, backend));
    }
    if let Ok(only) = std::env::var("AUTUMN_BENCH_ONLY") {
        scenarios.retain(|s| only.split(',').any(|name| name == s.short()));
    }

    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(config.concurrency)
        .build_http();

    // Record the keys the replay scenarios hammer, on every store: the first
    // request with each runs the handler, so it must not be marked as a replay.
    for (_, uri) in &targets.layers {
        for key in REPLAY_KEYS {
            let request = build_request(uri, Some(HeaderValue::from_static(key)));
            send(&client, request, false).await;
        }
    }

    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "\n== HTTP/1.1 keep-alive, {} connections, {} rounds x {} scenarios, {:.1}s measured \
         (+{:.1}s warm-up) each; server and client share one {workers}-worker runtime",
        config.concurrency,
        config.rounds,
        scenarios.len(),
        config.measure.as_secs_f64(),
        config.warmup.as_secs_f64(),
    );
    // samples[scenario][round]
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); scenarios.len()];
    let mut run = 0;
    // Two phases: the form GETs first, on a heap the stores have not grown
    // yet, then the POSTs. Interleaved, the GETs would run inside a heap
    // holding a million recorded responses, and measure that more than the
    // minting.
    let is_form = |scenario: &Scenario| matches!(scenario.kind, Kind::FormBare | Kind::FormMint);
    for forms in [true, false] {
        let phase: Vec<usize> = (0..scenarios.len())
            .filter(|&index| is_form(&scenarios[index]) == forms)
            .collect();
        if phase.is_empty() {
            continue;
        }
        for round in 1..=config.rounds {
            let mut line = format!("round {round}:");
            for (position, &index) in phase.iter().enumerate() {
                let scenario = scenarios[index];
                let sample = run_scenario(&client, &targets, scenario, run, config).await;
                run += 1;
                samples[index].push(sample);
                if position > 0 && position % 4 == 0 {
                    line.push_str("\n        ");
                }
                line.push_str(&format!(
                    "  {} {:.0}/s ({:.0}/cpu-s)",
                    scenario.short(),
                    sample.per_sec,
                    sample.per_cpu_sec
                ));
            }
            println!("{line}");
        }
    }

    println!(
        "\n{:<32} {:>10} {:>12}",
        "median of rounds", "req/s", "req/cpu-s"
    );
    for (index, scenario) in scenarios.iter().enumerate() {
        println!(
            "{:<32} {:>10.0} {:>12.0}",
            scenario.label(),
            median(samples[index].iter().map(|s| s.per_sec)),
            median(samples[index].iter().map(|s| s.per_cpu_sec)),
        );
    }
    if scenarios.len() < Scenario::BASE.len() {
        // A profiling run of some scenarios only: no ratios to compare.
        return;
    }
    // Each ratio is taken within a round (runs seconds apart), then the
    // median over rounds: drift between rounds cancels out.
    let index_of = |kind: Kind, backend: Backend| {
        scenarios
            .iter()
            .position(|s| s.kind == kind && (kind == Kind::Bare || s.backend == backend))
            .expect("scenario runs")
    };
    let per_round = |index: usize, to: usize, metric: fn(&Sample) -> f64| -> Vec<f64> {
        samples[index]
            .iter()
            .zip(&samples[to])
            .map(|(s, base)| metric(s) / metric(base))
            .collect()
    };
    let ratio =
        |index: usize, to: usize, metric: fn(&Sample) -> f64| median(per_round(index, to, metric));
    // How far the rounds spread: the middle half of the per-round ratios.
    let spread = |index: usize, to: usize| {
        let (low, high) = middle_half(per_round(index, to, |s| s.per_cpu_sec));
        format!("{low:.2}-{high:.2}")
    };
    let bare_index = index_of(Kind::Bare, Backend::Memory);
    println!(
        "\n{:<24} {:>10} {:>12} {:>11}   target",
        "ratio to bare", "req/s", "req/cpu-s", "cpu spread"
    );
    for (kind, name, target) in [
        (
            Kind::FirstTime,
            "first-time / bare",
            Some(FIRST_TIME_TARGET),
        ),
        (Kind::Replay, "replay / bare", Some(REPLAY_TARGET)),
        (Kind::FirstSteady, "first-time, 1 s store", None),
        (Kind::NoKey, "no-key / bare", None),
    ] {
        let index = index_of(kind, Backend::Memory);
        let wall = ratio(index, bare_index, |s| s.per_sec);
        let cpu = ratio(index, bare_index, |s| s.per_cpu_sec);
        let verdict = match (target, kind) {
            (Some(target), _) => verdict(target, wall, cpu),
            (None, Kind::FirstSteady) => "(store not growing)".to_owned(),
            (None, _) => "(pass-through)".to_owned(),
        };
        let spread = spread(index, bare_index);
        println!("{name:<24} {wall:>9.3}x {cpu:>11.3}x {spread:>11}   {verdict}");
    }
    let form_bare = index_of(Kind::FormBare, Backend::Memory);
    let form_mint = index_of(Kind::FormMint, Backend::Memory);
    let wall = ratio(form_mint, form_bare, |s| s.per_sec);
    let cpu = ratio(form_mint, form_bare, |s| s.per_cpu_sec);
    println!(
        "{:<24} {wall:>9.3}x {cpu:>11.3}x {:>11}   {}",
        "mint GET / bare GET",
        spread(form_mint, form_bare),
        verdict(MINT_TARGET, wall, cpu)
    );
    println!(
        "(ratios: median over rounds of the ratio within each round; spread: \
         the middle half of the rounds' req/cpu-s ratios)"
    );
    if targets.layers.len() > 1 {
        println!(
            "\n{:<24} {:>10} {:>12} {:>10} {:>12}",
            "store ratios", "/memory", "/memory cpu", "/bare", "/bare cpu"
        );
        for &(backend, _) in &targets.layers[1..] {
            for (kind, what) in [(Kind::FirstTime, "first-time"), (Kind::Replay, "replay")] {
                let index = index_of(kind, backend);
                let memory = index_of(kind, Backend::Memory);
                println!(
                    "{:<24} {:>9.3}x {:>11.3}x {:>9.3}x {:>11.3}x",
                    format!("{} {what}", backend.name()),
                    ratio(index, memory, |s| s.per_sec),
                    ratio(index, memory, |s| s.per_cpu_sec),
                    ratio(index, bare_index, |s| s.per_sec),
                    ratio(index, bare_index, |s| s.per_cpu_sec),
                );
            }
        }
        println!(
            "(/memory: against the memory-store layer on the same kind of request; same \
             rounds, median of per-round ratios. cpu counts this process only, not \
             redis-server's or postgres's work: read req/s for these stores)"
        );
    }
    println!("memory store entries after the run: {}", store.len());

    #[cfg(any(feature = "redis", feature = "postgres"))]
    {
        println!(
            "\n== store round trips per request, counted from what the server receives \
             ({} sequential requests per batch, one store connection)",
            config.count
        );
        let mut summary = Vec::new();
        #[cfg(feature = "redis")]
        if let Some(redis) = &redis
            && let Some((first, replay)) = redis.count(&client, config.count).await
        {
            summary.push(format!(
                "redis: {first:.2} commands per first-time request, {replay:.2} per replay"
            ));
        }
        #[cfg(feature = "postgres")]
        if let Some(postgres) = &postgres
            && let Some((first, replay)) = postgres.count(&client, config.count).await
        {
            summary.push(format!(
                "postgres: {first:.2} statements per first-time request, {replay:.2} per replay"
            ));
        }
        if summary.is_empty() {
            println!("(no store counted)");
        } else {
            println!("{}", summary.join("; "));
        }
        println!();
    }
    // Deletes the Redis keys and drops the PostgreSQL schema, printing so.
    #[cfg(feature = "redis")]
    drop(redis);
    #[cfg(feature = "postgres")]
    drop(postgres);
}

/// `scheme://user:***@host...`: `url` with any password masked, for printing.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split_once(':').map_or("", |(user, _)| user);
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        _ => url.to_owned(),
    }
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
    let store = MemoryIdempotencyStore::new(ttl).with_clock(Arc::new(clock.clone()));
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

// ---------------------------------------------------------------------------
// Redis store
// ---------------------------------------------------------------------------

#[cfg(feature = "redis")]
mod redis_store {
    use std::collections::{BTreeMap, BTreeSet};
    use std::io::{self, BufRead as _, BufReader, Read as _, Write as _};
    use std::net::{Shutdown, TcpStream, ToSocketAddrs as _};
    use std::sync::Arc;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use autumn_web::idempotency::{IdempotencyLayer, RedisIdempotencyStore};

    use super::{HttpClient, orders_uri, redact, router, send_key, serve};

    /// The Redis part: a store under a prefix of this run's own, whose keys
    /// are deleted (SCAN + DEL on the prefix) when it is dropped.
    pub(super) struct RedisBench {
        url: String,
        prefix: String,
        target: Target,
        store: Arc<RedisIdempotencyStore>,
    }

    impl RedisBench {
        /// Connects to `TEST_REDIS_URL` (or the local default); `None`, with
        /// a line saying why, when Redis does not answer.
        pub(super) async fn setup() -> Option<Self> {
            let url = std::env::var("TEST_REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
            let skip = |why: &dyn std::fmt::Display| {
                println!("\nredis: {why}; skipping the Redis store");
            };
            // The bench's own plain connections (MONITOR, SCAN + DEL) need a
            // plain TCP `redis://` URL.
            let target = match Target::parse(&url) {
                Ok(target) => target,
                Err(error) => {
                    skip(&format!("cannot use {} ({error})", redact(&url)));
                    return None;
                }
            };
            let prefix = format!("autumn-bench:{}", uuid::Uuid::new_v4().simple());
            let store = match RedisIdempotencyStore::new(&url, &prefix) {
                Ok(store) => store,
                Err(error) => {
                    skip(&error);
                    return None;
                }
            };
            if let Err(error) = store.ping().await {
                skip(&format!("not reachable ({error})"));
                return None;
            }
            println!(
                "\nredis: store at {} under key prefix {prefix}:",
                redact(&url)
            );
            Some(Self {
                url,
                prefix,
                target,
                store: Arc::new(store),
            })
        }

        pub(super) fn layer(&self) -> IdempotencyLayer {
            IdempotencyLayer::new(self.store.clone())
        }

        /// Client commands per first-time request and per replay, seen by
        /// the server through MONITOR, on a store (and so a connection) of
        /// its own. Prints the breakdown; `None` when MONITOR is unavailable.
        pub(super) async fn count(&self, client: &HttpClient, n: usize) -> Option<(f64, f64)> {
            let prefix = format!("{}:count", self.prefix);
            let store = match RedisIdempotencyStore::new(&self.url, &prefix) {
                Ok(store) => Arc::new(store),
                Err(error) => {
                    println!("redis: not counted ({error})");
                    return None;
                }
            };
            let uri = orders_uri(serve(router().layer(IdempotencyLayer::new(store))).await);
            // Connects (loading the scripts) and records the replayed key.
            send_key(client, &uri, "count-replay", false).await;
            let mut monitor = match block(|| Monitor::start(&self.target)) {
                Ok(monitor) => monitor,
                Err(error) => {
                    println!("redis: not counted (MONITOR: {error})");
                    return None;
                }
            };
            for i in 0..n {
                send_key(client, &uri, &format!("count-first-{i}"), false).await;
            }
            let first = block(|| monitor.mark());
            for _ in 0..n {
                send_key(client, &uri, "count-replay", true).await;
            }
            let replay = block(|| monitor.mark());
            let (first, replay) = match (first, replay) {
                (Ok(first), Ok(replay)) => (first, replay),
                (Err(error), _) | (_, Err(error)) => {
                    println!("redis: not counted (MONITOR: {error})");
                    return None;
                }
            };
            let needle = format!("{prefix}:");
            let first = Tally::of(&first, &needle);
            let replay = Tally::of(&replay, &needle);
            let per = |count: u64| count as f64 / n as f64;
            let commands = |tally: &Tally| {
                tally
                    .commands
                    .iter()
                    .map(|(name, count)| format!("{name} {:.2}", per(*count)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            println!(
                "redis (MONITOR, client commands of the store's connection): first-time \
                 {:.2} [{}], replay {:.2} [{}]; left out: the calls its scripts make, {:.2} \
                 and {:.2} per request (INFO commandstats and total_commands_processed \
                 count those too)",
                per(first.total()),
                commands(&first),
                per(replay.total()),
                commands(&replay),
                per(first.script_internal),
                per(replay.script_internal),
            );
            Some((per(first.total()), per(replay.total())))
        }
    }

    impl Drop for RedisBench {
        fn drop(&mut self) {
            match delete_prefix(&self.target, &self.prefix) {
                Ok(deleted) => println!(
                    "redis: deleted {deleted} keys matching {}:* (SCAN + DEL)",
                    self.prefix
                ),
                Err(error) => println!(
                    "redis: could not delete the keys matching {}:* ({error}); delete them by hand",
                    self.prefix
                ),
            }
        }
    }

    /// Runs blocking socket work without stalling the runtime's other tasks.
    fn block<T>(work: impl FnOnce() -> T) -> T {
        tokio::task::block_in_place(work)
    }

    /// What a batch's MONITOR lines hold.
    struct Tally {
        /// Commands the store's connection sent, by name.
        commands: BTreeMap<String, u64>,
        /// Calls made by its scripts on its keys.
        script_internal: u64,
    }

    impl Tally {
        /// Counts the lines from the connections that touched `needle` (the
        /// store's key prefix): other clients of a shared Redis are left out.
        fn of(lines: &[String], needle: &str) -> Self {
            // `1700000000.123456 [0 127.0.0.1:54321] "EVALSHA" ...`, with
            // `[0 lua]` for calls made by a script.
            let source = |line: &str| {
                line.split_once('[')
                    .and_then(|(_, rest)| rest.split_once(']'))
                    .and_then(|(source, _)| source.split_whitespace().nth(1))
                    .map(str::to_owned)
            };
            let name = |line: &str| {
                line.split_once("] \"")
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .map_or_else(|| "?".to_owned(), |(name, _)| name.to_ascii_uppercase())
            };
            let ours: BTreeSet<String> = lines
                .iter()
                .filter(|line| line.contains(needle))
                .filter_map(|line| source(line))
                .filter(|source| source != "lua")
                .collect();
            let mut tally = Self {
                commands: BTreeMap::new(),
                script_internal: 0,
            };
            for line in lines {
                match source(line) {
                    Some(source) if source == "lua" => {
                        tally.script_internal += u64::from(line.contains(needle));
                    }
                    Some(source) if ours.contains(&source) => {
                        *tally.commands.entry(name(line)).or_default() += 1;
                    }
                    _ => {}
                }
            }
            tally
        }

        fn total(&self) -> u64 {
            self.commands.values().sum()
        }
    }

    /// Deletes every key under `prefix:`; returns how many.
    fn delete_prefix(target: &Target, prefix: &str) -> io::Result<i64> {
        let mut conn = Conn::open(target)?;
        let pattern = format!("{prefix}:*");
        let mut cursor = b"0".to_vec();
        let mut deleted = 0;
        loop {
            let reply = conn.call(&[
                b"SCAN".as_slice(),
                &cursor,
                b"MATCH",
                pattern.as_bytes(),
                b"COUNT",
                b"1000",
            ])?;
            let Reply::Array(Some(mut parts)) = reply else {
                return Err(io::Error::other(format!("SCAN answered {reply:?}")));
            };
            let (Some(Reply::Array(Some(keys))), Some(Reply::Bulk(Some(next)))) =
                (parts.pop(), parts.pop())
            else {
                return Err(io::Error::other("SCAN answered an unexpected shape"));
            };
            let keys: Vec<Vec<u8>> = keys
                .into_iter()
                .filter_map(|key| match key {
                    Reply::Bulk(Some(key)) => Some(key),
                    _ => None,
                })
                .collect();
            if !keys.is_empty() {
                let mut del: Vec<&[u8]> = vec![b"DEL"];
                del.extend(keys.iter().map(Vec::as_slice));
                if let Reply::Int(n) = conn.call(&del)? {
                    deleted += n;
                }
            }
            if next == b"0" {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// Where a `redis://[user:password@]host[:port][/db]` URL points.
    #[derive(Debug, Clone)]
    struct Target {
        addr: String,
        user: Option<String>,
        password: Option<String>,
        db: Option<u32>,
    }

    impl Target {
        fn parse(url: &str) -> Result<Self, String> {
            let rest = url
                .strip_prefix("redis://")
                .ok_or("the bench's own connections speak plain TCP redis:// only")?;
            let rest = rest.split(['?', '#']).next().unwrap_or_default();
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            let (userinfo, host) = match authority.rsplit_once('@') {
                Some((userinfo, host)) => (Some(userinfo), host),
                None => (None, authority),
            };
            let (user, password) = match userinfo.map(|info| info.split_once(':')) {
                None | Some(None) => (None, None),
                Some(Some((user, password))) => (
                    Some(decode(user)).filter(|user| !user.is_empty()),
                    Some(decode(password)),
                ),
            };
            let host = if host.is_empty() { "127.0.0.1" } else { host };
            let has_port = host.rsplit_once(':').is_some_and(|(h, p)| {
                !p.is_empty()
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && (!h.starts_with('[') || h.ends_with(']'))
            });
            let addr = if has_port {
                host.to_owned()
            } else {
                format!("{host}:6379")
            };
            let db = match path {
                "" => None,
                db => Some(db.parse().map_err(|_| format!("bad database {db:?}"))?),
            };
            Ok(Self {
                addr,
                user,
                password,
                db,
            })
        }
    }

    /// Percent-decoding, for the user and password of a URL.
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok());
            match (bytes[i], hex) {
                (b'%', Some(byte)) => {
                    out.push(byte);
                    i += 3;
                }
                (byte, _) => {
                    out.push(byte);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A RESP reply.
    #[derive(Debug)]
    enum Reply {
        Simple(String),
        Error(String),
        Int(i64),
        Bulk(Option<Vec<u8>>),
        Array(Option<Vec<Reply>>),
    }

    /// A plain blocking RESP connection, for what the store does not do.
    struct Conn {
        reader: BufReader<TcpStream>,
        writer: TcpStream,
    }

    impl Conn {
        fn open(target: &Target) -> io::Result<Self> {
            let addr =
                target.addr.to_socket_addrs()?.next().ok_or_else(|| {
                    io::Error::other(format!("{} resolves to nothing", target.addr))
                })?;
            let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            stream.set_nodelay(true)?;
            let mut conn = Self {
                reader: BufReader::new(stream.try_clone()?),
                writer: stream,
            };
            if let Some(password) = &target.password {
                match &target.user {
                    Some(user) => conn.call(&["AUTH", user, password])?,
                    None => conn.call(&["AUTH", password])?,
                };
            }
            if let Some(db) = target.db {
                conn.call(&["SELECT", &db.to_string()])?;
            }
            Ok(conn)
        }

        /// Sends one command and reads its reply; an error reply is an `Err`.
        fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<Reply> {
            let mut out = format!("*{}\r\n", args.len()).into_bytes();
            for arg in args {
                let arg = arg.as_ref();
                out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
                out.extend_from_slice(arg);
                out.extend_from_slice(b"\r\n");
            }
            self.writer.write_all(&out)?;
            match self.read()? {
                Reply::Error(error) => Err(io::Error::other(error)),
                reply => Ok(reply),
            }
        }

        fn read(&mut self) -> io::Result<Reply> {
            let mut line = Vec::new();
            if self.reader.read_until(b'\n', &mut line)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\r', '\n']);
            let (kind, rest) = text.split_at_checked(1).unwrap_or(("", ""));
            let number = || {
                rest.parse::<i64>()
                    .map_err(|_| io::Error::other(format!("bad RESP line {text:?}")))
            };
            Ok(match kind {
                "+" => Reply::Simple(rest.to_owned()),
                "-" => Reply::Error(rest.to_owned()),
                ":" => Reply::Int(number()?),
                "$" => match usize::try_from(number()?) {
                    Err(_) => Reply::Bulk(None),
                    Ok(len) => {
                        let mut bulk = vec![0; len + 2];
                        self.reader.read_exact(&mut bulk)?;
                        bulk.truncate(len);
                        Reply::Bulk(Some(bulk))
                    }
                },
                "*" => match usize::try_from(number()?) {
                    Err(_) => Reply::Array(None),
                    Ok(len) => Reply::Array(Some(
                        (0..len).map(|_| self.read()).collect::<io::Result<_>>()?,
                    )),
                },
                _ => return Err(io::Error::other(format!("bad RESP line {text:?}"))),
            })
        }
    }

    /// A connection in MONITOR mode, read on a thread of its own: every
    /// command the server runs, in order, one line each.
    struct Monitor {
        lines: mpsc::Receiver<String>,
        /// Sends the markers that delimit a batch.
        marker: Conn,
        /// The MONITOR socket, shut down on drop to end the reader thread.
        socket: TcpStream,
    }

    impl Monitor {
        fn start(target: &Target) -> io::Result<Self> {
            let mut conn = Conn::open(target)?;
            match conn.call(&["MONITOR"])? {
                Reply::Simple(ok) if ok == "OK" => {}
                other => return Err(io::Error::other(format!("MONITOR answered {other:?}"))),
            }
            conn.writer.set_read_timeout(None)?;
            let socket = conn.writer.try_clone()?;
            let (sender, lines) = mpsc::channel();
            std::thread::spawn(move || {
                while let Ok(Reply::Simple(line)) = conn.read() {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
            let mut monitor = Self {
                lines,
                marker: Conn::open(target)?,
                socket,
            };
            monitor.mark()?;
            Ok(monitor)
        }

        /// Every command the server ran since the last mark. Exact, not
        /// timed: it sends a marker and reads until the server reports it,
        /// so everything that ran before the marker is in.
        fn mark(&mut self) -> io::Result<Vec<String>> {
            let marker = format!("autumn-bench-mark-{}", uuid::Uuid::new_v4().simple());
            self.marker.call(&["ECHO", &marker])?;
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut seen = Vec::new();
            loop {
                let line = self
                    .lines
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    .map_err(|error| {
                        io::Error::other(format!("MONITOR did not report the marker ({error})"))
                    })?;
                if line.contains(&marker) {
                    return Ok(seen);
                }
                seen.push(line);
            }
        }
    }

    impl Drop for Monitor {
        fn drop(&mut self) {
            let _ = self.socket.shutdown(Shutdown::Both);
        }
    }
}

// ---------------------------------------------------------------------------
// PostgreSQL store
// ---------------------------------------------------------------------------

#[cfg(feature = "postgres")]
mod pg_store {
    use std::collections::{BTreeMap, HashMap};
    use std::io::{self, Read as _, Write as _};
    use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;

    use autumn_web::db::{DbPool, FRAMEWORK_MIGRATIONS};
    use autumn_web::idempotency::{DbIdempotencyStore, IdempotencyLayer};
    use autumn_web::reexports::diesel_async::{
        AsyncConnection as _, AsyncPgConnection, SimpleAsyncConnection as _,
    };

    use super::{HttpClient, orders_uri, redact, router, send_key, serve};

    const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

    /// The PostgreSQL part: a store in a schema of this run's own, dropped
    /// (with everything in it) when this is dropped.
    pub(super) struct PgBench {
        /// The URL whose connections use the schema.
        url: String,
        store: Arc<DbIdempotencyStore>,
        /// Dropped last: drops the schema.
        _schema: Schema,
    }

    impl PgBench {
        /// Creates the schema on `TEST_DATABASE_URL` (or the local default)
        /// and migrates it; `None`, with a line saying why, when PostgreSQL
        /// does not answer.
        pub(super) async fn setup(pool_size: usize) -> Option<Self> {
            let base = std::env::var("TEST_DATABASE_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
            let skip = |why: &dyn std::fmt::Display| {
                println!(
                    "\npostgres: {why} (at {}); skipping the PostgreSQL store",
                    redact(&base)
                );
            };
            let connect =
                tokio::time::timeout(CONNECT_TIMEOUT, AsyncPgConnection::establish(&base));
            let mut admin = match connect.await {
                Ok(Ok(conn)) => conn,
                Ok(Err(error)) => {
                    skip(&format!("not reachable ({error})"));
                    return None;
                }
                Err(_) => {
                    skip(&"no answer within 5 s");
                    return None;
                }
            };
            let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
            if let Err(error) = admin.batch_execute(&format!("CREATE SCHEMA {name}")).await {
                skip(&format!("cannot create schema {name} ({error})"));
                return None;
            }
            drop(admin);
            let schema = Schema {
                base: base.clone(),
                name,
            };
            let separator = if base.contains('?') { '&' } else { '?' };
            let url = format!(
                "{base}{separator}options=-c%20search_path%3D{}",
                schema.name
            );
            let pool = match DbPool::new(&url, pool_size, CONNECT_TIMEOUT) {
                Ok(pool) => pool,
                Err(error) => {
                    skip(&error);
                    return None;
                }
            };
            if let Err(error) = FRAMEWORK_MIGRATIONS.run(&pool).await {
                skip(&error);
                return None;
            }
            println!(
                "\npostgres: store at {} in schema {} (pool of {pool_size})",
                redact(&base),
                schema.name
            );
            Some(Self {
                url,
                store: Arc::new(DbIdempotencyStore::new(pool)),
                _schema: schema,
            })
        }

        pub(super) fn layer(&self) -> IdempotencyLayer {
            IdempotencyLayer::new(self.store.clone())
        }

        /// Statements per first-time request and per replay, as PostgreSQL
        /// receives them: a store of its own, with a pool of one connection
        /// that goes through a counting proxy. Prints the breakdown.
        pub(super) async fn count(&self, client: &HttpClient, n: usize) -> Option<(f64, f64)> {
            let proxy = match Proxy::start(&self.url) {
                Ok(proxy) => proxy,
                Err(error) => {
                    println!("postgres: not counted ({error})");
                    return None;
                }
            };
            let store = match DbPool::new(&proxy.url, 1, CONNECT_TIMEOUT) {
                Ok(pool) => Arc::new(DbIdempotencyStore::new(pool)),
                Err(error) => {
                    println!("postgres: not counted ({error})");
                    return None;
                }
            };
            let uri = orders_uri(serve(router().layer(IdempotencyLayer::new(store))).await);
            // Connects, and records the replayed key; a second request has
            // every per-connection cache warm.
            send_key(client, &uri, "count-replay", false).await;
            send_key(client, &uri, "count-warm", false).await;
            // A dropped statement's Close is sent without waiting for it: let
            // the last one through before each reading.
            let settle = || tokio::time::sleep(Duration::from_millis(200));
            settle().await;
            let start = proxy.snapshot();
            for i in 0..n {
                send_key(client, &uri, &format!("count-first-{i}"), false).await;
            }
            settle().await;
            let after_first = proxy.snapshot();
            for _ in 0..n {
                send_key(client, &uri, "count-replay", true).await;
            }
            settle().await;
            let after_replay = proxy.snapshot();
            let first = after_first.since(&start);
            let replay = after_replay.since(&after_first);
            let per = |count: u64| count as f64 / n as f64;
            for (what, wire) in [("first-time", &first), ("replay", &replay)] {
                let statements = wire
                    .statements
                    .iter()
                    .map(|(sql, count)| format!("{:.2} x `{sql}`", per(*count)))
                    .collect::<Vec<_>>()
                    .join(", ");
                println!(
                    "postgres (wire proxy) {what}: {:.2} statements [{statements}]; \
                     {:.2} round trips waited on ({:.2} of them only to prepare), \
                     {:.2} Close+Sync not waited on",
                    per(wire.total()),
                    per(wire.round_trips),
                    per(wire.prepares),
                    per(wire.closes),
                );
            }
            Some((per(first.total()), per(replay.total())))
        }
    }

    /// A schema of the run's own, dropped with everything in it on drop.
    struct Schema {
        base: String,
        name: String,
    }

    impl Drop for Schema {
        fn drop(&mut self) {
            let (base, name) = (self.base.clone(), self.name.clone());
            // Drop cannot await: a runtime of its own, on a thread of its own.
            let dropped = std::thread::spawn(move || -> Result<(), String> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|error| error.to_string())?;
                runtime.block_on(async {
                    let connect = AsyncPgConnection::establish(&base);
                    let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, connect)
                        .await
                        .map_err(|_| "no answer within 5 s".to_owned())?
                        .map_err(|error| error.to_string())?;
                    conn.batch_execute(&format!(
                        "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS {name} CASCADE"
                    ))
                    .await
                    .map_err(|error| error.to_string())
                })
            })
            .join()
            .unwrap_or_else(|_| Err("the cleanup thread panicked".to_owned()));
            match dropped {
                Ok(()) => println!("postgres: dropped schema {} (CASCADE)", self.name),
                Err(error) => println!(
                    "postgres: could not drop schema {} ({error}); drop it by hand",
                    self.name
                ),
            }
        }
    }

    /// What a connection sent, counted by message as PostgreSQL received it.
    #[derive(Debug, Clone, Default)]
    struct Wire {
        /// Executed statements by (shortened) SQL: each Execute, and each
        /// simple Query.
        statements: BTreeMap<String, u64>,
        /// Syncs (and simple Queries) the client waits for.
        round_trips: u64,
        /// Of those, the ones that only prepare (Parse/Describe, no Execute).
        prepares: u64,
        /// Close + Sync batches, sent when a prepared statement is dropped,
        /// without waiting for the answer.
        closes: u64,
    }

    impl Wire {
        fn total(&self) -> u64 {
            self.statements.values().sum()
        }

        fn since(&self, earlier: &Self) -> Self {
            let mut statements = self.statements.clone();
            for (sql, count) in &mut statements {
                *count -= earlier.statements.get(sql).copied().unwrap_or(0);
            }
            statements.retain(|_, count| *count > 0);
            Self {
                statements,
                round_trips: self.round_trips - earlier.round_trips,
                prepares: self.prepares - earlier.prepares,
                closes: self.closes - earlier.closes,
            }
        }
    }

    /// A loopback TCP proxy in front of PostgreSQL that parses what clients
    /// send (the frontend protocol, without TLS: the pool does not ask for
    /// it) and forwards every byte untouched.
    struct Proxy {
        /// The URL, pointed at the proxy.
        url: String,
        counts: Arc<Mutex<Wire>>,
    }

    impl Proxy {
        fn start(url: &str) -> io::Result<Self> {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let (upstream, url) = through(url, listener.local_addr()?).ok_or_else(|| {
                io::Error::other("the database URL names no TCP host to proxy to")
            })?;
            let counts = Arc::new(Mutex::new(Wire::default()));
            let shared = Arc::clone(&counts);
            std::thread::spawn(move || {
                for client in listener.incoming().flatten() {
                    let (upstream, counts) = (upstream.clone(), Arc::clone(&shared));
                    std::thread::spawn(move || relay(client, &upstream, &counts));
                }
            });
            Ok(Self { url, counts })
        }

        fn snapshot(&self) -> Wire {
            self.counts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }
    }

    /// `(host:port of the server, url with the proxy as its host)`.
    fn through(url: &str, proxy: SocketAddr) -> Option<(String, String)> {
        let (scheme, rest) = url.split_once("://")?;
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (format!("{userinfo}@"), host),
            None => (String::new(), authority),
        };
        if host.is_empty() || host.contains(',') {
            return None;
        }
        let has_port = host.rsplit_once(':').is_some_and(|(h, p)| {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && (!h.starts_with('[') || h.ends_with(']'))
        });
        let upstream = if has_port {
            host.to_owned()
        } else {
            format!("{host}:5432")
        };
        Some((upstream, format!("{scheme}://{userinfo}{proxy}{tail}")))
    }

    /// Forwards one client connection, counting what it sends before
    /// forwarding it (so a count is in before its answer can be).
    fn relay(client: TcpStream, upstream: &str, counts: &Mutex<Wire>) -> io::Result<()> {
        let server = TcpStream::connect(upstream)?;
        client.set_nodelay(true)?;
        server.set_nodelay(true)?;
        let (mut from_server, mut to_client) = (server.try_clone()?, client.try_clone()?);
        std::thread::spawn(move || {
            let _ = io::copy(&mut from_server, &mut to_client);
            let _ = to_client.shutdown(Shutdown::Both);
        });
        let (mut from_client, mut to_server) = (client, server);
        let mut frontend = Frontend::default();
        let mut buffer = vec![0; 64 * 1024];
        loop {
            let read = from_client.read(&mut buffer)?;
            if read == 0 {
                break;
            }
            frontend.feed(&buffer[..read], counts);
            to_server.write_all(&buffer[..read])?;
        }
        to_server.shutdown(Shutdown::Both)
    }

    /// The frontend protocol, one connection's worth.
    #[derive(Default)]
    struct Frontend {
        /// Bytes of a message not yet complete.
        pending: Vec<u8>,
        /// Past the startup packet (messages have a type byte from then on).
        started: bool,
        /// Prepared statements by name: their shortened SQL.
        prepared: HashMap<String, String>,
        /// The statement the last Bind bound.
        bound: String,
        /// Since the last Sync.
        batch: Batch,
    }

    #[derive(Default)]
    struct Batch {
        prepare: bool,
        close: bool,
        executes: Vec<String>,
    }

    impl Frontend {
        fn feed(&mut self, bytes: &[u8], counts: &Mutex<Wire>) {
            let mut pending = std::mem::take(&mut self.pending);
            pending.extend_from_slice(bytes);
            let mut at = 0;
            loop {
                let rest = &pending[at..];
                let length = |from: usize| {
                    rest.get(from..from + 4).map(|b| {
                        usize::try_from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                            .unwrap_or(usize::MAX)
                    })
                };
                if self.started {
                    // Type byte, then a length that counts itself.
                    let Some(len) = length(1).map(|len| len.saturating_add(1).max(5)) else {
                        break;
                    };
                    if rest.len() < len {
                        break;
                    }
                    self.message(rest[0], &rest[5..len], counts);
                    at += len;
                } else {
                    // Length (counting itself), then a code: SSLRequest and
                    // GSSENCRequest are followed by the real startup packet.
                    let (Some(len), Some(code)) = (length(0), length(4)) else {
                        break;
                    };
                    if rest.len() < len.max(8) {
                        break;
                    }
                    self.started = !matches!(code, 80_877_103 | 80_877_104);
                    at += len.max(8);
                }
            }
            pending.drain(..at);
            self.pending = pending;
        }

        fn message(&mut self, tag: u8, body: &[u8], counts: &Mutex<Wire>) {
            let mut strings = body
                .split(|&b| b == 0)
                .map(|s| String::from_utf8_lossy(s).into_owned());
            let mut next = || strings.next().unwrap_or_default();
            match tag {
                b'P' => {
                    let (name, sql) = (next(), next());
                    self.prepared.insert(name, shorten(&sql));
                    self.batch.prepare = true;
                }
                b'B' => {
                    let (_portal, name) = (next(), next());
                    self.bound = self
                        .prepared
                        .get(&name)
                        .cloned()
                        .unwrap_or_else(|| "?".to_owned());
                }
                b'D' => self.batch.prepare = true,
                b'E' => self.batch.executes.push(self.bound.clone()),
                b'C' => self.batch.close = true,
                b'S' => {
                    let batch = std::mem::take(&mut self.batch);
                    let mut wire = counts.lock().unwrap_or_else(PoisonError::into_inner);
                    if !batch.executes.is_empty() {
                        wire.round_trips += 1;
                        for sql in batch.executes {
                            *wire.statements.entry(sql).or_default() += 1;
                        }
                    } else if batch.prepare {
                        wire.round_trips += 1;
                        wire.prepares += 1;
                    } else if batch.close {
                        wire.closes += 1;
                    } else {
                        wire.round_trips += 1;
                    }
                }
                b'Q' => {
                    let sql = shorten(&next());
                    let mut wire = counts.lock().unwrap_or_else(PoisonError::into_inner);
                    wire.round_trips += 1;
                    *wire.statements.entry(sql).or_default() += 1;
                }
                _ => {}
            }
        }
    }

    /// SQL on one line, cut to a readable length.
    fn shorten(sql: &str) -> String {
        let line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        match line.char_indices().nth(44) {
            Some((cut, _)) => format!("{}...", &line[..cut]),
            None => line,
        }
    }
}
