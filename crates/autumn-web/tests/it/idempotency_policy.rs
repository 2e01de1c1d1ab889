//! Per-route idempotency policy, through the real launch path on every
//! backend: required keys (400 problem with the docs link), per-route TTLs,
//! JSON fingerprints that ignore volatile fields (and still read records
//! made with the byte fingerprint), outcome headers, and the machine-readable
//! members of the 409 and 422 problems.

use crate::support::backend;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use backend::Backend;

use autumn_web::clock::{Clock as _, ManualClock};
use autumn_web::config::{IdempotencyConfig, Profile};
use autumn_web::idempotency::{
    IdempotencyPolicy, IdempotencyStore, KeyRequirement, MemoryIdempotencyStore,
};
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient, TestResponse};
use autumn_web::{AppBuilder, Route};
use axum::routing::post as axum_post;
use serde_json::{Value, json};
use tower::ServiceExt as _;

/// Runs per request id (the cases run in parallel, on every backend).
static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);
/// Requests held in their handler until released, per id: (started, release).
type Hold = (Arc<tokio::sync::Notify>, Arc<tokio::sync::Semaphore>);
static HELD: LazyLock<Mutex<HashMap<String, Hold>>> = LazyLock::new(Mutex::default);

fn unique(label: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{label}-{}", NEXT.fetch_add(1, Ordering::SeqCst))
}

fn runs(id: &str) -> usize {
    RUNS.lock().expect("runs").get(id).copied().unwrap_or(0)
}

/// Counts a run of the request `body["id"]` names, and answers 201.
fn count(body: &Value) -> (StatusCode, String) {
    let id = body["id"].as_str().unwrap_or_default().to_owned();
    let mut runs = RUNS.lock().expect("runs");
    let run = runs.entry(id.clone()).or_default();
    *run += 1;
    (StatusCode::CREATED, format!("{id} run {run}"))
}

#[post("/payments", idempotency = "required")]
async fn pay(Json(body): Json<Value>) -> (StatusCode, String) {
    count(&body)
}

#[post("/short", idempotency_ttl = "2h")]
async fn short(Json(body): Json<Value>) -> (StatusCode, String) {
    count(&body)
}

/// A route with a path parameter, which axum matches however the client
/// spells the parameter's characters.
#[post("/items/{name}")]
async fn item(Path(_name): Path<String>, Json(body): Json<Value>) -> (StatusCode, String) {
    count(&body)
}

/// Longer than the app's 24 h: every store keeps it for 48 h.
#[post("/longer", idempotency_ttl = "48h")]
async fn longer(Json(body): Json<Value>) -> (StatusCode, String) {
    count(&body)
}

#[post("/long")]
async fn long(Json(body): Json<Value>) -> (StatusCode, String) {
    count(&body)
}

#[post("/transfers", idempotency_ignore = ["/client_ts", "/meta/trace_id"])]
async fn transfer(Json(body): Json<Value>) -> (StatusCode, String) {
    count(&body)
}

/// Says it started, then waits until the test releases it.
async fn held(body: Value) -> (StatusCode, String) {
    let id = body["id"].as_str().unwrap_or_default().to_owned();
    let hold = HELD.lock().expect("held").get(&id).cloned();
    if let Some((started, release)) = hold {
        started.notify_one();
        if let Ok(permit) = release.acquire().await {
            permit.forget();
        }
    }
    count(&body)
}

/// Waits until the test releases it, so a duplicate finds the key in flight.
#[post("/slow", in_flight_wait_ms = 0)]
async fn slow(Json(body): Json<Value>) -> (StatusCode, String) {
    held(body).await
}

/// The same, with a lock that lapses after 30 s rather than the app's 60 s.
#[post("/slow-short-lock", idempotency_in_flight_ttl = "30s")]
async fn slow_short_lock(Json(body): Json<Value>) -> (StatusCode, String) {
    held(body).await
}

/// Holds `id`'s requests in their handler until released.
fn hold(id: &str) -> Hold {
    let hold = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Semaphore::new(0)),
    );
    HELD.lock()
        .expect("held")
        .insert(id.to_owned(), hold.clone());
    hold
}

/// A hand-built route counting runs of `body["id"]`.
fn hand_built(path: &'static str) -> Route {
    Route::new(
        http::Method::POST,
        path,
        axum_post(|Json(body): Json<Value>| async move { count(&body) }),
    )
}

/// An app on `backend`'s fresh storage, its `[idempotency]` changed by
/// `change`. `AppBuilder::idempotent` (not `TestApp::idempotent`, which
/// always uses memory) puts the guard on the configured backend.
fn app_on(
    backend: Backend,
    routes: Vec<Route>,
    change: impl FnOnce(&mut IdempotencyConfig),
) -> TestApp {
    let mut storage = backend.storage();
    // The app outlives this function: its schema stays.
    storage.keep_schema();
    let mut config = storage.config("");
    change(&mut config.idempotency);
    TestApp::from_builder(autumn_web::app().routes(routes).idempotent()).with_config(config)
}

fn client(
    backend: Backend,
    routes: Vec<Route>,
    change: impl FnOnce(&mut IdempotencyConfig),
) -> TestClient {
    app_on(backend, routes, change).build()
}

async fn send(client: &TestClient, path: &str, key: Option<&str>, body: &str) -> TestResponse {
    let mut request = client
        .post(path)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.send().await
}

async fn a_required_key_is_asked_for_with_the_docs_link(backend: Backend) {
    let docs = "https://example.com/docs/idempotency";
    let client = client(backend, routes![pay, long], |idempotency| {
        idempotency.docs_url = Some(docs.to_owned());
    });
    let id = unique("pay");
    let body = json!({ "id": id, "amount": 5 }).to_string();

    let refused = send(&client, "/payments", None, &body).await;
    refused.assert_status(400);
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        refused.header("link"),
        Some("<https://example.com/docs/idempotency>; rel=\"describedby\"")
    );
    let problem: Value = refused.json();
    assert_eq!(problem["type"], docs);
    assert_eq!(problem["code"], "idempotency_key_missing");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("requires an Idempotency-Key header")),
        "{problem}"
    );
    assert_eq!(runs(&id), 0, "a refused request never runs the handler");

    // A route that does not require a key still runs without one.
    let free = unique("free");
    send(&client, "/long", None, &json!({ "id": free }).to_string())
        .await
        .assert_status(201);
    assert_eq!(runs(&free), 1);

    let key = unique("key");
    let first = send(&client, "/payments", Some(&key), &body).await;
    first.assert_status(201);
    assert_eq!(first.header("x-idempotent-honoured"), Some("true"));
    let retry = send(&client, "/payments", Some(&key), &body).await;
    retry.assert_status(201);
    assert_eq!(retry.header("x-idempotent-replayed"), Some("true"));
    assert_eq!(retry.header("x-idempotent-honoured"), None);
    assert_eq!(runs(&id), 1);
}

async fn an_app_wide_requirement_applies_to_every_route_that_keeps_it(backend: Backend) {
    let routes = vec![
        hand_built("/strict"),
        hand_built("/lenient")
            .with_policy(IdempotencyPolicy::new().with_key(KeyRequirement::Optional)),
    ];
    let client = client(backend, routes, |idempotency| {
        idempotency.require_key = true
    });
    let id = unique("strict");
    let refused = send(&client, "/strict", None, &json!({ "id": id }).to_string()).await;
    refused.assert_status(400);
    let problem: Value = refused.json();
    assert_eq!(problem["type"], autumn_web::idempotency::KEY_MISSING_TYPE);
    assert_eq!(refused.header("link"), None, "no docs URL configured");
    assert_eq!(runs(&id), 0);

    let id = unique("lenient");
    send(&client, "/lenient", None, &json!({ "id": id }).to_string())
        .await
        .assert_status(201);
    assert_eq!(runs(&id), 1);
}

async fn a_route_ttl_overrides_the_app_ttl(backend: Backend) {
    let clock = Arc::new(ManualClock::new());
    let client = app_on(backend, routes![short, long, longer], |_| {})
        .with_clock(clock.clone())
        .build();
    let (short_id, long_id) = (unique("short"), unique("long"));
    let longer_id = unique("longer");
    let short_body = json!({ "id": short_id }).to_string();
    let long_body = json!({ "id": long_id }).to_string();
    let longer_body = json!({ "id": longer_id }).to_string();
    send(&client, "/short", Some("k"), &short_body).await;
    send(&client, "/long", Some("k"), &long_body).await;
    send(&client, "/longer", Some("k"), &longer_body).await;

    clock.advance(Duration::from_secs(2 * 3600 - 1));
    let short_retry = send(&client, "/short", Some("k"), &short_body).await;
    assert_eq!(short_retry.header("x-idempotent-replayed"), Some("true"));

    clock.advance(Duration::from_secs(2));
    let short_retry = send(&client, "/short", Some("k"), &short_body).await;
    assert_eq!(short_retry.header("x-idempotent-replayed"), None);
    assert_eq!(short_retry.header("x-idempotent-honoured"), Some("true"));
    assert_eq!(runs(&short_id), 2, "past its 2 h TTL the record is gone");
    let long_retry = send(&client, "/long", Some("k"), &long_body).await;
    assert_eq!(long_retry.header("x-idempotent-replayed"), Some("true"));
    assert_eq!(runs(&long_id), 1, "the app's 24 h TTL still holds");

    // Past the app's 24 h, a route's longer TTL still holds, on every store.
    clock.advance(Duration::from_secs(23 * 3600));
    let long_retry = send(&client, "/long", Some("k"), &long_body).await;
    assert_eq!(long_retry.header("x-idempotent-replayed"), None);
    assert_eq!(runs(&long_id), 2, "past the app's 24 h the record is gone");
    let longer_retry = send(&client, "/longer", Some("k"), &longer_body).await;
    assert_eq!(longer_retry.header("x-idempotent-replayed"), Some("true"));
    assert_eq!(runs(&longer_id), 1, "the route's 48 h TTL holds past 24 h");

    clock.advance(Duration::from_secs(24 * 3600));
    let longer_retry = send(&client, "/longer", Some("k"), &longer_body).await;
    assert_eq!(longer_retry.header("x-idempotent-replayed"), None);
    assert_eq!(runs(&longer_id), 2, "past its 48 h the record is gone");
}

async fn json_fingerprints_ignore_volatile_fields_and_name_the_difference(backend: Backend) {
    // The dev profile, which TestApp turns into `test`: the router itself.
    let storage = backend.storage();
    let config = storage.config("");
    assert_eq!(config.profile.name(), "dev");
    let router = autumn_web::app()
        .routes(routes![transfer])
        .idempotent()
        .with_config(config)
        .into_router()
        .expect("the app launches");
    let send = |body: String| {
        let router = router.clone();
        async move {
            let request = http::Request::post("/transfers")
                .header("content-type", "application/json")
                .header("idempotency-key", "t")
                .body(axum::body::Body::from(body))
                .expect("a request");
            let response = router.oneshot(request).await.expect("infallible");
            let status = response.status();
            let replayed = response.headers().get("x-idempotent-replayed").cloned();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .expect("a body");
            (
                status,
                replayed,
                String::from_utf8_lossy(&body).into_owned(),
            )
        }
    };
    let id = unique("transfer");
    let first = format!(
        r#"{{"id":"{id}","amount":5,"to":"acct-1","client_ts":1,"meta":{{"trace_id":"a"}}}}"#
    );
    let same = format!(
        "{{ \"meta\": {{\"trace_id\": \"b\"}}, \"client_ts\": 2,\n  \"to\": \"acct-1\", \"amount\": 5.0, \"id\": \"{id}\" }}"
    );
    let other = format!(r#"{{"id":"{id}","amount":6,"to":"acct-1","client_ts":3}}"#);

    assert_eq!(send(first).await.0, StatusCode::CREATED);
    let (status, replayed, _) = send(same).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(replayed.as_ref().map(|v| v.as_bytes()), Some(&b"true"[..]));
    assert_eq!(runs(&id), 1);

    let (status, _, text) = send(other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = serde_json::from_str(&text).expect("a problem document");
    assert_eq!(problem["code"], "idempotency_key_reused");
    assert_eq!(problem["new_key_needed"], true);
    // The dev profile names the first field that differs, never a value.
    assert_eq!(problem["differs_at"], "/amount");
    assert!(!text.contains("acct-1") && !text.contains('6'), "{text}");
    assert_eq!(runs(&id), 1);
}

async fn a_production_422_says_nothing_more_than_before(backend: Backend) {
    let storage = backend.storage();
    let mut config = storage.config("[session]\nallow_memory_in_production = true\n");
    config.idempotency.allow_memory_in_production = true;
    config.profile = Profile::new("prod");
    config.security.secret_key = Some(crate::support::SECRET_KEY.to_owned());
    let client = TestApp::from_builder(autumn_web::app().routes(routes![transfer]).idempotent())
        .with_config(config)
        .build();
    let id = unique("prod");
    send(
        &client,
        "/transfers",
        Some("t"),
        &json!({ "id": id, "amount": 5 }).to_string(),
    )
    .await
    .assert_status(201);
    let reused = send(
        &client,
        "/transfers",
        Some("t"),
        &json!({ "id": id, "amount": 6 }).to_string(),
    )
    .await;
    reused.assert_status(422);
    let problem: Value = reused.json();
    assert_eq!(problem.get("differs_at"), None, "{problem}");
    assert_eq!(
        problem["detail"],
        "this Idempotency-Key was already used for a different request (method, path, content type or body differ); use a new key for a new request"
    );
}

async fn records_made_with_the_byte_fingerprint_survive_a_move_to_json(backend: Backend) {
    let storage = backend.storage();
    // The memory store lives in the app: both apps share one here, as two
    // deployments share Redis or PostgreSQL.
    let memory: Arc<dyn IdempotencyStore> =
        Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
    let app = |route: Route| {
        let builder: AppBuilder = autumn_web::app().routes(vec![route]).idempotent();
        let builder = if matches!(backend, Backend::Memory) {
            builder.with_idempotency_store(memory.clone())
        } else {
            builder
        };
        TestApp::from_builder(builder)
            .with_config(storage.config(""))
            .build()
    };
    let id = unique("upgrade");
    let body = format!(r#"{{"id":"{id}","amount":5,"client_ts":1}}"#);

    let before = app(hand_built("/v").with_idempotency(RouteIdempotency::Managed));
    send(&before, "/v", Some("u"), &body)
        .await
        .assert_status(201);

    let after = app(hand_built("/v")
        .with_idempotency(RouteIdempotency::Managed)
        .with_policy(IdempotencyPolicy::new().ignoring(["/client_ts"])));
    let retry = send(&after, "/v", Some("u"), &body).await;
    retry.assert_status(201);
    assert_eq!(retry.header("x-idempotent-replayed"), Some("true"));
    assert_eq!(runs(&id), 1);
    // The old record is compared by its bytes: any other body is another
    // request, with no field named (the old record kept none).
    let reordered = format!(r#"{{"amount":5,"id":"{id}","client_ts":1}}"#);
    let reused = send(&after, "/v", Some("u"), &reordered).await;
    reused.assert_status(422);
    assert_eq!(reused.json::<Value>().get("differs_at"), None);
    assert_eq!(runs(&id), 1);
}

async fn outcome_headers_and_the_409_members(backend: Backend) {
    let clock = Arc::new(ManualClock::new());
    let client = app_on(backend, routes![slow, long], |idempotency| {
        idempotency.expiry_header = true;
        idempotency.ttl_secs = 3600;
    })
    .with_clock(clock.clone())
    .build();

    let id = unique("expiry");
    let first = send(
        &client,
        "/long",
        Some("e"),
        &json!({ "id": id }).to_string(),
    )
    .await;
    assert_eq!(first.header("x-idempotent-honoured"), Some("true"));
    let expires = std::time::UNIX_EPOCH
        + Duration::from_millis(clock.now_millis())
        + Duration::from_secs(3600);
    assert_eq!(
        first.header("x-idempotent-expires"),
        Some(httpdate::fmt_http_date(expires).as_str())
    );
    let replay = send(
        &client,
        "/long",
        Some("e"),
        &json!({ "id": id }).to_string(),
    )
    .await;
    assert_eq!(replay.header("x-idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("x-idempotent-expires"), None);

    // A 4xx is not recorded: honoured, but no expiry.
    let bad = send(&client, "/long", Some("bad"), "not json").await;
    assert!(bad.status().is_client_error());
    assert_eq!(bad.header("x-idempotent-honoured"), Some("true"));
    assert_eq!(bad.header("x-idempotent-expires"), None);

    let id = unique("slow");
    let (started, release) = hold(&id);
    let body = json!({ "id": id }).to_string();
    let running = {
        let client = client.clone();
        let body = body.clone();
        tokio::spawn(async move { send(&client, "/slow", Some("s"), &body).await })
    };
    // The first run is in its handler, holding the key.
    started.notified().await;
    let duplicate = send(&client, "/slow", Some("s"), &body).await;
    duplicate.assert_status(409);
    assert_eq!(duplicate.header("retry-after"), Some("1"));
    let problem: Value = duplicate.json();
    assert_eq!(problem["code"], "idempotency_key_in_flight");
    assert_eq!(problem["retry_after"], 1);
    assert_eq!(problem["new_key_needed"], false);
    release.add_permits(1);
    let first = running.await.expect("the first run");
    first.assert_status(201);
    assert_eq!(runs(&id), 1);
}

async fn a_route_in_flight_ttl_overrides_the_app_one(backend: Backend) {
    let clock = Arc::new(ManualClock::new());
    let client = app_on(backend, routes![slow, slow_short_lock], |_| {})
        .with_clock(clock.clone())
        .build();
    let (short_id, long_id) = (unique("short-lock"), unique("long-lock"));
    let (short_started, short_release) = hold(&short_id);
    let (long_started, long_release) = hold(&long_id);
    let short_body = json!({ "id": short_id }).to_string();
    let long_body = json!({ "id": long_id }).to_string();
    let spawn = |path: &'static str, body: String| {
        let client = client.clone();
        tokio::spawn(async move { send(&client, path, Some("l"), &body).await })
    };
    let short_first = spawn("/slow-short-lock", short_body.clone());
    let long_first = spawn("/slow", long_body.clone());
    short_started.notified().await;
    long_started.notified().await;

    // Both runs hang (as a crashed replica's would, to the store) past the
    // route's 30 s lock but within the app's 60 s one. Their heartbeats
    // renew every third of the TTL in real time: not within this test.
    clock.advance(Duration::from_secs(31));
    send(&client, "/slow", Some("l"), &long_body)
        .await
        .assert_status(409);
    let short_second = spawn("/slow-short-lock", short_body.clone());
    short_started.notified().await;
    short_release.add_permits(2);
    long_release.add_permits(1);
    short_second
        .await
        .expect("the second run")
        .assert_status(201);
    short_first.await.expect("the first run").assert_status(201);
    long_first.await.expect("the first run").assert_status(201);
    assert_eq!(runs(&long_id), 1);
    assert_eq!(runs(&short_id), 2, "the route's lock lapsed at 30 s");
}

/// A retry that differs from the first attempt only in its query string is
/// another request under the same key (422), never a second run; one that
/// spells the path with other percent-escapes is the same request (replay);
/// the same key on another path is a key of its own.
async fn a_retry_with_another_query_or_path_spelling_never_runs_again(backend: Backend) {
    let client = app_on(backend, routes![short, item], |_| {}).build();
    let id = unique("query");
    let body = json!({ "id": id }).to_string();
    send(&client, "/items/abc", Some("q"), &body)
        .await
        .assert_status(201);

    for target in ["/items/abc?attempt=2", "/items/%61bc?cache=1"] {
        let retry = send(&client, target, Some("q"), &body).await;
        retry.assert_status(422);
        let problem: Value = retry.json();
        assert_eq!(problem["code"], "idempotency_key_reused", "{target}");
    }
    for target in ["/items/%61bc", "/items/%61%62c", "/items/ab%63"] {
        let retry = send(&client, target, Some("q"), &body).await;
        retry
            .assert_status(201)
            .assert_header("x-idempotent-replayed", "true");
    }
    assert_eq!(runs(&id), 1, "no retry ran the handler");

    let elsewhere = unique("elsewhere");
    send(
        &client,
        "/short",
        Some("q"),
        &json!({ "id": elsewhere }).to_string(),
    )
    .await
    .assert_status(201);
    assert_eq!(
        runs(&elsewhere),
        1,
        "the same key on another path is its own"
    );
}

on_every_backend!(
    a_retry_with_another_query_or_path_spelling_never_runs_again,
    a_route_in_flight_ttl_overrides_the_app_one,
    a_required_key_is_asked_for_with_the_docs_link,
    an_app_wide_requirement_applies_to_every_route_that_keeps_it,
    a_route_ttl_overrides_the_app_ttl,
    json_fingerprints_ignore_volatile_fields_and_name_the_difference,
    a_production_422_says_nothing_more_than_before,
    records_made_with_the_byte_fingerprint_survive_a_move_to_json,
    outcome_headers_and_the_409_members,
);

#[test]
fn an_invalid_route_policy_stops_the_launch_naming_the_route() {
    let error = TestApp::new()
        .routes(vec![hand_built("/p").with_policy(
            IdempotencyPolicy::new().with_in_flight_ttl(Duration::from_millis(500)),
        )])
        .idempotent()
        .try_build()
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        error.as_deref(),
        Some(
            "route `/p` (POST /p) has an invalid idempotency policy: in_flight_ttl must be at least 1s, got 500ms: a shorter TTL turns off the at-most-once guarantee"
        )
    );
    let error = TestApp::new()
        .routes(vec![
            hand_built("/p").with_policy(IdempotencyPolicy::new().ignoring(["ts"])),
        ])
        .idempotent()
        .try_build()
        .err()
        .map(|e| e.to_string());
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("route `/p`") && e.contains("must start with `/`")),
        "{error:?}"
    );
}

#[test]
fn a_required_key_without_a_layer_stops_the_launch() {
    let error = TestApp::new()
        .routes(routes![pay])
        .try_build()
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        error.as_deref(),
        Some(
            "route `pay` (POST /payments) requires an Idempotency-Key, but no idempotency layer guards it; set idempotency.enabled = true and call .idempotent() on the app, or drop the requirement"
        )
    );
}

#[test]
fn config_keys_that_cannot_work_name_themselves() {
    use autumn_web::config::AutumnConfig;
    for (toml, key) in [
        (
            "[idempotency]\nfingerprint_ignore = [\"client_ts\"]\n",
            "idempotency.fingerprint_ignore",
        ),
        (
            "[idempotency]\nfingerprint_ignore = [\"/a\"]\nfingerprint_only = [\"/b\"]\n",
            "idempotency.fingerprint_only",
        ),
        (
            "[idempotency]\ndocs_url = \"/docs\"\n",
            "idempotency.docs_url",
        ),
    ] {
        let error = AutumnConfig::from_toml_str(toml).expect_err(toml);
        assert_eq!(error.key(), Some(key), "{error}");
    }
    let config = AutumnConfig::from_toml_str(
        "[idempotency]\nrequire_key = true\nfingerprint = \"json\"\nin_flight_wait_ms = 1500\n",
    )
    .expect("valid");
    let policy = config.idempotency.policy();
    assert_eq!(policy.key, Some(KeyRequirement::Required));
    assert_eq!(policy.in_flight_wait, Some(Duration::from_millis(1500)));
    assert!(matches!(
        policy.fingerprint,
        Some(autumn_web::idempotency::FingerprintPolicy::Json { .. })
    ));
}
