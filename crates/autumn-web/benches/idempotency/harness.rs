//! What every part of the bench shares: the knobs, the app under test, the
//! HTTP client's requests, the measures, and the targets the ratios are held
//! to.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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

// ---------------------------------------------------------------------------
// Targets: DESIGN.md, "Numbers we hold ourselves to"
// ---------------------------------------------------------------------------

/// A request the layer passes through (no `Idempotency-Key`: the layer is
/// off for it) against plain axum running the same handler.
pub(crate) const LAYER_OFF_TARGET: f64 = 0.95;
/// Memory store, a first-time key, against plain axum.
pub(crate) const FIRST_TIME_TARGET: f64 = 0.85;
/// Memory store, a replayed key, against plain axum: answering from a record
/// must not cost more than running the handler.
pub(crate) const REPLAY_TARGET: f64 = 1.0;
/// A form page behind the submit-token layer, minting its token, against the
/// same page with no layer: within 3%.
pub(crate) const MINT_TARGET: f64 = 0.97;
/// Bytes the memory store holds per stored small response, about.
pub(crate) const BYTES_PER_RECORD_TARGET: f64 = 300.0;
/// Redis client commands per first-time request, at most (exact, not timed).
#[cfg(feature = "redis")]
pub(crate) const REDIS_FIRST_TIME_COMMANDS: f64 = 2.0;
/// Redis client commands per replay, at most (exact, not timed).
#[cfg(feature = "redis")]
pub(crate) const REDIS_REPLAY_COMMANDS: f64 = 1.0;

// ---------------------------------------------------------------------------
// Knobs
// ---------------------------------------------------------------------------

pub(crate) struct Config {
    pub(crate) measure: Duration,
    pub(crate) warmup: Duration,
    pub(crate) rounds: usize,
    pub(crate) concurrency: usize,
    pub(crate) keys: usize,
    /// Requests per batch when counting store round trips.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) count: usize,
}

impl Config {
    pub(crate) fn from_env() -> Self {
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

/// Whether the scenario with this short name runs: every one does unless
/// `AUTUMN_BENCH_ONLY` lists some.
pub(crate) fn selected(short: &str) -> bool {
    std::env::var("AUTUMN_BENCH_ONLY")
        .map_or(true, |only| only.split(',').any(|name| name == short))
}

// ---------------------------------------------------------------------------
// The app
// ---------------------------------------------------------------------------

/// The keys the replay scenarios send, recorded before the rounds start.
pub(crate) const REPLAY_KEYS: [&str; 4] = ["replay-0", "replay-1", "replay-2", "replay-3"];

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

pub(crate) fn router() -> axum::Router {
    axum::Router::new()
        .route("/orders", axum::routing::post(create_order))
        .with_state(Arc::new(AtomicU64::new(1)))
}

pub(crate) async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("server runs");
    });
    addr
}

pub(crate) fn orders_uri(addr: SocketAddr) -> Uri {
    format!("http://{addr}/orders").parse().expect("uri")
}

// ---------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------

const REQUEST_BODY: &[u8] = br#"{"sku":"ABC-123","quantity":2,"note":"bench"}"#;

pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The client every part of the bench sends with: keep-alive, one idle
/// connection kept per concurrent task.
pub(crate) fn http_client(config: &Config) -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(config.concurrency)
        .build_http()
}

pub(crate) fn build_request(uri: &Uri, key: Option<HeaderValue>) -> Request<Full<Bytes>> {
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
pub(crate) async fn send(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
    expect_replayed: bool,
) {
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
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) async fn send_key(client: &HttpClient, uri: &Uri, key: &str, expect_replayed: bool) {
    let key = HeaderValue::try_from(key).expect("valid key");
    send(client, build_request(uri, Some(key)), expect_replayed).await;
}

// ---------------------------------------------------------------------------
// Measures
// ---------------------------------------------------------------------------

/// One scenario run: completed requests per wall-clock second, and per second
/// of CPU this process used (client and server together). The second is what
/// to read on a shared machine: another process stealing a core lowers the
/// first but barely moves the second.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) per_sec: f64,
    pub(crate) per_cpu_sec: f64,
}

/// CPU time this process (all threads) has used, from `/proc/self/stat`.
pub(crate) fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which ends at the last ')': state is
    // field 3, utime field 14, stime field 15, in clock ticks.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux target Rust supports.
    Some(Duration::from_millis(ticks * 10))
}

/// How a ratio measured on both measures compares with its target.
pub(crate) fn verdict(target: f64, wall: f64, cpu: f64) -> String {
    if cpu >= target && wall >= target {
        format!(">= {target:.2}x  ok")
    } else if cpu >= target || wall >= target {
        format!(">= {target:.2}x  ok on one measure only")
    } else {
        format!(">= {target:.2}x  BELOW TARGET")
    }
}

/// The 25th and 75th percentiles (nearest rank).
pub(crate) fn middle_half(mut values: Vec<f64>) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values.get((values.len() * q / 4).min(values.len().saturating_sub(1)));
    (
        at(1).copied().unwrap_or(f64::NAN),
        at(3).copied().unwrap_or(f64::NAN),
    )
}

pub(crate) fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut sorted: Vec<f64> = values.into_iter().collect();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// How an exact count compares with the most DESIGN allows.
#[cfg(feature = "redis")]
pub(crate) fn at_most(target: f64, value: f64) -> String {
    if value <= target {
        format!("<= {target:.0}  ok")
    } else {
        format!("<= {target:.0}  ABOVE TARGET")
    }
}
