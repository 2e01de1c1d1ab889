//! `.idempotent()` on the app builder: which routes replay, which fail closed,
//! which opt out; scoping; metrics; the clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use autumn_web::config::AutumnConfig;
// The old path, deprecated for one release, still resolves.
use autumn_web::idempotency::clock::ManualClock;
use autumn_web::idempotency::{
    IdempotencyLayer, IdempotencyReplayLayer, IdempotencyStore, MemoryIdempotencyStore,
    ReplayGuardLayer,
};
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient};
use axum::middleware::{self, Next};
use axum::routing::post as axum_post;

use crate::support::logs;

static MACRO_RUNS: AtomicUsize = AtomicUsize::new(0);
static OPT_OUT_RUNS: AtomicUsize = AtomicUsize::new(0);

#[post("/managed")]
async fn managed() -> (StatusCode, String) {
    let run = MACRO_RUNS.fetch_add(1, Ordering::SeqCst) + 1;
    (StatusCode::CREATED, format!("managed {run}"))
}

#[post("/opted-out", idempotent = false)]
async fn opted_out() -> String {
    format!(
        "opted out {}",
        OPT_OUT_RUNS.fetch_add(1, Ordering::SeqCst) + 1
    )
}

/// A counting handler for hand-built routes and raw routers.
fn counter() -> (Arc<AtomicUsize>, axum::routing::MethodRouter) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let handler = axum_post(move || {
        let counted = counted.clone();
        async move { format!("run {}", counted.fetch_add(1, Ordering::SeqCst) + 1) }
    });
    (runs, handler)
}

/// A route-local check that must run on every attempt, replays included.
async fn require_token(request: axum::extract::Request, next: Next) -> Response {
    match request.headers().get("x-token") {
        Some(token) if token == "secret" => next.run(request).await,
        _ => StatusCode::UNAUTHORIZED.into_response(),
    }
}

async fn post_twice(
    client: &TestClient,
    path: &str,
    key: &str,
) -> [autumn_web::test::TestResponse; 2] {
    let first = client
        .post(path)
        .header("idempotency-key", key)
        .send()
        .await;
    let second = client
        .post(path)
        .header("idempotency-key", key)
        .send()
        .await;
    [first, second]
}

#[tokio::test]
async fn macro_routes_replay_and_opted_out_routes_always_run() {
    let client = TestApp::new()
        .routes(routes![managed, opted_out])
        .idempotent()
        .build();
    let [first, retry] = post_twice(&client, "/managed", "k").await;
    first.assert_status(201);
    retry.assert_header("x-idempotent-replayed", "true");
    assert_eq!(retry.text(), first.text());

    let [first, second] = post_twice(&client, "/opted-out", "k").await;
    assert_eq!(first.header("x-idempotent-replayed"), None);
    assert_eq!(second.header("x-idempotent-replayed"), None);
    assert_ne!(first.text(), second.text(), "the handler ran twice");
}

static CHECKED_RUNS: AtomicUsize = AtomicUsize::new(0);

#[post("/checked")]
async fn checked() -> String {
    format!(
        "checked {}",
        CHECKED_RUNS.fetch_add(1, Ordering::SeqCst) + 1
    )
}

#[tokio::test]
async fn a_macro_route_with_its_own_layer_is_never_replayed_around_it() {
    let route = routes![checked]
        .into_iter()
        .map(|route| route.layer(middleware::from_fn(require_token)))
        .collect();
    let client = TestApp::new().routes(route).idempotent().build();
    let send = || {
        client
            .post("/checked")
            .header("idempotency-key", "k")
            .header("x-token", "secret")
            .send()
    };
    send().await.assert_ok();
    let retry = send().await;
    retry.assert_status(409);
    assert!(retry.text().contains("idempotency_replay_unavailable"));
    assert_eq!(CHECKED_RUNS.load(Ordering::SeqCst), 1, "never a second run");
}

#[tokio::test]
async fn without_idempotent_nothing_is_replayed() {
    let (runs, handler) = counter();
    let client = TestApp::new()
        .routes(vec![
            Route::new(http::Method::POST, "/plain", handler)
                .with_idempotency(RouteIdempotency::Managed),
        ])
        .build();
    post_twice(&client, "/plain", "k").await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn merged_and_nested_raw_routers_record_but_fail_closed_on_a_hit() {
    let (merged_runs, merged) = counter();
    let (nested_runs, nested) = counter();
    let client = TestApp::new()
        .merge(axum::Router::new().route("/raw", merged))
        .nest("/api", axum::Router::new().route("/raw", nested))
        .idempotent()
        .build();
    for (path, runs) in [("/raw", &merged_runs), ("/api/raw", &nested_runs)] {
        let [first, retry] = post_twice(&client, path, "k").await;
        first.assert_ok();
        retry.assert_status(409);
        assert!(
            retry.text().contains("idempotency_replay_unavailable"),
            "{}",
            retry.text()
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{path}: no second run");
    }
}

#[tokio::test]
async fn hand_built_routes_are_opaque_unless_they_opt_in() {
    let (opaque_runs, opaque) = counter();
    let (off_runs, off) = counter();
    let client = TestApp::new()
        .routes(vec![
            Route::new(http::Method::POST, "/opaque", opaque),
            Route::new(http::Method::POST, "/off", off).with_idempotency(RouteIdempotency::Off),
        ])
        .idempotent()
        .build();
    let [_, retry] = post_twice(&client, "/opaque", "k").await;
    retry.assert_status(409);
    assert_eq!(opaque_runs.load(Ordering::SeqCst), 1);

    let [first, second] = post_twice(&client, "/off", "k").await;
    assert_eq!(
        (
            first.header("x-idempotent-replayed"),
            second.header("x-idempotent-replayed")
        ),
        (None, None)
    );
    assert_eq!(off_runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn replay_through_inner_runs_the_route_checks_before_replaying() {
    let (runs, handler) = counter();
    let route = Route::new(http::Method::POST, "/guarded", handler)
        .layer(IdempotencyReplayLayer::new())
        .layer(middleware::from_fn(require_token))
        .with_idempotency(RouteIdempotency::ReplayThroughInner);
    let client = TestApp::new().routes(vec![route]).idempotent().build();

    let send = |token: &'static str| {
        client
            .post("/guarded")
            .header("idempotency-key", "k")
            .header("x-token", token)
            .send()
    };
    send("secret").await.assert_ok();
    send("wrong").await.assert_status(401); // the check ran on the retry
    let replay = send("secret").await;
    replay.assert_header("x-idempotent-replayed", "true");
    assert_eq!(replay.text(), "run 1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn replay_through_inner_without_a_replay_layer_fails_closed() {
    let (runs, handler) = counter();
    let route = Route::new(http::Method::POST, "/forgot", handler)
        .with_idempotency(RouteIdempotency::ReplayThroughInner);
    let client = TestApp::new().routes(vec![route]).idempotent().build();
    let [_, retry] = post_twice(&client, "/forgot", "k").await;
    retry.assert_status(409);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never a second run");
}

#[tokio::test]
async fn a_route_that_lost_its_replay_layer_refuses_the_forwarded_retry() {
    let store: Arc<dyn autumn_web::idempotency::IdempotencyStore> =
        Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(60)));
    let (runs, handler) = counter();
    let deploy = |route: Route| {
        TestApp::from_builder(
            autumn_web::app()
                .routes(vec![route])
                .idempotent()
                .with_idempotency_store(store.clone()),
        )
        .build()
    };
    // Deploy 1: the route replays through its own replay layer, so the
    // record is marked to be replayed inside the route.
    let before = deploy(
        Route::new(http::Method::POST, "/moved", handler.clone())
            .layer(IdempotencyReplayLayer::new())
            .with_idempotency(RouteIdempotency::ReplayThroughInner),
    );
    let [first, replay] = post_twice(&before, "/moved", "k").await;
    first.assert_ok();
    replay.assert_header("x-idempotent-replayed", "true");

    // Deploy 2: the same path is now a plain hand-built route. The retry is
    // still forwarded into it; it must not run the handler again.
    let after = deploy(Route::new(http::Method::POST, "/moved", handler));
    let retry = after
        .post("/moved")
        .header("idempotency-key", "k")
        .send()
        .await;
    retry.assert_status(409);
    assert!(retry.text().contains("idempotency_replay_unavailable"));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never a second run");
}

/// Two deploys of one app sharing `store`: what a retry meets after the
/// route changed.
fn deploy_on(store: &Arc<dyn IdempotencyStore>, route: Route) -> TestClient {
    TestApp::from_builder(
        autumn_web::app()
            .routes(vec![route])
            .idempotent()
            .with_idempotency_store(store.clone()),
    )
    .build()
}

fn shared_store() -> Arc<dyn IdempotencyStore> {
    Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(60)))
}

fn assert_replay_refused(response: &autumn_web::test::TestResponse) {
    response.assert_status(409);
    response.assert_header("content-type", "application/problem+json");
    let problem: serde_json::Value = response.json();
    assert_eq!(
        problem["code"], "idempotency_replay_unavailable",
        "{problem}"
    );
}

/// A route-local middleware that rebuilds the request from its method, URI
/// and headers, dropping every extension on the way.
async fn rebuild_request(request: axum::extract::Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let mut rebuilt = axum::extract::Request::new(body);
    *rebuilt.method_mut() = parts.method;
    *rebuilt.uri_mut() = parts.uri;
    *rebuilt.headers_mut() = parts.headers;
    next.run(rebuilt).await
}

#[tokio::test]
async fn a_replay_through_inner_route_that_lost_its_replay_layer_refuses_the_retry() {
    let store = shared_store();
    let (runs, handler) = counter();
    // Deploy 1: the route replays through its own replay layer.
    let before = deploy_on(
        &store,
        Route::new(http::Method::POST, "/kept", handler.clone())
            .layer(IdempotencyReplayLayer::new())
            .layer(middleware::from_fn(require_token))
            .with_idempotency(RouteIdempotency::ReplayThroughInner),
    );
    let send = |client: &TestClient| {
        client
            .post("/kept")
            .header("idempotency-key", "k")
            .header("x-token", "secret")
            .send()
    };
    send(&before).await.assert_ok();
    send(&before)
        .await
        .assert_header("x-idempotent-replayed", "true");

    // Deploy 2: still ReplayThroughInner, but the replay layer is gone. The
    // retry is forwarded into the route, past its check, to the guard.
    let after = deploy_on(
        &store,
        Route::new(http::Method::POST, "/kept", handler)
            .layer(middleware::from_fn(require_token))
            .with_idempotency(RouteIdempotency::ReplayThroughInner),
    );
    assert_replay_refused(&send(&after).await);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never a second run");
}

#[tokio::test]
async fn a_middleware_that_rebuilds_the_request_does_not_hide_the_forwarded_replay() {
    let store = shared_store();
    let (runs, handler) = counter();
    let with_replay_layer = deploy_on(
        &store,
        Route::new(http::Method::POST, "/rebuilt", handler.clone())
            .layer(IdempotencyReplayLayer::new())
            .layer(middleware::from_fn(rebuild_request))
            .with_idempotency(RouteIdempotency::ReplayThroughInner),
    );
    let [first, retry] = post_twice(&with_replay_layer, "/rebuilt", "k").await;
    first.assert_ok();
    retry.assert_header("x-idempotent-replayed", "true");
    assert_eq!(retry.text(), "run 1");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "replayed, not run again");

    // The replay layer removed: the guard still sees the replay the
    // middleware hid from it.
    let without = deploy_on(
        &store,
        Route::new(http::Method::POST, "/rebuilt", handler)
            .layer(middleware::from_fn(rebuild_request))
            .with_idempotency(RouteIdempotency::ReplayThroughInner),
    );
    let retry = without
        .post("/rebuilt")
        .header("idempotency-key", "k")
        .send()
        .await;
    assert_replay_refused(&retry);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never a second run");
}

#[tokio::test]
async fn a_replay_layer_inside_the_handler_fails_closed_and_warns_once() {
    let (_logging, logs) = logs::capture();
    let (runs, handler) = counter();
    let client = TestApp::new()
        .routes(vec![
            Route::new(
                http::Method::POST,
                "/baked",
                handler.layer(IdempotencyReplayLayer::new()),
            )
            .with_idempotency(RouteIdempotency::ReplayThroughInner),
        ])
        .idempotent()
        .build();
    for key in ["k1", "k2"] {
        let [first, retry] = post_twice(&client, "/baked", key).await;
        first.assert_ok();
        assert_replay_refused(&retry);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "one run per key");
    let warnings = logs.lines_with("beneath the replay guard");
    assert_eq!(warnings.len(), 1, "{}", logs.text());
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("route /baked"),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn a_raw_router_guard_holds_when_a_middleware_rebuilds_the_request() {
    let store = shared_store();
    let (runs, handler) = counter();
    let own = || {
        IdempotencyLayer::new(Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(
            60,
        ))))
        .replay_through_inner()
    };
    let deploy = |raw: axum::Router| {
        TestApp::from_builder(
            autumn_web::app()
                .merge(raw)
                .idempotent()
                .with_idempotency_store(store.clone()),
        )
        .build()
    };
    // Deploy 1: guard, replay layer, then a middleware that rebuilds the
    // request; the replay layer answers from the task's forwarded replay.
    let before = deploy(
        axum::Router::new()
            .route(
                "/raw",
                handler
                    .clone()
                    .layer(ReplayGuardLayer::new())
                    .layer(IdempotencyReplayLayer::new())
                    .layer(middleware::from_fn(rebuild_request)),
            )
            .layer(own()),
    );
    let [first, retry] = post_twice(&before, "/raw", "k").await;
    first.assert_ok();
    retry.assert_header("x-idempotent-replayed", "true");

    // Deploy 2: the replay layer removed; the guard refuses the retry.
    let after = deploy(
        axum::Router::new()
            .route(
                "/raw",
                handler
                    .layer(ReplayGuardLayer::new())
                    .layer(middleware::from_fn(rebuild_request)),
            )
            .layer(own()),
    );
    let retry = after
        .post("/raw")
        .header("idempotency-key", "k")
        .send()
        .await;
    assert_replay_refused(&retry);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never a second run");
}

#[tokio::test]
async fn a_raw_router_opts_in_with_its_own_replay_through_inner_layer() {
    let (runs, handler) = counter();
    let own_store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(60)));
    let raw = axum::Router::new()
        .route(
            "/raw",
            handler
                .layer(IdempotencyReplayLayer::new())
                .layer(middleware::from_fn(require_token)),
        )
        .layer(IdempotencyLayer::new(own_store.clone()).replay_through_inner());
    let client = TestApp::new().merge(raw).idempotent().build();
    let send = |token: &'static str| {
        client
            .post("/raw")
            .header("idempotency-key", "k")
            .header("x-token", token)
            .send()
    };
    send("secret").await.assert_ok();
    send("nope").await.assert_status(401);
    send("secret")
        .await
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(
        own_store.is_empty(),
        "the app's layer owns the record; the inner one deferred"
    );
}

#[tokio::test]
async fn sessions_keep_their_records_apart() {
    let (runs, handler) = counter();
    let client = TestApp::new()
        .routes(vec![
            Route::new(http::Method::POST, "/s", handler)
                .with_idempotency(RouteIdempotency::Managed),
        ])
        .idempotent()
        .build();
    let name = autumn_web::session::DEFAULT_SECURE_COOKIE_NAME;
    let send = |session: String| {
        client
            .post("/s")
            .header("idempotency-key", "same")
            .header("cookie", &session)
            .send()
    };
    let alice = send(format!("{name}=alice")).await;
    let bob = send(format!("{name}=bob; theme=dark")).await;
    assert_eq!(
        bob.header("x-idempotent-replayed"),
        None,
        "bob never sees alice's response"
    );
    let alice_again = send(format!("theme=light; {name}=alice")).await;
    alice_again.assert_header("x-idempotent-replayed", "true");
    assert_eq!(alice_again.text(), alice.text());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_metrics_endpoint_counts_hits_misses_and_conflicts() {
    let client = TestApp::new()
        .routes(routes![managed])
        .merge(axum::Router::new().route("/raw", counter().1))
        .with_config(with_metrics())
        .idempotent()
        .build();
    post_twice(&client, "/managed", "m1").await; // miss + hit
    post_twice(&client, "/managed", "m2").await; // miss + hit
    post_twice(&client, "/raw", "r1").await; // miss + conflict (fail closed)
    let metrics: serde_json::Value = client.get("/actuator/metrics").send().await.json();
    let idempotency = &metrics["idempotency"];
    assert_eq!(
        [
            &idempotency["hits"],
            &idempotency["misses"],
            &idempotency["conflicts"],
            // Runs that could not be recorded, next to the spec's three.
            &idempotency["lock_renewal_failures"],
            &idempotency["unrecorded_too_large"],
        ],
        [2, 3, 1, 0, 0],
        "{metrics}"
    );
    assert_eq!(
        idempotency["store"]["entries"], 3,
        "three records: {metrics}"
    );
}

#[tokio::test]
async fn a_full_memory_store_answers_503_and_the_metrics_show_its_size() {
    let config = AutumnConfig::from_toml_str(
        "[idempotency.memory]\nmax_entries = 2\n[actuator]\nmetrics_on_app_port = true\n",
    )
    .expect("config");
    let client = TestApp::new()
        .routes(routes![managed])
        .with_config(config)
        .idempotent()
        .build();
    for key in ["f1", "f2"] {
        let [first, _] = post_twice(&client, "/managed", key).await;
        first.assert_status(201);
    }
    let full = client
        .post("/managed")
        .header("idempotency-key", "f3")
        .send()
        .await;
    full.assert_status(503);
    full.assert_header("retry-after", "1");
    let problem: serde_json::Value = full.json();
    assert_eq!(problem["code"], "idempotency_store_full", "{problem}");
    // The keys already held still replay.
    let [_, again] = post_twice(&client, "/managed", "f1").await;
    again.assert_header("x-idempotent-replayed", "true");

    let metrics: serde_json::Value = client.get("/actuator/metrics").send().await.json();
    let store = &metrics["idempotency"]["store"];
    assert_eq!(store["entries"], 2, "{metrics}");
    assert_eq!(store["max_entries"], 2, "{metrics}");
    assert!(store["bytes"].as_u64().is_some_and(|b| b > 0), "{metrics}");
    // The refusal is counted, under its own name.
    assert_eq!(
        metrics["idempotency"]["store_full_refusals"], 1,
        "{metrics}"
    );
}

#[test]
fn a_memory_store_with_no_room_stops_startup_naming_the_key() {
    let config =
        AutumnConfig::from_toml_str("[idempotency.memory]\nmax_entries = 0\n").expect("config");
    let error = autumn_web::app()
        .routes(routes![managed])
        .idempotent()
        .with_config(config)
        .into_router()
        .expect_err("no room");
    assert!(
        error.to_string().contains("idempotency.memory.max_entries"),
        "{error}"
    );
}

#[tokio::test]
async fn record_ttl_comes_from_config_and_follows_the_clock() {
    let clock = ManualClock::new();
    let config = AutumnConfig::from_toml_str("[idempotency]\nttl_secs = 30\n").expect("config");
    let (runs, handler) = counter();
    let client = TestApp::new()
        .routes(vec![
            Route::new(http::Method::POST, "/t", handler)
                .with_idempotency(RouteIdempotency::Managed),
        ])
        .with_config(config)
        .with_clock(Arc::new(clock.clone()))
        .idempotent()
        .build();
    post_twice(&client, "/t", "k").await;
    clock.advance(Duration::from_secs(31));
    let after = client
        .post("/t")
        .header("idempotency-key", "k")
        .send()
        .await;
    assert_eq!(after.header("x-idempotent-replayed"), None);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn disabled_in_config_means_no_layer() {
    let config = AutumnConfig::from_toml_str("[idempotency]\nenabled = false\n").expect("config");
    let (runs, handler) = counter();
    let client = TestApp::new()
        .routes(vec![
            Route::new(http::Method::POST, "/d", handler)
                .with_idempotency(RouteIdempotency::Managed),
        ])
        .with_config(config)
        .idempotent()
        .build();
    post_twice(&client, "/d", "k").await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A configuration that serves the counters on the app's port, where these
/// tests read them.
fn with_metrics() -> autumn_web::config::AutumnConfig {
    autumn_web::config::AutumnConfig::from_toml_str("[actuator]\nmetrics_on_app_port = true\n")
        .expect("config")
}
