//! What sessions cost a route that reads one, and that a request which does
//! not use its session costs no session-store call.
//!
//! Two Autumn apps (`autumn_web::app()...idempotent().into_router()`), both on
//! the memory backends, each with an idempotency store of its own whose caps
//! are lifted as in `layer.rs` (a run records more keys than the default
//! 500,000):
//!
//! - **S**: `[session]` on (the default). `POST /orders` takes the `Session`
//!   and answers 201 with the `user_id` it reads from it. The client sends the
//!   cookie of a session a sign-in route created once before the rounds.
//! - **N**: `[session] enabled = false`, so no session layer. `POST /orders`
//!   answers the same 201 with the same `user_id` as a constant: the same
//!   bytes (checked before the rounds).
//!
//! The client sends both apps the very same requests, session cookie
//! included (N's idempotency scope is then the raw cookie, S's the stored
//! session it names). So what S pays on top of N is the session layer's
//! work: reading the cookie, one load from the session store before the
//! idempotency guard (a keyed `POST` with a cookie is scoped by the stored
//! session, so it is loaded even on a replay), and the handler's `get` from
//! the loaded session. Nothing changes, so nothing is saved and no
//! `Set-Cookie` is sent (also checked).
//!
//! Scenarios: a first-time request (a new `Idempotency-Key` each) and a
//! replay (one of four keys recorded before the rounds), on S and on N,
//! interleaved in rounds like `layer.rs`'s; the ratios S/N are taken within
//! each round and their median printed.
//!
//! Before the rounds, the session-store calls per request are counted on an
//! app like S whose store (memory) is wrapped by a counter: a request without
//! a cookie and a request with a cookie that no guard looks at, both to a
//! route that never touches the session, must cost none (the bench panics
//! otherwise); the cases that do load the session are printed next to them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use autumn_web::AppBuilder;
use autumn_web::config::AutumnConfig;
use autumn_web::idempotency::MemoryIdempotencyStore;
use autumn_web::prelude::*;
use autumn_web::session::{
    DEFAULT_SECURE_COOKIE_NAME, MemorySessionStore, SaveOutcome, SessionFuture, SessionId,
    SessionRecord, SessionStore,
};
use bytes::Bytes;
use http::header::{COOKIE, SET_COOKIE};
use http::{HeaderMap, HeaderValue, Request, Uri};
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};

use crate::harness::{
    Config, HttpClient, REPLAY_KEYS, Sample, build_request, cpu_time, http_client, median,
    middle_half, selected, send, serve,
};

/// The signed-in user, stored in S's session and a constant in N.
const USER_ID: u64 = 4_242;

// ---------------------------------------------------------------------------
// The apps
// ---------------------------------------------------------------------------

/// Both apps' answer: 201 with the user and the order's SKU.
fn receipt(user_id: Option<u64>, order: &Value) -> (StatusCode, Json<Value>) {
    (
        StatusCode::CREATED,
        Json(json!({
            "user_id": user_id,
            "sku": order.get("sku").cloned().unwrap_or(Value::Null),
        })),
    )
}

/// S's route: the user comes from the session.
#[post("/orders")]
async fn order_for_session_user(
    session: Session,
    Json(order): Json<Value>,
) -> AutumnResult<(StatusCode, Json<Value>)> {
    let user_id: Option<u64> = session.get("user_id").await?;
    Ok(receipt(user_id, &order))
}

/// N's route: the same answer, the user a constant (a `Result` like S's, so
/// the answer takes the same path).
#[post("/orders")]
async fn order_for_fixed_user(Json(order): Json<Value>) -> AutumnResult<(StatusCode, Json<Value>)> {
    Ok(receipt(Some(USER_ID), &order))
}

/// N's route body at another path, next to S's in the counting app: a route
/// that never touches the session.
#[post("/plain")]
async fn plain(Json(order): Json<Value>) -> AutumnResult<(StatusCode, Json<Value>)> {
    Ok(receipt(Some(USER_ID), &order))
}

/// Creates the session the client then sends.
#[post("/sign-in")]
async fn sign_in(session: Session) -> AutumnResult<StatusCode> {
    session.insert("user_id", USER_ID).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The app around `builder`'s routes: memory backends, `.idempotent()`, an
/// idempotency store with no caps.
fn build(builder: AppBuilder, config: AutumnConfig) -> axum::Router {
    let store = Arc::new(
        MemoryIdempotencyStore::new(Duration::from_secs(3600))
            .with_max_entries(usize::MAX)
            .with_max_bytes(usize::MAX),
    );
    builder
        .with_config(config)
        .with_idempotency_store(store)
        .idempotent()
        .into_router()
        .expect("the bench app builds")
}

fn sessions_on() -> AutumnConfig {
    AutumnConfig::default()
}

fn sessions_off() -> AutumnConfig {
    AutumnConfig::from_toml_str("[session]\nenabled = false\n").expect("valid config")
}

fn uri(addr: std::net::SocketAddr, path: &str) -> Uri {
    format!("http://{addr}{path}").parse().expect("uri")
}

/// A session store that counts every call it gets.
struct Counted {
    inner: MemorySessionStore,
    calls: AtomicU64,
}

impl Counted {
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

impl SessionStore for Counted {
    fn load<'a>(
        &'a self,
        id: &'a SessionId,
        now_millis: u64,
    ) -> SessionFuture<'a, Option<SessionRecord>> {
        self.count();
        self.inner.load(id, now_millis)
    }

    fn save<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, ()> {
        self.count();
        self.inner.save(id, record, now_millis)
    }

    fn save_unless_retired<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, SaveOutcome> {
        self.count();
        self.inner.save_unless_retired(id, record, now_millis)
    }

    fn delete<'a>(&'a self, id: &'a SessionId) -> SessionFuture<'a, ()> {
        self.count();
        self.inner.delete(id)
    }

    fn delete_expired(&self, now_millis: u64, limit: u64) -> SessionFuture<'_, u64> {
        self.count();
        self.inner.delete_expired(now_millis, limit)
    }

    fn len(&self) -> Option<u64> {
        self.inner.len()
    }
}

// ---------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------

/// Sends `request` and reads the whole response.
async fn exchange(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
) -> (StatusCode, HeaderMap, Bytes) {
    let response = client.request(request).await.expect("request completes");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body completes")
        .to_bytes();
    (status, headers, body)
}

/// Signs in at `uri` and returns the `Cookie` header that carries the new
/// session.
async fn sign_in_cookie(client: &HttpClient, uri: &Uri) -> HeaderValue {
    let request = Request::post(uri.clone())
        .body(Full::new(Bytes::new()))
        .expect("valid request");
    let (status, headers, body) = exchange(client, request).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "sign-in failed: {body:?}");
    let prefix = format!("{DEFAULT_SECURE_COOKIE_NAME}=");
    let pair = headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with(&prefix))
        .and_then(|value| value.split(';').next())
        .expect("the sign-in sets the session cookie");
    HeaderValue::try_from(pair).expect("a cookie pair is a valid header")
}

/// The bench's `POST` with `key` (if any) and `cookie` (if any).
fn order_request(
    uri: &Uri,
    key: Option<HeaderValue>,
    cookie: Option<&HeaderValue>,
) -> Request<Full<Bytes>> {
    let mut request = build_request(uri, key);
    if let Some(cookie) = cookie {
        request.headers_mut().insert(COOKIE, cookie.clone());
    }
    request
}

// ---------------------------------------------------------------------------
// Session-store calls per request
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyUse {
    None,
    New,
    Replayed,
}

/// The key the replayed case sends, recorded before the counting.
const REPLAYED: &str = "count-replay";

/// One kind of request whose session-store calls are counted.
struct Case {
    what: &'static str,
    path: &'static str,
    cookie: bool,
    key: KeyUse,
    /// The contract: a request that does not use its session costs no call.
    must_be_zero: bool,
    /// Why the calls it makes are there.
    note: &'static str,
}

const CASES: [Case; 6] = [
    Case {
        what: "no cookie, /plain, new key",
        path: "/plain",
        cookie: false,
        key: KeyUse::New,
        must_be_zero: true,
        note: "",
    },
    Case {
        what: "cookie, /plain, no key",
        path: "/plain",
        cookie: true,
        key: KeyUse::None,
        must_be_zero: true,
        note: "",
    },
    Case {
        what: "no cookie, /orders (reads), new key",
        path: "/orders",
        cookie: false,
        key: KeyUse::New,
        must_be_zero: false,
        note: "(no cookie, nothing to load)",
    },
    Case {
        what: "cookie, /plain, new key",
        path: "/plain",
        cookie: true,
        key: KeyUse::New,
        must_be_zero: false,
        note: "(load: the key's scope names the stored session)",
    },
    Case {
        what: "cookie, /orders (reads), new key",
        path: "/orders",
        cookie: true,
        key: KeyUse::New,
        must_be_zero: false,
        note: "(the same load serves the scope and the handler)",
    },
    Case {
        what: "cookie, /orders (reads), replayed key",
        path: "/orders",
        cookie: true,
        key: KeyUse::Replayed,
        must_be_zero: false,
        note: "(load for the scope, then the replay)",
    },
];

/// Counts the session-store calls of `config.count` sequential requests of
/// each case, on an app like S over a counting store; panics when a request
/// that does not use its session made one.
async fn count_store_calls(client: &HttpClient, config: &Config) {
    let store = Arc::new(Counted {
        inner: MemorySessionStore::new(1_000),
        calls: AtomicU64::new(0),
    });
    let builder = autumn_web::app()
        .routes(routes![sign_in, order_for_session_user, plain])
        .with_session_store(store.clone());
    let addr = serve(build(builder, sessions_on())).await;
    let cookie = sign_in_cookie(client, &uri(addr, "/sign-in")).await;
    send(
        client,
        order_request(
            &uri(addr, "/orders"),
            Some(HeaderValue::from_static(REPLAYED)),
            Some(&cookie),
        ),
        false,
    )
    .await;

    println!(
        "\n== session-store calls per request ({} sequential requests per case, counted by a \
         store wrapping the memory one; /plain never touches the session)",
        config.count
    );
    let mut failures = Vec::new();
    for (index, case) in CASES.iter().enumerate() {
        let target = uri(addr, case.path);
        let before = store.calls();
        for n in 0..config.count {
            let key = match case.key {
                KeyUse::None => None,
                KeyUse::New => {
                    Some(HeaderValue::try_from(format!("count-{index}-{n}")).expect("valid key"))
                }
                KeyUse::Replayed => Some(HeaderValue::from_static(REPLAYED)),
            };
            let cookie = case.cookie.then_some(&cookie);
            let request = order_request(&target, key, cookie);
            send(client, request, case.key == KeyUse::Replayed).await;
        }
        let per_request = (store.calls() - before) as f64 / config.count as f64;
        let verdict = match (case.must_be_zero, per_request == 0.0) {
            (true, true) => "must be 0: ok",
            (true, false) => {
                failures.push(format!("{} ({per_request:.2} per request)", case.what));
                "must be 0: FAILED"
            }
            (false, _) => case.note,
        };
        println!("{:<40} {per_request:>5.2}   {verdict}", case.what);
    }
    assert!(
        failures.is_empty(),
        "requests that do not use their session called the session store: {}; they must \
         cost no store call",
        failures.join(", ")
    );
}

// ---------------------------------------------------------------------------
// Throughput rounds
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// S: the session layer on, the route reads the session.
    Session,
    /// N: no session layer, the route reads nothing.
    NoSession,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    FirstTime,
    Replay,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scenario {
    variant: Variant,
    kind: Kind,
}

impl Scenario {
    const fn new(variant: Variant, kind: Kind) -> Self {
        Self { variant, kind }
    }

    /// Every scenario, in the order a round runs them.
    const ALL: [Self; 4] = [
        Self::new(Variant::Session, Kind::FirstTime),
        Self::new(Variant::NoSession, Kind::FirstTime),
        Self::new(Variant::Session, Kind::Replay),
        Self::new(Variant::NoSession, Kind::Replay),
    ];

    fn label(self) -> &'static str {
        match (self.variant, self.kind) {
            (Variant::Session, Kind::FirstTime) => "S (session read), first-time key",
            (Variant::NoSession, Kind::FirstTime) => "N (no session), first-time key",
            (Variant::Session, Kind::Replay) => "S (session read), replayed key",
            (Variant::NoSession, Kind::Replay) => "N (no session), replayed key",
        }
    }

    /// For the per-round lines and `AUTUMN_BENCH_ONLY`.
    fn short(self) -> &'static str {
        match (self.variant, self.kind) {
            (Variant::Session, Kind::FirstTime) => "session-first",
            (Variant::NoSession, Kind::FirstTime) => "no-session-first",
            (Variant::Session, Kind::Replay) => "session-replay",
            (Variant::NoSession, Kind::Replay) => "no-session-replay",
        }
    }
}

/// Runs one scenario like `layer.rs` does: `concurrency` keep-alive
/// connections, `warmup`, then `measure` during which completed requests are
/// counted.
async fn run_scenario(
    client: &HttpClient,
    uri: &Uri,
    cookie: &HeaderValue,
    kind: Kind,
    run: usize,
    config: &Config,
) -> Sample {
    let start = Instant::now() + config.warmup;
    let end = start + config.measure;
    let tasks: Vec<_> = (0..config.concurrency)
        .map(|task| {
            let client = client.clone();
            let uri = uri.clone();
            let cookie = cookie.clone();
            tokio::spawn(async move {
                let mut counted = 0u64;
                let mut n = 0usize;
                while Instant::now() < end {
                    let key = match kind {
                        Kind::FirstTime => {
                            HeaderValue::try_from(format!("session-{run}-{task}-{n}"))
                                .expect("valid key")
                        }
                        Kind::Replay => {
                            HeaderValue::from_static(REPLAY_KEYS[(task + n) % REPLAY_KEYS.len()])
                        }
                    };
                    let request = order_request(&uri, Some(key), Some(&cookie));
                    send(&client, request, kind == Kind::Replay).await;
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

/// The session part of the bench: the store-call counts, then the S/N
/// rounds and their ratios. Does nothing when `AUTUMN_BENCH_ONLY` names none
/// of its scenarios.
pub(crate) async fn session_bench(config: &Config) {
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|scenario| selected(scenario.short()))
        .collect();
    if scenarios.is_empty() {
        return;
    }
    let client = http_client(config);
    count_store_calls(&client, config).await;

    let with_session = serve(build(
        autumn_web::app().routes(routes![sign_in, order_for_session_user]),
        sessions_on(),
    ))
    .await;
    let without_session = serve(build(
        autumn_web::app().routes(routes![order_for_fixed_user]),
        sessions_off(),
    ))
    .await;
    let cookie = sign_in_cookie(&client, &uri(with_session, "/sign-in")).await;
    let orders = |variant: Variant| match variant {
        Variant::Session => uri(with_session, "/orders"),
        Variant::NoSession => uri(without_session, "/orders"),
    };

    // Both apps answer the same bytes and set no cookie, so the rounds
    // compare the servers' work only.
    let mut answers = Vec::new();
    for variant in [Variant::Session, Variant::NoSession] {
        let key = HeaderValue::from_static("session-check");
        let request = order_request(&orders(variant), Some(key), Some(&cookie));
        let (status, headers, body) = exchange(&client, request).await;
        assert_eq!(status, StatusCode::CREATED, "unexpected status: {body:?}");
        assert!(
            headers.get(SET_COOKIE).is_none(),
            "{variant:?} set a cookie on a request that changed nothing"
        );
        answers.push(body);
    }
    let expected = json!({"user_id": USER_ID, "sku": "ABC-123"});
    for body in &answers {
        let answer: Value = serde_json::from_slice(body).expect("a JSON answer");
        assert_eq!(answer, expected, "S and N must answer the same");
    }
    assert_eq!(answers[0], answers[1], "S and N must answer the same bytes");
    // The replay scenarios' keys, recorded on both apps.
    for variant in [Variant::Session, Variant::NoSession] {
        for key in REPLAY_KEYS {
            let key = HeaderValue::from_static(key);
            send(
                &client,
                order_request(&orders(variant), Some(key), Some(&cookie)),
                false,
            )
            .await;
        }
    }

    println!(
        "\n== sessions: POST /orders reading the session (S) against the same route without \
         the session layer (N), memory backends; {} rounds x {} scenarios, {:.1}s measured \
         (+{:.1}s warm-up) each",
        config.rounds,
        scenarios.len(),
        config.measure.as_secs_f64(),
        config.warmup.as_secs_f64(),
    );
    // samples[scenario][round]
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); scenarios.len()];
    let mut run = 0;
    for round in 1..=config.rounds {
        let mut line = format!("round {round}:");
        for (index, scenario) in scenarios.iter().enumerate() {
            let uri = orders(scenario.variant);
            let sample = run_scenario(&client, &uri, &cookie, scenario.kind, run, config).await;
            run += 1;
            samples[index].push(sample);
            line.push_str(&format!(
                "  {} {:.0}/s ({:.0}/cpu-s)",
                scenario.short(),
                sample.per_sec,
                sample.per_cpu_sec
            ));
        }
        println!("{line}");
    }

    println!(
        "\n{:<34} {:>10} {:>12}",
        "median of rounds", "req/s", "req/cpu-s"
    );
    for (index, scenario) in scenarios.iter().enumerate() {
        println!(
            "{:<34} {:>10.0} {:>12.0}",
            scenario.label(),
            median(samples[index].iter().map(|s| s.per_sec)),
            median(samples[index].iter().map(|s| s.per_cpu_sec)),
        );
    }
    // Each ratio within a round, then the median over rounds, as in
    // `layer.rs`; printed for each kind whose S and N both ran.
    let index_of = |variant: Variant, kind: Kind| {
        scenarios
            .iter()
            .position(|s| *s == Scenario::new(variant, kind))
    };
    let mut printed = false;
    for (kind, name) in [(Kind::FirstTime, "first-time"), (Kind::Replay, "replay")] {
        let (Some(s), Some(n)) = (
            index_of(Variant::Session, kind),
            index_of(Variant::NoSession, kind),
        ) else {
            continue;
        };
        let per_round = |metric: fn(&Sample) -> f64| -> Vec<f64> {
            samples[s]
                .iter()
                .zip(&samples[n])
                .map(|(s, n)| metric(s) / metric(n))
                .collect()
        };
        let cpu = median(per_round(|s| s.per_cpu_sec));
        let wall = median(per_round(|s| s.per_sec));
        let (low, high) = middle_half(per_round(|s| s.per_cpu_sec));
        if !printed {
            println!();
            printed = true;
        }
        println!(
            "session {name} S/N = {cpu:.2}   (req/cpu-s; req/s {wall:.2}; cpu spread \
             {low:.2}-{high:.2})"
        );
    }
    if printed {
        println!(
            "(S/N: median over rounds of the ratio within each round; spread: the middle half \
             of the rounds' req/cpu-s ratios)"
        );
    }
}
