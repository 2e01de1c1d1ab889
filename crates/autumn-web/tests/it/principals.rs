//! An app that authenticates callers itself (here with signed JWTs) names
//! the stable principal with `AppBuilder::scope_by`: a client that refreshes
//! its access token between two attempts gets the first one's answer, a
//! refused or uncheckable token runs nothing, and two principals never
//! share a record. Each case runs on every backend.

use crate::support::{backend, id_of, session_cookie, token_in, with_cookie};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use autumn_web::prelude::*;
use autumn_web::principal::{Principal, PrincipalError, PrincipalFuture, PrincipalResolver};
use autumn_web::test::{TestApp, TestClient, TestResponse};
use backend::{Backend, Storage};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};

const SECRET: &[u8] = b"the identity provider's signing secret, for tests";

/// Transfers per (principal, reference): tests run in parallel.
static TRANSFERS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn transfers(principal: &str, reference: &str) -> usize {
    TRANSFERS
        .lock()
        .expect("transfers")
        .get(&format!("{principal}/{reference}"))
        .copied()
        .unwrap_or(0)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Claims {
    sub: String,
    iat: u64,
    exp: u64,
}

#[derive(serde::Deserialize)]
struct Transfer {
    reference: String,
}

#[post("/transfers")]
async fn transfer(principal: Principal, Json(transfer): Json<Transfer>) -> (StatusCode, String) {
    let mut transfers = TRANSFERS.lock().expect("transfers");
    let count = transfers
        .entry(format!("{}/{}", principal.id(), transfer.reference))
        .or_default();
    *count += 1;
    (
        StatusCode::CREATED,
        format!(
            "transfer {} #{count} for {}",
            transfer.reference,
            principal.id()
        ),
    )
}

/// Checks the bearer JWT's signature and expiry; the subject is who asks.
struct Jwts {
    key: DecodingKey,
    issuer_down: Arc<AtomicBool>,
}

impl PrincipalResolver for Jwts {
    fn resolve<'a>(&'a self, parts: &'a autumn_web::principal::Parts) -> PrincipalFuture<'a> {
        Box::pin(async move {
            if self.issuer_down.load(Ordering::SeqCst) {
                return Err(PrincipalError::unavailable(
                    "the key set could not be fetched",
                ));
            }
            let Some(header) = parts.headers.get(http::header::AUTHORIZATION) else {
                return Ok(None);
            };
            let token = header
                .to_str()
                .ok()
                .and_then(|value| value.strip_prefix("Bearer "))
                .ok_or_else(|| PrincipalError::unauthorized("not a bearer token"))?;
            let checked = jsonwebtoken::decode::<Claims>(
                token,
                &self.key,
                &Validation::new(Algorithm::HS256),
            )
            .map_err(|error| PrincipalError::unauthorized(error.to_string()))?;
            Ok(Some(checked.claims.sub))
        })
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// A token for `sub`, issued `ago` seconds ago and expiring `valid` seconds
/// after issue.
fn token(sub: &str, ago: u64, valid: u64) -> String {
    let iat = now() - ago;
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &Claims {
            sub: sub.to_owned(),
            iat,
            exp: iat + valid,
        },
        &EncodingKey::from_secret(SECRET),
    )
    .expect("a signed token")
}

/// The app on `backend`, and the storage it keeps its records in (hold it
/// while the app runs).
fn app(backend: Backend, issuer_down: Arc<AtomicBool>) -> (TestClient, Storage) {
    let storage = backend.storage();
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![transfer])
            .scope_by(Jwts {
                key: DecodingKey::from_secret(SECRET),
                issuer_down,
            })
            .idempotent(),
    )
    .with_config(storage.config(""))
    .build();
    (client, storage)
}

async fn send(client: &TestClient, bearer: &str, key: &str, reference: &str) -> TestResponse {
    client
        .post("/transfers")
        .header("authorization", &format!("Bearer {bearer}"))
        .header("idempotency-key", key)
        .json(&serde_json::json!({ "reference": reference }))
        .send()
        .await
}

fn code(response: &TestResponse) -> String {
    let body: serde_json::Value = serde_json::from_str(&response.text()).expect("problem+json");
    body["code"].as_str().unwrap_or_default().to_owned()
}

on_every_backend!(
    a_token_refreshed_between_attempts_replays_the_first_answer,
    a_refused_or_uncheckable_token_runs_nothing,
    a_form_posted_again_with_a_refreshed_token_replays_and_another_principal_gets_none_of_it,
    a_keyed_sign_in_by_a_principal_replays_to_the_cookie_it_set_and_to_the_old_one,
);

async fn a_token_refreshed_between_attempts_replays_the_first_answer(backend: Backend) {
    let (client, _storage) = app(backend, Arc::default());
    let (alice, bob) = (format!("alice-{backend:?}"), format!("bob-{backend:?}"));
    let first = send(&client, &token(&alice, 600, 900), "t-1", "rent").await;
    first.assert_status(201);
    // The client refreshed its access token before retrying.
    let refreshed = token(&alice, 0, 900);
    let retry = send(&client, &refreshed, "t-1", "rent").await;
    retry
        .assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(retry.text(), first.text());
    assert_eq!(transfers(&alice, "rent"), 1);

    // Another principal with the same key and body has a run of its own.
    let other = send(&client, &token(&bob, 0, 900), "t-1", "rent").await;
    other.assert_status(201);
    assert_eq!(other.text(), format!("transfer rent #1 for {bob}"));
    assert_eq!(transfers(&bob, "rent"), 1);
}

async fn a_refused_or_uncheckable_token_runs_nothing(backend: Backend) {
    let issuer_down = Arc::new(AtomicBool::new(false));
    let (client, _storage) = app(backend, issuer_down.clone());
    let carol = format!("carol-{backend:?}");
    let expired = send(&client, &token(&carol, 3600, 60), "t-2", "gift").await;
    expired.assert_status(401);
    assert_eq!(code(&expired), "principal_unauthorized");
    assert!(
        !expired.text().contains("ExpiredSignature"),
        "the reason is not sent"
    );
    let forged = send(&client, "eyJhbGciOiJub25lIn0.e30.", "t-2", "gift").await;
    forged.assert_status(401);

    issuer_down.store(true, Ordering::SeqCst);
    let unavailable = send(&client, &token(&carol, 0, 900), "t-2", "gift").await;
    unavailable.assert_status(503);
    assert_eq!(code(&unavailable), "principal_unavailable");
    unavailable.assert_header("retry-after", "1");
    assert_eq!(transfers(&carol, "gift"), 0);

    // Once the issuer is back, the same key runs once.
    issuer_down.store(false, Ordering::SeqCst);
    for _ in 0..2 {
        send(&client, &token(&carol, 0, 900), "t-2", "gift")
            .await
            .assert_status(201);
    }
    assert_eq!(transfers(&carol, "gift"), 1);
}

#[derive(serde::Deserialize)]
struct Gift {
    reference: String,
}

/// A form behind the app's own sign-in (no Autumn session): the submit
/// token's binding is the request's scope, which names the principal.
#[get("/gifts/new")]
async fn new_gift(
    token: autumn_web::security::SubmitToken,
    field: autumn_web::security::SubmitFormField,
) -> Markup {
    html! { form method="POST" action="/gifts" { (autumn_web::security::submit_token_field(&token, &field)) } }
}

#[post("/gifts")]
async fn give(principal: Principal, Form(gift): Form<Gift>) -> String {
    let mut transfers = TRANSFERS.lock().expect("transfers");
    let count = transfers
        .entry(format!("{}/{}", principal.id(), gift.reference))
        .or_default();
    *count += 1;
    format!("gift {} #{count} from {}", gift.reference, principal.id())
}

async fn a_form_posted_again_with_a_refreshed_token_replays_and_another_principal_gets_none_of_it(
    backend: Backend,
) {
    let storage = backend.storage();
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![new_gift, give])
            .with_config(storage.config("[session]\nenabled = false\n"))
            .scope_by(Jwts {
                key: DecodingKey::from_secret(SECRET),
                issuer_down: Arc::default(),
            }),
    )
    .build();
    let (dora, erin) = (format!("dora-{backend:?}"), format!("erin-{backend:?}"));
    let submit_token = token_in(&client.get("/gifts/new").send().await.text());
    let post = |bearer: String| {
        let client = &client;
        let submit_token = submit_token.clone();
        async move {
            client
                .post("/gifts")
                .header("authorization", &format!("Bearer {bearer}"))
                .form(&[
                    ("_submit_token", submit_token.as_str()),
                    ("reference", "vase"),
                ])
                .send()
                .await
        }
    };
    let first = post(token(&dora, 600, 900)).await;
    first.assert_status(200);
    // The access token was refreshed before the browser posted again.
    let again = post(token(&dora, 0, 900)).await;
    again
        .assert_status(200)
        .assert_header("x-submit-token-replayed", "true");
    assert_eq!(again.text(), first.text());
    assert_eq!(transfers(&dora, "vase"), 1);

    // Another principal posting the same token gets none of dora's answer.
    let other = post(token(&erin, 0, 900)).await;
    assert_eq!(other.status(), 409, "{}", other.text());
    assert_eq!(code(&other), "submit_token_other_session");
    assert!(!other.text().contains(&dora));
    assert_eq!(transfers(&erin, "vase"), 0);
}

#[post("/visits")]
async fn visit(session: Session) -> AutumnResult<&'static str> {
    session.insert("visited", true).await?;
    Ok("welcome")
}

/// A sign-in behind the app's own bearer tokens that also keeps a session:
/// the session is rotated, and signed in as the principal.
#[post("/sign-in")]
async fn sign_in(session: Session, principal: Principal) -> AutumnResult<String> {
    let count = {
        let mut transfers = TRANSFERS.lock().expect("transfers");
        let count = transfers
            .entry(format!("{}/sign-in", principal.id()))
            .or_default();
        *count += 1;
        *count
    };
    session.sign_in(principal.id()).await?;
    Ok(format!("{} signed in #{count}", principal.id()))
}

/// A keyed request scoped by a principal whose handler rotates the session:
/// the retry carries the new cookie and the principal (not the raw token),
/// and the guard locked and recorded under that scope, so it replays.
async fn a_keyed_sign_in_by_a_principal_replays_to_the_cookie_it_set_and_to_the_old_one(
    backend: Backend,
) {
    let storage = backend.storage();
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![visit, sign_in])
            .scope_by(Jwts {
                key: DecodingKey::from_secret(SECRET),
                issuer_down: Arc::default(),
            })
            .idempotent(),
    )
    .with_config(storage.config(""))
    .build();
    let fay = format!("fay-{backend:?}");
    let before = id_of(&session_cookie(&client.post("/visits").send().await).expect("a session"));
    let attempt = |cookie: String, bearer: String| {
        let client = &client;
        async move {
            with_cookie(client, "POST", "/sign-in", &cookie)
                .header("authorization", &format!("Bearer {bearer}"))
                .header("idempotency-key", "sign-in-1")
                .send()
                .await
        }
    };
    let first = attempt(before.clone(), token(&fay, 600, 900)).await;
    first.assert_status(200);
    let after = id_of(&session_cookie(&first).expect("the sign-in sets the cookie"));
    assert_ne!(after, before, "the session was rotated");
    // The access token was refreshed before each retry.
    for cookie in [after, before] {
        let retry = attempt(cookie, token(&fay, 0, 900)).await;
        retry
            .assert_status(200)
            .assert_header("x-idempotent-replayed", "true");
        assert_eq!(retry.text(), first.text());
    }
    assert_eq!(transfers(&fay, "sign-in"), 1, "the handler ran once");
}
