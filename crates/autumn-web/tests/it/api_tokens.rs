//! API tokens through the app builder: who a bearer client is to the
//! idempotency layer. One test per sentence of the spec's "Bearer-token
//! clients" section, then the isolation cases on memory, Redis and
//! PostgreSQL (keys and tokens both on the backend under test).

use crate::support::{backend, id_of, session_cookie, with_cookie};

use std::sync::Arc;

use backend::Backend;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use autumn_web::api_token::{
    ApiTokens, MemoryApiTokenStore, RequireApiToken, RequireApiTokenLayer,
};
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient, TestResponse};
use axum::Extension;
use axum::routing::post;
use serde_json::{Value, json};

/// Every run of any handler here gets the next number: a replay answers
/// the number of the run it recorded, a second run a new one.
static RUNS: AtomicU64 = AtomicU64::new(1);

fn next_run() -> u64 {
    RUNS.fetch_add(1, Ordering::SeqCst)
}

/// Behind `RequireApiToken` (or open, with `allow_anonymous`).
#[post("/notes")]
async fn create_note(
    principal: Option<ApiPrincipal>,
    Json(note): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let caller = principal.map(|p| p.id().to_owned());
    (
        StatusCode::CREATED,
        Json(json!({"run": next_run(), "caller": caller, "note": note})),
    )
}

/// Checks the token itself, in the handler.
#[post("/checked")]
async fn checked_in_handler(
    Extension(tokens): Extension<ApiTokens>,
    headers: http::HeaderMap,
) -> Response {
    let presented = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    match tokens.authenticate(presented).await {
        Ok(principal) => (
            StatusCode::CREATED,
            Json(json!({"run": next_run(), "caller": principal.id()})),
        )
            .into_response(),
        Err(rejection) => rejection.into_response(),
    }
}

/// Signs a browser in, so its later posts carry a known session.
#[post("/login")]
async fn login(session: Session) -> AutumnResult<&'static str> {
    session.insert("user", "browser-user").await?;
    Ok("signed in")
}

/// Signs the browser's session in as the token's principal: the session is
/// rotated by a request the token's principal scopes.
#[post("/sessions")]
async fn sign_in_agent(session: Session, principal: ApiPrincipal) -> AutumnResult<Json<Value>> {
    let run = next_run();
    session.sign_in(principal.id()).await?;
    Ok(Json(json!({"run": run})))
}

/// The token store for `storage`: in its database, or in memory (tokens
/// have no Redis store).
fn tokens_on(storage: &backend::Storage) -> ApiTokens {
    #[cfg(feature = "postgres")]
    if let Some(pool) = storage.pool() {
        return ApiTokens::new(Arc::new(autumn_web::api_token::DbApiTokenStore::new(pool)));
    }
    let _ = storage;
    ApiTokens::new(Arc::new(MemoryApiTokenStore::new()))
}

/// An app on `backend` with its tokens mounted by `AppBuilder::api_tokens`
/// (browsers without a token let through), and its tokens.
fn app_on(backend: Backend) -> (TestClient, ApiTokens) {
    let mut storage = backend.storage();
    // The app outlives this function: its schema stays.
    storage.keep_schema();
    let (config, tokens) = (storage.config(""), tokens_on(&storage));
    let builder = autumn_web::app()
        .routes(routes![create_note, login, sign_in_agent])
        .api_tokens(RequireApiTokenLayer::new(tokens.clone()).allow_anonymous());
    let client = TestApp::from_builder(builder)
        .with_config(config)
        .idempotent()
        .build();
    (client, tokens)
}

/// An app whose only guarded route is `routes`, on memory.
fn app_with(builder: autumn_web::AppBuilder) -> TestClient {
    TestApp::from_builder(builder).idempotent().build()
}

fn memory_tokens() -> ApiTokens {
    ApiTokens::new(Arc::new(MemoryApiTokenStore::new()))
}

async fn token_for(tokens: &ApiTokens, principal: &str) -> String {
    tokens
        .create(principal, "test", None)
        .await
        .expect("create a token")
        .token()
        .to_owned()
}

/// Posts `note` to `path` with `key`, from a fresh client carrying `token`.
async fn post_as(
    client: &TestClient,
    path: &str,
    token: Option<&str>,
    key: &str,
    note: &str,
) -> TestResponse {
    let mut request = client
        .new_browser()
        .post(path)
        .header("idempotency-key", key)
        .json(&json!({"text": note}));
    if let Some(token) = token {
        request = request.header("authorization", &format!("Bearer {token}"));
    }
    request.send().await
}

fn run_of(response: &TestResponse) -> u64 {
    response.json::<Value>()["run"]
        .as_u64()
        .unwrap_or_else(|| panic!("no run number in {}", response.text()))
}

fn replayed(response: &TestResponse) -> bool {
    response.header("x-idempotent-replayed") == Some("true")
}

fn unique(name: &str) -> String {
    format!("{name}-{}", uuid::Uuid::new_v4().simple())
}

// --- The spec, one test per sentence ---------------------------------------

/// "Two token clients that send the same key and body therefore get their
/// own runs, and each one's retry replays its own response."
async fn two_token_clients_with_the_same_key_and_body_get_their_own_runs_and_each_retry_replays_its_own(
    backend: Backend,
) {
    let (client, tokens) = app_on(backend);
    let alice = token_for(&tokens, &unique("alice")).await;
    let bob = token_for(&tokens, &unique("bob")).await;
    let key = unique("key");

    let alice_first = post_as(&client, "/notes", Some(&alice), &key, "same").await;
    let bob_first = post_as(&client, "/notes", Some(&bob), &key, "same").await;
    alice_first.assert_status(201);
    bob_first.assert_status(201);
    assert!(!replayed(&bob_first), "bob's first request ran");
    assert_ne!(run_of(&alice_first), run_of(&bob_first), "two runs");

    let alice_retry = post_as(&client, "/notes", Some(&alice), &key, "same").await;
    let bob_retry = post_as(&client, "/notes", Some(&bob), &key, "same").await;
    assert!(replayed(&alice_retry) && replayed(&bob_retry));
    assert_eq!(alice_retry.json::<Value>(), alice_first.json::<Value>());
    assert_eq!(bob_retry.json::<Value>(), bob_first.json::<Value>());
}

/// "Mount RequireApiToken with AppBuilder::layer when you can. The key then
/// carries the principal, not the token, so an agent that refreshes its
/// token between attempts still replays."
async fn mounted_with_app_layer_an_agent_that_refreshes_its_token_between_attempts_still_replays(
    backend: Backend,
) {
    let (client, tokens) = app_on(backend);
    assert_a_refreshed_token_replays(&client, &tokens).await;
}

/// The same sentence, the layer given itself to `AppBuilder::layer` (the way
/// before `api_tokens`): registered just the same.
#[tokio::test]
async fn given_itself_to_app_layer_an_agent_that_refreshes_its_token_still_replays() {
    let tokens = memory_tokens();
    let client = app_with(
        autumn_web::app()
            .routes(routes![create_note])
            .layer(RequireApiToken::new(tokens.clone())),
    );
    assert_a_refreshed_token_replays(&client, &tokens).await;
}

/// Wrapped, the token layer is not registered: the refreshed token is
/// another caller, and its retry runs again (this keeps the two tests above
/// able to fail).
#[tokio::test]
async fn wrapped_the_token_layer_is_not_registered_so_a_refreshed_token_runs_again() {
    let tokens = memory_tokens();
    let client = app_with(
        autumn_web::app()
            .routes(routes![create_note])
            .layer(tower::ServiceBuilder::new().layer(RequireApiToken::new(tokens.clone()))),
    );
    let agent = unique("agent");
    let old = token_for(&tokens, &agent).await;
    let first = post_as(&client, "/notes", Some(&old), "refresh-key", "n").await;
    first.assert_status(201);
    let refreshed = token_for(&tokens, &agent).await;
    let retry = post_as(&client, "/notes", Some(&refreshed), "refresh-key", "n").await;
    retry.assert_status(201);
    assert!(!replayed(&retry), "a new caller to the cache runs again");
    assert_ne!(run_of(&retry), run_of(&first));
}

/// A token client's first post, its token revoked and replaced, then the
/// retry with the new token: replayed, not run again.
async fn assert_a_refreshed_token_replays(client: &TestClient, tokens: &ApiTokens) {
    let agent = unique("agent");
    let old = token_for(tokens, &agent).await;
    let key = unique("key");
    let first = post_as(client, "/notes", Some(&old), &key, "refresh").await;
    first.assert_status(201);

    let created = tokens.list(&agent).await.expect("list");
    tokens.revoke(&created[0].prefix).await.expect("revoke");
    let refreshed = token_for(tokens, &agent).await;
    post_as(client, "/notes", Some(&old), &key, "refresh")
        .await
        .assert_status(401);

    let retry = post_as(client, "/notes", Some(&refreshed), &key, "refresh").await;
    retry.assert_status(201);
    assert!(replayed(&retry), "the refreshed token's retry replays");
    assert_eq!(run_of(&retry), run_of(&first));
}

/// "RequireApiToken registered this way no longer forces the app into
/// fail-closed replay; a retry replays instead of answering 409."
#[tokio::test]
async fn registered_with_app_layer_a_retry_replays_instead_of_answering_409() {
    let tokens = memory_tokens();
    let client = app_with(
        autumn_web::app()
            .routes(routes![create_note])
            .layer(RequireApiToken::new(tokens.clone())),
    );
    let token = token_for(&tokens, &unique("agent")).await;
    let first = post_as(&client, "/notes", Some(&token), "k", "n").await;
    let retry = post_as(&client, "/notes", Some(&token), "k", "n").await;
    first.assert_status(201);
    retry.assert_status(201);
    assert!(replayed(&retry));
    assert_eq!(run_of(&retry), run_of(&first));
}

/// "A route that checks the token in the handler is scoped by the raw
/// header. A retry with a different header — a refreshed token, or none —
/// is a new caller to the cache and runs the handler again."
#[tokio::test]
async fn a_handler_checked_token_is_scoped_by_the_raw_header_so_a_refreshed_token_or_none_runs_again()
 {
    let tokens = memory_tokens();
    let client = app_with(
        autumn_web::app()
            .routes(routes![checked_in_handler])
            .layer(Extension(tokens.clone())),
    );
    let agent = unique("agent");
    let old = token_for(&tokens, &agent).await;
    let refreshed = token_for(&tokens, &agent).await;

    let first = post_as(&client, "/checked", Some(&old), "k", "n").await;
    first.assert_status(201);
    let same_header = post_as(&client, "/checked", Some(&old), "k", "n").await;
    assert!(replayed(&same_header), "the same header replays");
    assert_eq!(run_of(&same_header), run_of(&first));

    let other_header = post_as(&client, "/checked", Some(&refreshed), "k", "n").await;
    other_header.assert_status(201);
    assert!(
        !replayed(&other_header),
        "a refreshed token is a new caller"
    );
    assert_ne!(run_of(&other_header), run_of(&first), "and runs again");

    let no_header = post_as(&client, "/checked", None, "k", "n").await;
    no_header.assert_status(401);
    assert!(!replayed(&no_header), "no header is a new caller too");
}

/// Asserts that behind `client`'s wrapped `RequireApiToken` a first run is
/// recorded and authenticated, and a retry answers 409.
async fn assert_fails_closed(client: &TestClient, tokens: &ApiTokens, path: &str) {
    post_as(client, path, None, "k", "n")
        .await
        .assert_status(401);
    let token = token_for(tokens, &unique("agent")).await;
    let first = post_as(client, path, Some(&token), "k", "n").await;
    first.assert_status(201);
    assert!(
        first.json::<Value>()["caller"].is_string(),
        "it still authenticates: {}",
        first.text()
    );
    let retry = post_as(client, path, Some(&token), "k", "n").await;
    retry.assert_status(409);
    assert_eq!(
        retry.json::<Value>()["code"],
        "idempotency_replay_unavailable"
    );
    assert_eq!(
        retry.header("content-type"),
        Some("application/problem+json")
    );
}

/// "Wrapping RequireApiToken in a ServiceBuilder stack ... still fails
/// closed with 409 on a cache hit, as any opaque layer does."
#[tokio::test]
async fn wrapped_in_a_service_builder_stack_a_cache_hit_still_fails_closed_with_409() {
    let tokens = memory_tokens();
    let stack = tower::ServiceBuilder::new()
        .layer(Extension("a layer before it"))
        .layer(RequireApiToken::new(tokens.clone()));
    let client = app_with(autumn_web::app().routes(routes![create_note]).layer(stack));
    assert_fails_closed(&client, &tokens, "/notes").await;
}

/// "... or mounting it on a .scoped(...) group ... still fails closed with
/// 409 on a cache hit."
#[tokio::test]
async fn mounted_on_a_scoped_group_a_cache_hit_still_fails_closed_with_409() {
    let tokens = memory_tokens();
    let group = routes![create_note]
        .into_iter()
        .map(|route| route.layer(RequireApiToken::new(tokens.clone())))
        .collect();
    let client = app_with(autumn_web::app().scoped("/api", group));
    assert_fails_closed(&client, &tokens, "/api/notes").await;
}

/// "... or a merged router, still fails closed with 409 on a cache hit."
#[tokio::test]
async fn mounted_in_a_merged_router_a_cache_hit_still_fails_closed_with_409() {
    let tokens = memory_tokens();
    let router = axum::Router::new()
        .route("/raw/notes", post(create_note_raw))
        .layer(RequireApiToken::new(tokens.clone()));
    let client = app_with(autumn_web::app().merge(router));
    assert_fails_closed(&client, &tokens, "/raw/notes").await;
}

async fn create_note_raw(
    principal: ApiPrincipal,
    Json(note): Json<Value>,
) -> (StatusCode, Json<Value>) {
    (
        StatusCode::CREATED,
        Json(json!({"run": next_run(), "caller": principal.id(), "note": note})),
    )
}

// --- Refusals ---------------------------------------------------------------

#[tokio::test]
async fn missing_bad_expired_and_revoked_tokens_get_401_problems_with_a_bearer_challenge() {
    let clock = Arc::new(autumn_web::clock::ManualClock::new());
    let tokens = memory_tokens().with_clock(clock.clone());
    let client = app_with(
        autumn_web::app()
            .routes(routes![create_note])
            .layer(RequireApiToken::new(tokens.clone())),
    );
    let missing = post_as(&client, "/notes", None, "k", "n").await;
    missing.assert_status(401);
    missing.assert_header("www-authenticate", "Bearer");
    assert_eq!(missing.json::<Value>()["code"], "api_token_missing");

    let expiring = tokens
        .create("agent", "short", Some(Duration::from_secs(60)))
        .await
        .expect("create");
    let revoked = tokens.create("agent", "gone", None).await.expect("create");
    assert!(tokens.revoke(revoked.id()).await.expect("revoke"));
    post_as(&client, "/notes", Some(expiring.token()), "k1", "n")
        .await
        .assert_status(201);
    clock.advance(Duration::from_secs(60));

    let garbage = "atk_not-a-token".to_owned();
    let mut forged = expiring.token().to_owned();
    forged.pop();
    forged.push(if expiring.token().ends_with('0') {
        '1'
    } else {
        '0'
    });
    for (what, token) in [
        ("garbage", garbage.as_str()),
        ("forged secret", forged.as_str()),
        ("expired", expiring.token()),
        ("revoked", revoked.token()),
    ] {
        let refused = post_as(&client, "/notes", Some(token), "k2", "n").await;
        assert_eq!(refused.status(), 401, "{what}");
        refused.assert_header("www-authenticate", "Bearer error=\"invalid_token\"");
        assert_eq!(
            refused.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(
            refused.json::<Value>()["code"],
            "api_token_invalid",
            "{what}"
        );
    }
}

// --- Isolation on every backend ---------------------------------------------

/// A session's record is never replayed to a bearer client, nor the
/// reverse: the same key and body from each runs once for each.
async fn a_sessions_record_is_never_replayed_to_a_bearer_client_nor_the_reverse(backend: Backend) {
    let (client, tokens) = app_on(backend);
    let browser = client.new_browser();
    browser.post("/login").send().await.assert_status(200);
    let token = token_for(&tokens, &unique("agent")).await;
    let from_browser = |key: String| {
        browser
            .post("/notes")
            .header("idempotency-key", &key)
            .json(&json!({"text": "shared"}))
            .send()
    };

    // The session first, then the bearer client.
    let key = unique("session-first");
    let session_run = from_browser(key.clone()).await;
    session_run.assert_status(201);
    assert!(session_run.json::<Value>()["caller"].is_null());
    let bearer_run = post_as(&client, "/notes", Some(&token), &key, "shared").await;
    bearer_run.assert_status(201);
    assert!(
        !replayed(&bearer_run),
        "the session's record is not the bearer's"
    );
    assert_ne!(run_of(&bearer_run), run_of(&session_run));

    // The bearer client first, then the session.
    let key = unique("bearer-first");
    let bearer_run = post_as(&client, "/notes", Some(&token), &key, "shared").await;
    let session_run = from_browser(key.clone()).await;
    assert!(
        !replayed(&session_run),
        "the bearer's record is not the session's"
    );
    assert_ne!(run_of(&bearer_run), run_of(&session_run));

    // Each still replays its own.
    let session_retry = from_browser(key.clone()).await;
    let bearer_retry = post_as(&client, "/notes", Some(&token), &key, "shared").await;
    assert!(replayed(&session_retry) && replayed(&bearer_retry));
    assert_eq!(run_of(&session_retry), run_of(&session_run));
    assert_eq!(run_of(&bearer_retry), run_of(&bearer_run));
}

/// A keyed request of a token client that rotates its session: the retry
/// carries the new cookie and the principal (its token refreshed), the
/// guard locked and recorded under that scope, so it replays; so does a
/// retry with the old cookie.
async fn a_keyed_sign_in_by_a_token_client_replays_to_the_cookie_it_set_and_to_the_old_one(
    backend: Backend,
) {
    let (client, tokens) = app_on(backend);
    let agent = unique("agent");
    let before = id_of(&session_cookie(&client.post("/login").send().await).expect("a session"));
    let key = unique("key");
    let attempt = |cookie: String, token: String| {
        let (client, key) = (&client, &key);
        async move {
            with_cookie(client, "POST", "/sessions", &cookie)
                .header("authorization", &format!("Bearer {token}"))
                .header("idempotency-key", key)
                .send()
                .await
        }
    };
    let first = attempt(before.clone(), token_for(&tokens, &agent).await).await;
    first.assert_status(200);
    let after = id_of(&session_cookie(&first).expect("the sign-in sets the cookie"));
    assert_ne!(after, before, "the session was rotated");
    for cookie in [after, before] {
        let retry = attempt(cookie, token_for(&tokens, &agent).await).await;
        retry.assert_status(200);
        assert!(replayed(&retry), "{}", retry.text());
        assert_eq!(run_of(&retry), run_of(&first));
    }
}

on_every_backend!(
    a_keyed_sign_in_by_a_token_client_replays_to_the_cookie_it_set_and_to_the_old_one,
    two_token_clients_with_the_same_key_and_body_get_their_own_runs_and_each_retry_replays_its_own,
    mounted_with_app_layer_an_agent_that_refreshes_its_token_between_attempts_still_replays,
    a_sessions_record_is_never_replayed_to_a_bearer_client_nor_the_reverse,
);
