//! What a route's idempotency policy costs, in process (the router called
//! directly, no sockets, so the layer's own work is most of what is timed):
//!
//! - the required-key check: a keyed replay on a route that requires keys
//!   against the same on one that does not (the check on a request that
//!   passes it), and the 400 a request without a key gets against the
//!   handler it would have run;
//! - JSON canonicalisation: a keyed replay (fingerprint, claim, replay: no
//!   handler, so the fingerprint weighs most) on a route with a JSON
//!   fingerprint ignoring one field, against today's byte fingerprint, for a
//!   1 KiB and a 16 KiB JSON body.
//!
//! Each round times every scenario in turn, `ITERATIONS` requests each, and
//! the ratios are medians over rounds (`AUTUMN_BENCH_ROUNDS`, at most 9).
//! `AUTUMN_BENCH_ONLY=policy` runs this part alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use autumn_web::idempotency::{IdempotencyLayer, IdempotencyPolicy, MemoryIdempotencyStore};
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

use crate::harness::{Config, median, router};

const ITERATIONS: u32 = 2_000;

/// `/orders` (see `harness::router`) behind a layer under `policy`.
fn guarded(policy: &IdempotencyPolicy) -> axum::Router {
    let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
    let layer = IdempotencyLayer::new(store)
        .with_policy(policy)
        .expect("a valid policy");
    router().layer(layer)
}

/// A JSON order of about `size` bytes: a few fields and a padding string,
/// with a client timestamp the JSON policy leaves out.
fn order_body(size: usize) -> String {
    let pad = "x".repeat(size.saturating_sub(120));
    format!(
        r#"{{"sku":"widget-1","qty":2,"client_ts":1733058000,"note":"{pad}","shipping":{{"city":"Lyon","zip":"69001"}}}}"#
    )
}

async fn send(app: &axum::Router, key: Option<&str>, body: &str, expect: StatusCode) {
    let mut request = Request::post("/orders").header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = request
        .body(Body::from(body.to_owned()))
        .expect("a request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let _body = response.into_body().collect().await.expect("a body");
    assert_eq!(status, expect);
}

/// Nanoseconds per request over `ITERATIONS` sends.
async fn time(app: &axum::Router, key: Option<&str>, body: &str, expect: StatusCode) -> f64 {
    let start = Instant::now();
    for _ in 0..ITERATIONS {
        send(app, key, body, expect).await;
    }
    start.elapsed().as_nanos() as f64 / f64::from(ITERATIONS)
}

pub(crate) async fn policy_bench(config: &Config) {
    if !crate::harness::selected("policy") {
        return;
    }
    let optional = guarded(&IdempotencyPolicy::new());
    let required = guarded(&IdempotencyPolicy::new().required());
    let bytes = guarded(&IdempotencyPolicy::new());
    let json = guarded(&IdempotencyPolicy::new().ignoring(["/client_ts"]));
    let small = order_body(1024);
    let large = order_body(16 * 1024);
    // Recorded once: every timed keyed request is a replay.
    for app in [&optional, &required, &bytes, &json] {
        send(app, Some("k-small"), &small, StatusCode::CREATED).await;
        send(app, Some("k-large"), &large, StatusCode::CREATED).await;
    }

    let rounds = config.rounds.clamp(1, 9);
    let mut ratios: [Vec<f64>; 4] = Default::default();
    let mut nanos: [Vec<f64>; 8] = Default::default();
    for _ in 0..rounds {
        let created = StatusCode::CREATED;
        let samples = [
            time(&optional, Some("k-small"), &small, created).await,
            time(&required, Some("k-small"), &small, created).await,
            time(&optional, None, &small, created).await,
            time(&required, None, &small, StatusCode::BAD_REQUEST).await,
            time(&bytes, Some("k-small"), &small, created).await,
            time(&json, Some("k-small"), &small, created).await,
            time(&bytes, Some("k-large"), &large, created).await,
            time(&json, Some("k-large"), &large, created).await,
        ];
        for (all, sample) in nanos.iter_mut().zip(samples) {
            all.push(sample);
        }
        for (i, ratio) in ratios.iter_mut().enumerate() {
            ratio.push(samples[2 * i + 1] / samples[2 * i]);
        }
    }
    let us = |i: usize| median(nanos[i].iter().copied()) / 1000.0;
    println!("\n== idempotency policy, in process ({rounds} rounds x {ITERATIONS} requests) ==");
    let lines = [
        "required-key check, keyed replay: required / optional route",
        "no key: 400 from a required route / the handler on an optional one",
        "JSON fingerprint, 1 KiB replay: json (ignoring /client_ts) / bytes",
        "JSON fingerprint, 16 KiB replay: json (ignoring /client_ts) / bytes",
    ];
    for (i, line) in lines.iter().enumerate() {
        println!(
            "{line}: {:.3}x  ({:.1} us vs {:.1} us per request)",
            median(ratios[i].iter().copied()),
            us(2 * i + 1),
            us(2 * i),
        );
    }
}
