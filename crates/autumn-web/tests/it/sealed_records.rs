//! Secrets at rest: a recorded response's session cookie (and its body, when
//! asked) is sealed with `[security] secret_key` before any store keeps it,
//! so a dump of Redis or of `autumn_idempotency_keys` holds no cookie that
//! works; a replica with the key (or with it among `old_secret_keys`)
//! replays it, and one without answers 409, never a second run.

use crate::support::backend;

use backend::{Backend, Storage};

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use autumn_web::session::DEFAULT_SECURE_COOKIE_NAME;
use autumn_web::test::{TestApp, TestClient, TestResponse};

/// Sign-ins per test, named by the request's `x-test` header (the tests
/// run in parallel).
static SIGN_INS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn bump(headers: &HeaderMap) {
    let test = headers
        .get("x-test")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    *SIGN_INS
        .lock()
        .expect("not poisoned")
        .entry(test)
        .or_default() += 1;
}

fn sign_ins(test: &str) -> usize {
    SIGN_INS
        .lock()
        .expect("not poisoned")
        .get(test)
        .copied()
        .unwrap_or_default()
}

const KEY_A: &str = "sealed-records-test-key-a-0123456789abcdef";
const KEY_B: &str = "sealed-records-test-key-b-0123456789abcdef";
/// What the body says, to look for in a dump.
const CARD: &str = "card ending 4242 for ada@example.com";

#[post("/sign-in")]
async fn sign_in(headers: HeaderMap, session: Session) -> AutumnResult<(StatusCode, String)> {
    bump(&headers);
    session.cycle_id().await?;
    session.insert("user", "ada").await?;
    Ok((StatusCode::CREATED, format!("welcome ada, {CARD}")))
}

#[get("/sign-in-form")]
async fn sign_in_form(token: SubmitToken, field: SubmitFormField) -> Markup {
    html! {
        form method="POST" action="/sign-in-form" {
            (submit_token_field(&token, &field))
        }
    }
}

#[post("/sign-in-form")]
async fn sign_in_by_form(headers: HeaderMap, session: Session) -> AutumnResult<Redirect> {
    bump(&headers);
    session.cycle_id().await?;
    session.insert("user", "ada").await?;
    Ok(Redirect::to("/me"))
}

#[get("/me")]
async fn me(session: Session) -> AutumnResult<String> {
    let user: Option<String> = session.get("user").await?;
    Ok(user.unwrap_or_else(|| "anonymous".to_owned()))
}

/// A replica on `storage` whose `[security]` section is `security`.
fn replica(storage: &Storage, security: &str) -> TestClient {
    TestApp::from_builder(
        autumn_web::app()
            .routes(routes![sign_in, sign_in_form, sign_in_by_form, me])
            .idempotent(),
    )
    .with_config(storage.config(&format!("[security]\n{security}\n")))
    .build()
}

fn with_key(key: &str) -> String {
    format!("secret_key = \"{key}\"")
}

async fn signed_in(client: &TestClient, idempotency_key: &str) -> TestResponse {
    client
        .new_browser()
        .post("/sign-in")
        .header("idempotency-key", idempotency_key)
        .header("x-test", idempotency_key)
        .send()
        .await
}

fn session_id(response: &TestResponse) -> String {
    let cookie = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|value| value.strip_prefix(&format!("{DEFAULT_SECURE_COOKIE_NAME}=")))
        .expect("the sign-in sets the session cookie");
    cookie.split(';').next().unwrap_or_default().to_owned()
}

fn holds(dump: &[u8], needle: &str) -> bool {
    dump.windows(needle.len()).any(|w| w == needle.as_bytes())
}

on_every_backend!(a_dump_of_the_store_holds_no_usable_session_cookie);

async fn a_dump_of_the_store_holds_no_usable_session_cookie(backend: Backend) {
    let storage = backend.storage();
    let first_replica = replica(&storage, &with_key(KEY_A));
    let key = format!("sealed-{backend:?}");
    let first = signed_in(&first_replica, &key).await;
    first.assert_status(201);
    let id = session_id(&first);

    if let Some(dump) = storage.dump().await {
        assert!(!holds(&dump, &id), "the session id is in the store's dump");
        assert!(
            holds(&dump, "autumn-sealed:v1:"),
            "the cookie is kept sealed"
        );
        // Bodies are kept as they are unless asked for.
        assert!(holds(&dump, CARD));
    }

    // Another replica with the same key replays the cookie as it was sent
    // (on memory, where nothing is shared, the same one).
    let second_replica = match backend {
        Backend::Memory => first_replica.new_browser(),
        _ => replica(&storage, &with_key(KEY_A)),
    };
    let retry = signed_in(&second_replica, &key).await;
    retry
        .assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(session_id(&retry), id);
    assert_eq!(retry.text(), first.text());
    let me = second_replica
        .new_browser()
        .get("/me")
        .header("cookie", &format!("{DEFAULT_SECURE_COOKIE_NAME}={id}"))
        .send()
        .await;
    assert_eq!(me.text(), "ada", "the replayed cookie signs the browser in");
    assert_eq!(sign_ins(&key), 1);
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_sealed_with_a_key_rotated_away_is_refused_never_run_again() {
    let storage = Backend::Redis.storage();
    let key = "rotated";
    let first = signed_in(&replica(&storage, &with_key(KEY_A)), key).await;
    first.assert_status(201);

    // A replica that never had the old key cannot open the record.
    let stranger = signed_in(&replica(&storage, &with_key(KEY_B)), key).await;
    stranger
        .assert_status(409)
        .assert_header("content-type", "application/problem+json");
    let problem: serde_json::Value = stranger.json();
    assert_eq!(problem["code"], "idempotency_record_unreadable");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("security.old_secret_keys")),
        "{problem}"
    );

    // After the rotation, the retired key still opens what it sealed.
    let rotated = replica(
        &storage,
        &format!("{}\nold_secret_keys = [\"{KEY_A}\"]", with_key(KEY_B)),
    );
    let retry = signed_in(&rotated, key).await;
    retry
        .assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(session_id(&retry), session_id(&first));
    assert_eq!(sign_ins(key), 1, "no retry ran the handler");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_form_recorded_under_another_key_is_refused_never_run_again() {
    let storage = Backend::Redis.storage();
    let first_replica = replica(&storage, &with_key(KEY_A));
    let browser = first_replica.new_browser();
    let page = browser.get("/sign-in-form").send().await.text();
    let token = crate::support::token_in(&page);
    let submitted = browser
        .post("/sign-in-form")
        .header("x-test", "form")
        .form(&[("_submit_token", token.as_str())])
        .send()
        .await;
    submitted.assert_status(303);
    let id = session_id(&submitted);
    if let Some(dump) = storage.dump().await {
        assert!(!holds(&dump, &id), "the session id is in the store's dump");
    }
    // The same browser submits again, on a replica whose key is another.
    let resubmit = |client: &TestClient| {
        client
            .new_browser()
            .post("/sign-in-form")
            .header("x-test", "form")
            .header("cookie", &format!("{DEFAULT_SECURE_COOKIE_NAME}={id}"))
            .form(&[("_submit_token", token.as_str())])
            .send()
    };
    let stranger = resubmit(&replica(&storage, &with_key(KEY_B))).await;
    stranger.assert_status(409);
    assert!(
        stranger.text().contains("submit_token_record_unreadable"),
        "{}",
        stranger.text()
    );
    let again = resubmit(&first_replica).await;
    again
        .assert_status(303)
        .assert_header("x-submit-token-replayed", "true");
    assert_eq!(session_id(&again), id);
    assert_eq!(sign_ins("form"), 1, "one run");
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_sealed_when_asked_and_replayed_whole() {
    let storage = Backend::Postgres.storage();
    let sealing = format!("{}\nencrypt_recorded_bodies = true", with_key(KEY_A));
    let first = signed_in(&replica(&storage, &sealing), "bodies").await;
    first.assert_status(201);
    let dump = storage.dump().await.expect("a database dump");
    assert!(!dump.is_empty(), "the response was recorded");
    assert!(!holds(&dump, CARD), "the body is in the store's dump");

    let retry = signed_in(&replica(&storage, &sealing), "bodies").await;
    retry
        .assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(retry.text(), format!("welcome ada, {CARD}"));
}

#[test]
fn production_without_a_secret_key_does_not_start_and_names_the_key() {
    let mut config = autumn_web::config::AutumnConfig::default();
    config.profile = autumn_web::config::Profile::new("prod");
    config.idempotency.allow_memory_in_production = true;
    config.session.allow_memory_in_production = true;
    let launched = TestApp::from_builder(autumn_web::app().routes(routes![sign_in]).idempotent())
        .with_config(config)
        .try_build();
    let error = match launched {
        Ok(_) => panic!("a production app without a secret key started"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.starts_with("security.secret_key is not set"),
        "{error}"
    );
    assert!(error.contains("AUTUMN_SECURITY__SECRET_KEY"), "{error}");
    assert!(!error.contains('\n'), "one line: {error}");
}
