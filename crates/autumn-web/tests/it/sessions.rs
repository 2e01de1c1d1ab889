//! Sessions through the app builder: lazy, rotated on sign-in, never adopted
//! from a forged cookie, saved before a guard records, and binding submit
//! tokens to the session that consumed them.

use crate::support::{backend, id_of, logs, redis_support, session_cookie, token_in, with_cookie};

use std::collections::HashMap;

use backend::Backend;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use autumn_web::clock::ManualClock;
use autumn_web::config::{AutumnConfig, Profile};
use autumn_web::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use autumn_web::session::{
    DEFAULT_SECURE_COOKIE_NAME, MemorySessionStore, SaveOutcome, SessionFuture, SessionId,
    SessionRecord, SessionStore, SessionStoreError,
};
use autumn_web::test::{TestApp, TestClient, TestResponse};

/// Sign-ins per user name (tests run in parallel: each uses its own names).
static LOGINS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);
/// Notes created per text.
static NOTES: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn count(map: &Mutex<HashMap<String, usize>>, key: &str) -> usize {
    map.lock().expect("counts").get(key).copied().unwrap_or(0)
}

fn bump(map: &Mutex<HashMap<String, usize>>, key: &str) {
    *map.lock()
        .expect("counts")
        .entry(key.to_owned())
        .or_default() += 1;
}

#[derive(serde::Deserialize)]
struct Login {
    user: String,
}

#[derive(serde::Deserialize)]
struct Note {
    text: String,
}

#[get("/plain")]
async fn plain() -> &'static str {
    "no session here"
}

#[get("/peek")]
async fn peek(_session: Session) -> &'static str {
    "took the session, never used it"
}

#[get("/me")]
async fn me(session: Session) -> AutumnResult<String> {
    let user: Option<String> = session.get("user").await?;
    Ok(user.unwrap_or_else(|| "anonymous".to_owned()))
}

#[post("/visit")]
async fn visit(session: Session) -> AutumnResult<String> {
    let visits: u64 = session.get("visits").await?.unwrap_or(0) + 1;
    session.insert("visits", visits).await?;
    Ok(format!("visit {visits}"))
}

#[post("/login")]
async fn login(session: Session, Form(login): Form<Login>) -> AutumnResult<Redirect> {
    bump(&LOGINS, &login.user);
    session.cycle_id().await?;
    session.insert("user", &login.user).await?;
    Ok(Redirect::to("/me"))
}

/// Who the session says the visitor is, on a `POST` a guard may record.
#[post("/whoami")]
async fn whoami(session: Session) -> AutumnResult<String> {
    let user: Option<String> = session.get("user").await?;
    Ok(user.unwrap_or_else(|| "anonymous".to_owned()))
}

#[post("/logout")]
async fn logout(session: Session) -> AutumnResult<Redirect> {
    session.flush().await?;
    Ok(Redirect::to("/me"))
}

#[get("/form")]
async fn form(token: SubmitToken, field: SubmitFormField) -> Markup {
    html! {
        form method="POST" action="/notes" {
            (submit_token_field(&token, &field))
            input type="text" name="text";
        }
    }
}

#[post("/notes")]
async fn create_note(Form(note): Form<Note>) -> Redirect {
    bump(&NOTES, &note.text);
    Redirect::to("/me")
}

/// A session store that counts what it is asked and can be told to fail.
struct Watched {
    inner: Arc<dyn SessionStore>,
    loads: AtomicUsize,
    saves: AtomicUsize,
    fail_saves: AtomicBool,
    fail_loads: AtomicBool,
    /// While set, a save signals `save_started` and waits for `release`.
    hold_saves: AtomicBool,
    save_started: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl Watched {
    fn new() -> Arc<Self> {
        Self::over(Arc::new(MemorySessionStore::new(1_000)))
    }

    fn over(inner: Arc<dyn SessionStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            loads: AtomicUsize::new(0),
            saves: AtomicUsize::new(0),
            fail_saves: AtomicBool::new(false),
            fail_loads: AtomicBool::new(false),
            hold_saves: AtomicBool::new(false),
            save_started: tokio::sync::Notify::new(),
            release: tokio::sync::Notify::new(),
        })
    }

    fn calls(&self) -> usize {
        self.loads.load(Ordering::SeqCst) + self.saves.load(Ordering::SeqCst)
    }
}

impl SessionStore for Watched {
    fn load<'a>(
        &'a self,
        id: &'a SessionId,
        now_millis: u64,
    ) -> SessionFuture<'a, Option<SessionRecord>> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        if self.fail_loads.load(Ordering::SeqCst) {
            return Box::pin(async { Err(SessionStoreError::new("down for the test")) });
        }
        self.inner.load(id, now_millis)
    }

    fn save<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, ()> {
        self.saves.fetch_add(1, Ordering::SeqCst);
        if self.fail_saves.load(Ordering::SeqCst) {
            return Box::pin(async { Err(SessionStoreError::new("down for the test")) });
        }
        if self.hold_saves.load(Ordering::SeqCst) {
            return Box::pin(async move {
                self.save_started.notify_one();
                self.release.notified().await;
                self.inner.save(id, record, now_millis).await
            });
        }
        self.inner.save(id, record, now_millis)
    }

    /// Counted, failed and held as a save; forwarded, so the inner store's
    /// own check (a script, a statement) is the one that runs.
    fn save_unless_retired<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, SaveOutcome> {
        self.saves.fetch_add(1, Ordering::SeqCst);
        if self.fail_saves.load(Ordering::SeqCst) {
            return Box::pin(async { Err(SessionStoreError::new("down for the test")) });
        }
        if self.hold_saves.load(Ordering::SeqCst) {
            return Box::pin(async move {
                self.save_started.notify_one();
                self.release.notified().await;
                self.inner.save_unless_retired(id, record, now_millis).await
            });
        }
        self.inner.save_unless_retired(id, record, now_millis)
    }

    fn delete<'a>(&'a self, id: &'a SessionId) -> SessionFuture<'a, ()> {
        self.inner.delete(id)
    }
}

/// An app on `backend` (keys, tokens and sessions all there, the session
/// store watched), and its watched session store.
fn app_on(backend: Backend) -> (TestClient, Arc<Watched>) {
    let mut storage = backend.storage();
    // The app outlives this function: its schema stays.
    storage.keep_schema();
    let store = Watched::over(storage.session_store());
    let client = TestApp::from_builder(builder(store.clone()))
        .with_config(storage.config(""))
        .idempotent()
        .build();
    (client, store)
}

on_every_backend!(
    a_guests_keyed_post_that_creates_a_session_replays_with_or_without_its_cookie,
    a_keyed_sign_in_replays_to_the_cookie_it_set_and_to_the_old_one,
    a_keyed_sign_in_retried_without_a_cookie_is_another_caller,
    signing_in_rotates_the_id_and_the_old_one_grants_nothing,
    a_retry_after_a_lost_sign_in_gets_the_final_set_cookie_without_a_second_run,
    a_failed_save_answers_500_and_retries_get_409_never_a_second_run,
    a_submit_token_answers_only_the_session_that_consumed_it,
);

fn builder(store: Arc<Watched>) -> autumn_web::AppBuilder {
    autumn_web::app()
        .routes(routes![
            plain,
            peek,
            me,
            visit,
            login,
            whoami,
            logout,
            form,
            create_note
        ])
        .with_session_store(store)
}

fn app(store: Arc<Watched>) -> TestClient {
    TestApp::from_builder(builder(store)).idempotent().build()
}

#[tokio::test]
async fn a_request_that_never_uses_its_session_costs_no_store_call_and_sets_no_cookie() {
    let store = Watched::new();
    let client = app(store.clone());
    for path in ["/plain", "/peek"] {
        let response = client.get(path).send().await;
        response.assert_ok();
        assert_eq!(session_cookie(&response), None, "{path}");
    }
    // With a cookie, and on a mutating request with a key but no cookie.
    with_cookie(
        &client,
        "GET",
        "/peek",
        "0123456789abcdef0123456789abcdef01234567",
    )
    .send()
    .await
    .assert_ok();
    client
        .post("/logout")
        .header("idempotency-key", "no-cookie")
        .send()
        .await;
    assert_eq!(store.calls(), 0, "no store round trip without a session");
}

#[tokio::test]
async fn values_live_server_side_behind_a_random_id_with_safe_cookie_defaults() {
    let store = Watched::new();
    let client = app(store.clone());
    let first = client.post("/visit").send().await;
    assert_eq!(first.text(), "visit 1");
    let cookie = session_cookie(&first).expect("a session cookie");
    let id = id_of(&cookie);
    assert_eq!(id.len(), 40, "160 random bits in hex: {cookie}");
    assert!(id.bytes().all(|byte| byte.is_ascii_hexdigit()));
    // `__Host-` needs `Secure`, `Path=/` and no `Domain`, or the browser
    // drops the cookie: the whole header, attribute by attribute.
    assert_eq!(
        cookie,
        format!(
            "__Host-autumn_session={id}; Path=/; HttpOnly; SameSite=Lax; Max-Age=1209600; Secure"
        ),
        "Secure under the __Host- prefix by default, without a Domain"
    );
    assert!(!cookie.contains("visits"), "the value stays on the server");
    assert_eq!(client.post("/visit").send().await.text(), "visit 2");
}

#[tokio::test]
async fn the_cookie_is_secure_under_the_host_prefix_in_every_profile() {
    for profile in ["dev", "test", "staging", "prod"] {
        let mut config = AutumnConfig::default();
        config.profile = Profile::new(profile);
        config.security.secret_key = Some(crate::support::SECRET_KEY.to_owned());
        config.idempotency.allow_memory_in_production = true;
        assert_eq!(
            config.session.effective_cookie_name(),
            DEFAULT_SECURE_COOKIE_NAME
        );
        let client = TestApp::from_builder(builder(Watched::new()))
            .with_config(config)
            .build();
        let cookie = session_cookie(&client.post("/visit").send().await).expect("cookie");
        assert!(cookie.ends_with("; Secure"), "{profile}: {cookie}");
        assert!(!cookie.contains("Domain"), "{profile}: {cookie}");
    }
}

#[tokio::test]
async fn secure_false_sends_the_plain_name_without_secure() {
    let config = AutumnConfig::from_toml_str("[session]\nsecure = false\n").expect("config");
    assert_eq!(config.session.effective_cookie_name(), "autumn_session");
    let client = TestApp::from_builder(builder(Watched::new()))
        .with_config(config)
        .build();
    let response = client.post("/visit").send().await;
    let cookie = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with("autumn_session="))
        .map(str::to_owned)
        .expect("the cookie under its configured name");
    assert!(!cookie.contains("Secure"), "{cookie}");
    assert_eq!(client.post("/visit").send().await.text(), "visit 2");
}

#[tokio::test]
async fn a_planted_session_cookie_never_replaces_the_signed_in_one() {
    let (_logging, logs) = logs::capture();
    let client = app(Watched::new());
    let victim = client.new_browser();
    victim
        .post("/login")
        .form(&[("user", "victim-vic")])
        .send()
        .await
        .assert_status(303);
    let real = victim
        .cookie(DEFAULT_SECURE_COOKIE_NAME)
        .expect("signed in");
    // The attacker signs in on their own, then plants that session's id
    // (from a sibling subdomain, say, with a longer Path so it comes
    // first in the Cookie header).
    let attacker = client.new_browser();
    attacker
        .post("/login")
        .form(&[("user", "attacker-al")])
        .send()
        .await
        .assert_status(303);
    let planted = attacker
        .cookie(DEFAULT_SECURE_COOKIE_NAME)
        .expect("signed in");
    // The attacker's guarded request, recorded under their session.
    let key = "planted-key";
    let recorded = attacker
        .post("/whoami")
        .header("idempotency-key", key)
        .send()
        .await;
    assert_eq!(recorded.text(), "attacker-al");

    let send = |method: &str, path: &str, cookie: String| {
        let request = match method {
            "GET" => client.new_browser().get(path),
            _ => client
                .new_browser()
                .post(path)
                .header("idempotency-key", key),
        };
        request.header("cookie", &cookie)
    };
    // Under the plain name, beside the __Host- one: not the session cookie.
    let plain_first = format!("autumn_session={planted}; {DEFAULT_SECURE_COOKIE_NAME}={real}");
    assert_eq!(
        send("GET", "/me", plain_first.clone()).send().await.text(),
        "victim-vic"
    );
    let guarded = send("POST", "/whoami", plain_first).send().await;
    assert_eq!(guarded.header("x-idempotent-replayed"), None);
    assert_eq!(
        guarded.text(),
        "victim-vic",
        "scoped by the victim's session"
    );

    // Under the very name: two values, and neither is trusted.
    let same_name =
        format!("{DEFAULT_SECURE_COOKIE_NAME}={planted}; {DEFAULT_SECURE_COOKIE_NAME}={real}");
    let read = send("GET", "/me", same_name.clone()).send().await;
    assert_eq!(read.text(), "anonymous", "neither session is taken");
    let guarded = send("POST", "/whoami", same_name).send().await;
    assert_eq!(
        guarded.header("x-idempotent-replayed"),
        None,
        "not the attacker's recorded answer"
    );
    assert_eq!(guarded.text(), "anonymous");
    // A handler that stores something starts a new session, as for an
    // unknown id: neither the planted nor the real id is adopted.
    let fresh = client
        .new_browser()
        .post("/visit")
        .header(
            "cookie",
            &format!("{DEFAULT_SECURE_COOKIE_NAME}={planted}; {DEFAULT_SECURE_COOKIE_NAME}={real}"),
        )
        .send()
        .await;
    assert_eq!(fresh.text(), "visit 1");
    let issued = id_of(&session_cookie(&fresh).expect("a new session"));
    assert_ne!(issued, planted);
    assert_ne!(issued, real);
    // Logged at warn, once per such request, and without the values.
    let warnings = logs.lines_with("two different session cookies");
    assert_eq!(warnings.len(), 3, "{}", logs.text());
    for line in &warnings {
        assert!(line.contains("WARN"), "{line}");
        assert!(
            !line.contains(&planted) && !line.contains(&real),
            "no session id in the log: {line}"
        );
    }
    // Both sessions are intact for their own browsers.
    assert_eq!(victim.get("/me").send().await.text(), "victim-vic");
    assert_eq!(attacker.get("/me").send().await.text(), "attacker-al");
}

async fn signing_in_rotates_the_id_and_the_old_one_grants_nothing(backend: Backend) {
    let (client, _) = app_on(backend);
    let before = id_of(&session_cookie(&client.post("/visit").send().await).expect("cookie"));
    let login = client
        .post("/login")
        .form(&[("user", "rotating-rita")])
        .send()
        .await;
    login.assert_status(303);
    let _ = backend;
    let after = id_of(&session_cookie(&login).expect("a new cookie"));
    assert_ne!(before, after, "the id is rotated on sign-in");
    assert_eq!(client.get("/me").send().await.text(), "rotating-rita");
    let old = with_cookie(&client, "GET", "/me", &before).send().await;
    assert_eq!(old.text(), "anonymous", "the pre-login id is retired");
    // The values moved with the session: the visit count survived.
    assert_eq!(client.post("/visit").send().await.text(), "visit 2");
}

#[tokio::test]
async fn signing_out_forgets_the_session_and_removes_the_cookie() {
    let client = app(Watched::new());
    client
        .post("/login")
        .form(&[("user", "leaving-lou")])
        .send()
        .await;
    let id = client
        .cookie(DEFAULT_SECURE_COOKIE_NAME)
        .expect("signed in");
    let out = client.post("/logout").send().await;
    out.assert_status(303);
    let removal = session_cookie(&out).expect("a removal cookie");
    assert!(removal.contains("Max-Age=0"), "{removal}");
    assert_eq!(client.cookie(DEFAULT_SECURE_COOKIE_NAME), None);
    assert_eq!(client.get("/me").send().await.text(), "anonymous");
    let replayed_cookie = with_cookie(&client, "GET", "/me", &id).send().await;
    assert_eq!(replayed_cookie.text(), "anonymous", "the old id is dead");
}

#[tokio::test]
async fn a_cookie_the_store_does_not_know_is_never_adopted() {
    let store = Watched::new();
    let client = app(store.clone());
    let forged = "attacker-chosen-session-id";
    let response = with_cookie(&client, "POST", "/visit", forged).send().await;
    assert_eq!(response.text(), "visit 1");
    let issued = id_of(&session_cookie(&response).expect("a fresh cookie"));
    assert_ne!(
        issued, forged,
        "a session is saved only under an id Autumn made"
    );
    assert_eq!(
        with_cookie(&client, "POST", "/visit", forged)
            .send()
            .await
            .text(),
        "visit 1",
        "the forged id still names nothing"
    );
    assert_eq!(
        with_cookie(&client, "POST", "/visit", &issued)
            .send()
            .await
            .text(),
        "visit 2"
    );
}

#[tokio::test]
async fn expiry_slides_while_the_visitor_keeps_coming_back() {
    let clock = Arc::new(ManualClock::new());
    let mut config = AutumnConfig::default();
    config.session.ttl_secs = 100;
    let client = TestApp::from_builder(builder(Watched::new()))
        .with_config(config)
        .with_clock(clock.clone())
        .build();
    client
        .post("/login")
        .form(&[("user", "sliding-sam")])
        .send()
        .await;
    for _ in 0..3 {
        clock.advance(Duration::from_secs(60));
        let seen = client.get("/me").send().await;
        assert_eq!(
            seen.text(),
            "sliding-sam",
            "still signed in after 60 s more"
        );
        assert!(
            session_cookie(&seen).is_some(),
            "the cookie's Max-Age slides too"
        );
    }
    clock.advance(Duration::from_secs(101));
    assert_eq!(
        client.get("/me").send().await.text(),
        "anonymous",
        "expired"
    );
}

async fn a_retry_after_a_lost_sign_in_gets_the_final_set_cookie_without_a_second_run(
    backend: Backend,
) {
    let (client, _) = app_on(backend);
    let user = format!("lost-lena-{backend:?}");
    let anonymous = id_of(&session_cookie(&client.post("/visit").send().await).expect("cookie"));
    let sign_in = |browser: TestClient| {
        browser
            .post("/login")
            .header(
                "cookie",
                &format!("{DEFAULT_SECURE_COOKIE_NAME}={anonymous}"),
            )
            .header("idempotency-key", "login-1")
            .form(&[("user", user.as_str())])
            .send()
    };
    let first = sign_in(client.new_browser()).await;
    first.assert_status(303);
    let cookie = session_cookie(&first).expect("the sign-in sets the cookie");
    // The response never arrived: the browser still holds the old cookie.
    let retry = sign_in(client.new_browser()).await;
    retry.assert_status(303);
    retry.assert_header("x-idempotent-replayed", "true");
    assert_eq!(
        session_cookie(&retry),
        Some(cookie.clone()),
        "the recorded Set-Cookie"
    );
    assert_eq!(count(&LOGINS, &user), 1, "the handler ran once");
    let me = with_cookie(&client, "GET", "/me", &id_of(&cookie))
        .send()
        .await;
    assert_eq!(me.text(), user, "the replayed cookie signs the browser in");
}

/// A guest's keyed post whose handler creates the session: the response
/// sets a cookie the request did not carry, and the retry finds the first
/// run's record whether the client kept the new cookie or never got it.
async fn a_guests_keyed_post_that_creates_a_session_replays_with_or_without_its_cookie(
    backend: Backend,
) {
    let (client, _) = app_on(backend);
    let key = format!("guest-{backend:?}");
    let first = client
        .new_browser()
        .post("/visit")
        .header("idempotency-key", &key)
        .send()
        .await;
    assert_eq!(first.text(), "visit 1");
    let id = id_of(&session_cookie(&first).expect("the visit creates the session"));
    for (retry, carried) in [
        (
            with_cookie(&client, "POST", "/visit", &id)
                .header("idempotency-key", &key)
                .send()
                .await,
            "the cookie the answer set",
        ),
        (
            client
                .new_browser()
                .post("/visit")
                .header("idempotency-key", &key)
                .send()
                .await,
            "no cookie",
        ),
    ] {
        retry.assert_header("x-idempotent-replayed", "true");
        assert_eq!(retry.text(), "visit 1", "a retry with {carried} ran again");
    }
    let me = with_cookie(&client, "POST", "/visit", &id).send().await;
    assert_eq!(me.text(), "visit 2", "the session holds the one visit");
}

/// A keyed sign-in rotates the session id: the retry replays whether the
/// browser kept the new cookie or still holds the old one.
async fn a_keyed_sign_in_replays_to_the_cookie_it_set_and_to_the_old_one(backend: Backend) {
    let (client, _) = app_on(backend);
    let user = format!("moved-mia-{backend:?}");
    let anonymous = id_of(&session_cookie(&client.post("/visit").send().await).expect("cookie"));
    let sign_in = |id: String| {
        with_cookie(&client, "POST", "/login", &id)
            .header("idempotency-key", "login-moved")
            .form(&[("user", user.as_str())])
            .send()
    };
    let first = sign_in(anonymous.clone()).await;
    first.assert_status(303);
    let signed_in = id_of(&session_cookie(&first).expect("the sign-in sets the cookie"));
    assert_ne!(signed_in, anonymous, "the id was rotated");
    for id in [signed_in.clone(), anonymous] {
        let retry = sign_in(id).await;
        retry.assert_status(303);
        retry.assert_header("x-idempotent-replayed", "true");
    }
    assert_eq!(count(&LOGINS, &user), 1, "the handler ran once");
    let me = with_cookie(&client, "GET", "/me", &signed_in).send().await;
    assert_eq!(me.text(), user);
}

/// The guide's limit of the above: a retry with no cookie after a first
/// attempt that sent one is scoped like every client without a cookie, and
/// the signed-in answer is not recorded there, so it is another caller.
async fn a_keyed_sign_in_retried_without_a_cookie_is_another_caller(backend: Backend) {
    let (client, _) = app_on(backend);
    let user = format!("cookieless-cai-{backend:?}");
    let anonymous = id_of(&session_cookie(&client.post("/visit").send().await).expect("cookie"));
    let first = with_cookie(&client, "POST", "/login", &anonymous)
        .header("idempotency-key", "login-cookieless")
        .form(&[("user", user.as_str())])
        .send()
        .await;
    first.assert_status(303);
    let signed_in = id_of(&session_cookie(&first).expect("the sign-in sets the cookie"));
    let retry = client
        .new_browser()
        .post("/login")
        .header("idempotency-key", "login-cookieless")
        .form(&[("user", user.as_str())])
        .send()
        .await;
    retry.assert_status(303);
    assert_eq!(retry.header("x-idempotent-replayed"), None, "not a replay");
    let other = id_of(&session_cookie(&retry).expect("a session of its own"));
    assert_ne!(other, signed_in, "never the first attempt's session");
    assert_eq!(count(&LOGINS, &user), 2, "a new caller's run");
}

async fn a_failed_save_answers_500_and_retries_get_409_never_a_second_run(backend: Backend) {
    let (client, store) = app_on(backend);
    let user = format!("unsaved-uma-{backend:?}");
    store.fail_saves.store(true, Ordering::SeqCst);
    let sign_in = || {
        client
            .post("/login")
            .header("idempotency-key", "login-broken")
            .form(&[("user", user.as_str())])
            .send()
    };
    let first = sign_in().await;
    first.assert_status(500);
    assert!(
        first.text().contains("response_not_final"),
        "{}",
        first.text()
    );
    assert_eq!(
        session_cookie(&first),
        None,
        "no cookie for a session that was not saved"
    );
    store.fail_saves.store(false, Ordering::SeqCst);
    let retry = sign_in().await;
    retry.assert_status(409);
    assert_eq!(count(&LOGINS, &user), 1, "never run twice");
}

#[tokio::test]
async fn a_session_store_outage_on_a_guarded_request_runs_nothing() {
    let store = Watched::new();
    let client = app(store.clone());
    client.post("/visit").send().await;
    store.fail_loads.store(true, Ordering::SeqCst);
    let response = client
        .post("/login")
        .header("idempotency-key", "login-outage")
        .form(&[("user", "outage-olga")])
        .send()
        .await;
    response.assert_status(503);
    response.assert_header("retry-after", "1");
    assert!(response.text().contains("session_store_unavailable"));
    assert_eq!(count(&LOGINS, "outage-olga"), 0);
}

#[tokio::test]
async fn a_session_store_outage_met_with_question_mark_answers_503_with_code_and_retry_after() {
    let store = Watched::new();
    let client = app(store.clone());
    client.post("/visit").send().await.assert_status(200);
    store.fail_loads.store(true, Ordering::SeqCst);
    let response = client
        .get("/me")
        .header("accept", "application/json")
        .send()
        .await;
    response.assert_status(503);
    response.assert_header("retry-after", "1");
    let text = response.text();
    assert!(
        text.contains(r#""code":"session_store_unavailable""#),
        "{text}"
    );
    assert!(
        !text.contains("down for the test"),
        "the store's text is never sent: {text}"
    );
}

async fn a_submit_token_answers_only_the_session_that_consumed_it(backend: Backend) {
    let (client, store) = app_on(backend);
    let text = format!("bound-note-{backend:?}");
    let page = client.get("/form").send().await;
    let cookie = session_cookie(&page).expect("a visitor without a session gets one");
    assert_eq!(store.calls(), 0, "minting a token stores nothing");
    let token = token_in(&page.text());
    let post = |browser: &TestClient| {
        browser
            .post("/notes")
            .form(&[("_submit_token", token.as_str()), ("text", text.as_str())])
            .send()
    };
    post(&client).await.assert_status(303);

    let elsewhere = client.new_browser();
    elsewhere.get("/form").send().await; // a session of its own
    let stolen = post(&elsewhere).await;
    stolen.assert_status(409);
    assert!(stolen.text().contains("submit_token_other_session"));
    let cookieless = post(&client.new_browser()).await;
    cookieless.assert_status(409);

    let again = post(&client).await;
    again.assert_status(303);
    again.assert_header("x-submit-token-replayed", "true");
    assert_eq!(count(&NOTES, &text), 1);
    assert!(cookie.contains("HttpOnly"));
}

#[tokio::test]
async fn an_idempotency_layer_the_app_adds_is_scoped_by_session_like_autumns() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let raw = axum::Router::new().route(
        "/raw",
        axum::routing::post(move || {
            let counted = counted.clone();
            async move { format!("run {}", counted.fetch_add(1, Ordering::SeqCst) + 1) }
        }),
    );
    let own = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(60)));
    let client = TestApp::from_builder(
        builder(Watched::new())
            .merge(raw)
            .layer(IdempotencyLayer::new(own)),
    )
    .build();
    let alice = client.new_browser();
    let bob = client.new_browser();
    for browser in [&alice, &bob] {
        browser.post("/visit").send().await; // each gets a session
    }
    let send = |browser: &TestClient| {
        browser
            .post("/raw")
            .header("idempotency-key", "same")
            .send()
    };
    assert_eq!(send(&alice).await.text(), "run 1");
    assert_eq!(
        send(&bob).await.text(),
        "run 2",
        "another session, another run"
    );
    assert_eq!(
        send(&alice).await.text(),
        "run 1",
        "alice's retry replays hers"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn while_the_session_is_saved_the_key_stays_locked_past_the_in_flight_ttl() {
    let clock = Arc::new(ManualClock::new());
    let store = Watched::new();
    let client = TestApp::from_builder(builder(store.clone()))
        .with_clock(clock.clone())
        .idempotent()
        .build();
    // Each attempt from a browser that never got the cookie.
    let sign_in = || {
        client
            .new_browser()
            .post("/login")
            .header("idempotency-key", "login-slow-save")
            .form(&[("user", "slow-sid")])
            .send()
    };
    store.hold_saves.store(true, Ordering::SeqCst);
    let first = tokio::spawn(sign_in());
    store.save_started.notified().await;
    // The save hangs (or the process died in it) longer than a lock lasts
    // unrenewed: the key is held for the record's lifetime instead.
    clock.advance(Duration::from_secs(61));
    let during = sign_in().await;
    during.assert_status(409);
    assert_eq!(count(&LOGINS, "slow-sid"), 1, "no second run");

    store.hold_saves.store(false, Ordering::SeqCst);
    store.release.notify_one();
    let first = first.await.expect("first sign-in");
    first.assert_status(303);
    let cookie = session_cookie(&first).expect("cookie");
    let after = sign_in().await;
    after.assert_header("x-idempotent-replayed", "true");
    assert_eq!(session_cookie(&after), Some(cookie));
    assert_eq!(count(&LOGINS, "slow-sid"), 1);
}

#[tokio::test]
async fn a_sign_in_form_resent_after_its_answer_arrived_gets_the_replay() {
    let client = app(Watched::new());
    let page = client.get("/form").send().await;
    let token = token_in(&page.text());
    let sign_in = || {
        client
            .post("/login")
            .form(&[
                ("_submit_token", token.as_str()),
                ("user", "resending-rosa"),
            ])
            .send()
    };
    let first = sign_in().await;
    first.assert_status(303);
    assert!(session_cookie(&first).is_some(), "signed in on a new id");
    // The browser got the answer (and the rotated cookie), then resends
    // the form: Back and submit, or a reload that resends the post.
    let resent = sign_in().await;
    resent.assert_status(303);
    resent.assert_header("x-submit-token-replayed", "true");
    assert_eq!(count(&LOGINS, "resending-rosa"), 1);
    // Still not for anyone else.
    let elsewhere = client.new_browser();
    elsewhere.get("/form").send().await;
    let stolen = elsewhere
        .post("/login")
        .form(&[
            ("_submit_token", token.as_str()),
            ("user", "resending-rosa"),
        ])
        .send()
        .await;
    stolen.assert_status(409);
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_follow_the_idempotency_backend_into_redis_under_a_hash() {
    let url = redis_support::require_redis();
    let prefix = redis_support::unique_prefix();
    let config = AutumnConfig::from_toml_str(&format!(
        "[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\n"
    ))
    .expect("config");
    let build = || {
        TestApp::from_builder(autumn_web::app().routes(routes![visit]))
            .with_config(config.clone())
            .build()
    };
    let first = build().post("/visit").send().await;
    let id = id_of(&session_cookie(&first).expect("cookie"));
    let keys = redis_support::keys_under(&url, &format!("{prefix}:session")).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        !keys[0].contains(&id),
        "stored under a hash of the id: {keys:?}"
    );
    // Another replica on the same Redis knows the session.
    let other = with_cookie(&build(), "POST", "/visit", &id).send().await;
    assert_eq!(other.text(), "visit 2");
}

/// A sign-out against a request already running: the slow handlers here
/// load the session, wait at their gate while the test signs the browser
/// out, then save the session (changed, slid, or rotated). The sign-out
/// must stand: the old cookie signs nobody in afterwards, and the slow
/// answer carries no cookie.
mod signed_out_meanwhile {
    use super::*;

    /// Where a slow handler waits: it signals `loaded` once it read the
    /// session, and goes on at `release`.
    #[derive(Default)]
    struct Gate {
        loaded: tokio::sync::Notify,
        release: tokio::sync::Notify,
    }

    /// A gate per signed-in user name (the cases run in parallel, each
    /// under names of its own).
    static GATES: LazyLock<Mutex<HashMap<String, Arc<Gate>>>> = LazyLock::new(Mutex::default);

    fn gate(user: &str) -> Arc<Gate> {
        GATES
            .lock()
            .expect("gates")
            .entry(user.to_owned())
            .or_default()
            .clone()
    }

    /// Reads who is signed in, then waits at their gate.
    async fn signed_in_then_wait(session: &Session) -> AutumnResult<String> {
        let user: String = session.get("user").await?.unwrap_or_default();
        let gate = gate(&user);
        gate.loaded.notify_one();
        gate.release.notified().await;
        Ok(user)
    }

    #[post("/profile")]
    async fn slow_profile(session: Session) -> AutumnResult<String> {
        let user = signed_in_then_wait(&session).await?;
        session.insert("theme", "dark").await?;
        Ok(format!("saved for {user}"))
    }

    #[post("/elevate")]
    async fn slow_elevate(session: Session) -> AutumnResult<String> {
        let user = signed_in_then_wait(&session).await?;
        session.cycle_id().await?;
        session.insert("elevated", true).await?;
        Ok(format!("elevated {user}"))
    }

    #[get("/slow-me")]
    async fn slow_read(session: Session) -> AutumnResult<String> {
        signed_in_then_wait(&session).await
    }

    /// An app on `backend`'s own session store, with `[session]` settings
    /// `session` and time from `clock`; keep the storage while it runs.
    fn slow_app(
        backend: Backend,
        session: &str,
        clock: Arc<ManualClock>,
    ) -> (TestClient, backend::Storage) {
        let storage = backend.storage();
        let client = TestApp::from_builder(autumn_web::app().routes(routes![
            me,
            login,
            logout,
            slow_profile,
            slow_elevate,
            slow_read
        ]))
        .with_config(storage.config(session))
        .with_clock(clock)
        .idempotent()
        .build();
        (client, storage)
    }

    /// Signs `user` in; the session id the browser got.
    async fn sign_in(client: &TestClient, user: &str) -> String {
        client
            .post("/login")
            .form(&[("user", user)])
            .send()
            .await
            .assert_status(303);
        client
            .cookie(DEFAULT_SECURE_COOKIE_NAME)
            .expect("signed in")
    }

    /// Runs `slow` (a request with the session `id`) up to its gate, signs
    /// `id` out meanwhile, lets `slow` finish and returns its answer.
    async fn across_a_sign_out(
        client: &TestClient,
        user: &str,
        id: &str,
        slow: autumn_web::test::TestRequest,
    ) -> TestResponse {
        let gate = gate(user);
        let running = tokio::spawn(slow.send());
        gate.loaded.notified().await;
        let out = with_cookie(client, "POST", "/logout", id).send().await;
        out.assert_status(303);
        assert!(
            session_cookie(&out).is_some_and(|cookie| cookie.contains("Max-Age=0")),
            "the sign-out removes the cookie"
        );
        gate.release.notify_one();
        running.await.expect("the slow request")
    }

    /// The reported case: a profile post that finished after the sign-out
    /// wrote the session back, and the old cookie was signed in again.
    async fn a_change_saved_after_a_sign_out_does_not_sign_the_old_cookie_back_in(
        backend: Backend,
    ) {
        let (client, _storage) = slow_app(backend, "", Arc::new(ManualClock::new()));
        let user = format!("profile-pia-{backend:?}");
        let id = sign_in(&client, &user).await;
        let slow = with_cookie(&client, "POST", "/profile", &id);
        let answer = across_a_sign_out(&client, &user, &id, slow).await;
        answer.assert_status(200);
        assert_eq!(answer.text(), format!("saved for {user}"));
        assert_eq!(
            session_cookie(&answer),
            None,
            "no cookie naming the retired id"
        );
        let me = with_cookie(&client, "GET", "/me", &id).send().await;
        assert_eq!(me.text(), "anonymous", "the old cookie is signed out");
    }

    /// A read whose expiry was due to slide when it saved: the slide writes
    /// nothing over the retired id either.
    async fn a_slid_expiry_saved_after_a_sign_out_does_not_sign_the_old_cookie_back_in(
        backend: Backend,
    ) {
        let clock = Arc::new(ManualClock::new());
        let (client, _storage) = slow_app(backend, "[session]\nttl_secs = 100\n", clock.clone());
        let user = format!("sliding-sue-{backend:?}");
        let id = sign_in(&client, &user).await;
        // Past a tenth of the lifetime: the read slides the expiry.
        clock.advance(Duration::from_secs(20));
        let slow = with_cookie(&client, "GET", "/slow-me", &id);
        let answer = across_a_sign_out(&client, &user, &id, slow).await;
        answer.assert_status(200);
        assert_eq!(
            answer.text(),
            user,
            "it read the session before the sign-out"
        );
        assert_eq!(session_cookie(&answer), None, "no slid cookie");
        let me = with_cookie(&client, "GET", "/me", &id).send().await;
        assert_eq!(me.text(), "anonymous", "the old cookie is signed out");
    }

    /// A keyed request that rotates the id after the sign-out: its values
    /// do not move to a new id, and its recorded answer, replayed, sets no
    /// cookie either.
    async fn a_rotation_after_a_sign_out_moves_nothing_to_a_new_id(backend: Backend) {
        let (client, _storage) = slow_app(backend, "", Arc::new(ManualClock::new()));
        let user = format!("elevated-eli-{backend:?}");
        let id = sign_in(&client, &user).await;
        let elevate =
            || with_cookie(&client, "POST", "/elevate", &id).header("idempotency-key", "elevate-1");
        let answer = across_a_sign_out(&client, &user, &id, elevate()).await;
        answer.assert_status(200);
        assert_eq!(answer.text(), format!("elevated {user}"));
        assert_eq!(session_cookie(&answer), None, "no cookie for a new id");
        let me = with_cookie(&client, "GET", "/me", &id).send().await;
        assert_eq!(me.text(), "anonymous", "the old cookie is signed out");
        let retry = elevate().send().await;
        retry.assert_header("x-idempotent-replayed", "true");
        assert_eq!(session_cookie(&retry), None, "the replay sets none either");
    }

    on_every_backend!(
        a_change_saved_after_a_sign_out_does_not_sign_the_old_cookie_back_in,
        a_slid_expiry_saved_after_a_sign_out_does_not_sign_the_old_cookie_back_in,
        a_rotation_after_a_sign_out_moves_nothing_to_a_new_id,
    );
}
