//! Tenancy through the app builder: each strategy resolves the tenant, the
//! resolver's word is final, and the resolved tenant (never a raw header)
//! keeps one tenant's records from another's on every backend; a handler
//! that switches tenants is never run twice, even by a duplicate arriving
//! while the session is saved.

use crate::support::backend;

use std::collections::HashMap;

use backend::Backend;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::session::{SaveOutcome, SessionFuture, SessionId, SessionRecord, SessionStore};
use autumn_web::tenancy::TenantResolveError;
use autumn_web::test::{TestApp, TestClient, TestResponse};

/// Runs per (tenant, order text): tests run in parallel, each with its own texts.
static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn runs(tenant: &str, text: &str) -> usize {
    RUNS.lock()
        .expect("runs")
        .get(&format!("{tenant}/{text}"))
        .copied()
        .unwrap_or(0)
}

#[derive(serde::Deserialize, serde::Serialize)]
struct Order {
    text: String,
}

#[post("/orders")]
async fn place_order(tenant: Tenant, Json(order): Json<Order>) -> (StatusCode, String) {
    let mut runs = RUNS.lock().expect("runs");
    let count = runs
        .entry(format!("{}/{}", tenant.id(), order.text))
        .or_default();
    *count += 1;
    (
        StatusCode::CREATED,
        format!("{} order {} for {}", tenant.id(), *count, order.text),
    )
}

#[get("/whoami")]
async fn whoami(tenant: Tenant) -> String {
    tenant.id().to_owned()
}

#[get("/signup")]
async fn signup(tenant: Option<Tenant>) -> String {
    format!("signup, tenant {tenant:?}")
}

#[post("/login")]
async fn login(session: Session, Form(order): Form<Order>) -> AutumnResult<&'static str> {
    // `text` names the tenant to sign in to.
    Tenant::switch(&session, &order.text).await?;
    Ok("signed in")
}

#[post("/sign-in")]
async fn sign_in(session: Session, Form(user): Form<Order>) -> AutumnResult<&'static str> {
    // `text` names the user.
    session.sign_in(user.text).await?;
    Ok("signed in")
}

#[post("/sign-out")]
async fn sign_out(session: Session) -> AutumnResult<&'static str> {
    session.sign_out().await?;
    Ok("signed out")
}

#[post("/switch")]
async fn switch(tenant: Tenant, session: Session, Json(to): Json<Order>) -> AutumnResult<String> {
    {
        let mut runs = RUNS.lock().expect("runs");
        *runs
            .entry(format!("{}/switch-to-{}", tenant.id(), to.text))
            .or_default() += 1;
    }
    Tenant::switch(&session, &to.text).await?;
    Ok(format!("left {} for {}", tenant.id(), to.text))
}

async fn known(id: String) -> Result<bool, TenantResolveError> {
    match id.as_str() {
        "down" => Err(TenantResolveError::new("directory unreachable")),
        _ => Ok(id != "nobody"),
    }
}

fn builder() -> autumn_web::AppBuilder {
    autumn_web::app()
        .routes(routes![
            place_order,
            whoami,
            signup,
            login,
            sign_in,
            sign_out,
            switch
        ])
        .with_tenant_resolver(known)
}

fn app_with(tenancy: &str, extra: &str) -> TestClient {
    let config =
        AutumnConfig::from_toml_str(&format!("[tenancy]\nenabled = true\n{tenancy}\n{extra}"))
            .expect("config");
    TestApp::from_builder(builder())
        .with_config(config)
        .idempotent()
        .build()
}

fn order(client: &TestClient, path: &str, key: &str, text: &str) -> autumn_web::test::TestRequest {
    client
        .post(path)
        .header("idempotency-key", key)
        .json(&Order {
            text: text.to_owned(),
        })
}

fn problem_code(response: &TestResponse) -> String {
    let body: serde_json::Value = serde_json::from_str(&response.text()).expect("problem+json");
    body["code"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_header_strategy_resolves_the_tenant_and_refuses_a_missing_or_unknown_one() {
    let client = app_with("strategy = \"header\"", "");
    let response = client
        .get("/whoami")
        .header("x-tenant-id", "acme")
        .send()
        .await;
    response.assert_status(200);
    assert_eq!(response.text(), "acme");

    let missing = client.get("/whoami").send().await;
    missing.assert_status(400);
    missing.assert_header("content-type", "application/problem+json");
    assert_eq!(problem_code(&missing), "tenant_missing");

    let unknown = client
        .get("/whoami")
        .header("x-tenant-id", "nobody")
        .send()
        .await;
    unknown.assert_status(404);
    assert_eq!(problem_code(&unknown), "tenant_unknown");

    let malformed = client
        .get("/whoami")
        .header("x-tenant-id", "a/b")
        .send()
        .await;
    malformed.assert_status(404);

    let down = client
        .get("/whoami")
        .header("x-tenant-id", "down")
        .send()
        .await;
    down.assert_status(503);
    assert_eq!(problem_code(&down), "tenant_unavailable");

    // Nothing ran for the refused ones.
    let refused = order(&client, "/orders", "hdr-refused", "hdr-refused")
        .header("x-tenant-id", "nobody")
        .send()
        .await;
    refused.assert_status(404);
    assert_eq!(runs("nobody", "hdr-refused"), 0);
}

#[tokio::test]
async fn the_subdomain_strategy_reads_the_host_below_the_base_domain() {
    let client = app_with(
        "strategy = \"subdomain\"\nbase_domain = \"example.com\"",
        "",
    );
    let response = client
        .get("/whoami")
        .header("host", "acme.example.com")
        .send()
        .await;
    response.assert_status(200);
    assert_eq!(response.text(), "acme");
    client
        .get("/whoami")
        .header("host", "example.com")
        .send()
        .await
        .assert_status(400);
    client
        .get("/whoami")
        .header("host", "nobody.example.com")
        .send()
        .await
        .assert_status(404);
}

#[tokio::test]
async fn the_path_strategy_routes_below_the_tenant_segment() {
    let client = app_with("strategy = \"path\"", "");
    let response = client.get("/acme/whoami").send().await;
    response.assert_status(200);
    assert_eq!(response.text(), "acme");
    let created = order(&client, "/globex/orders", "path-1", "path-order")
        .send()
        .await;
    created.assert_status(201);
    assert_eq!(created.text(), "globex order 1 for path-order");
    let replayed = order(&client, "/globex/orders", "path-1", "path-order")
        .send()
        .await;
    replayed.assert_header("x-idempotent-replayed", "true");
    let other = order(&client, "/acme/orders", "path-1", "path-order")
        .send()
        .await;
    assert_eq!(other.text(), "acme order 1 for path-order");
    client.get("/nobody/whoami").send().await.assert_status(404);
    client.get("/").send().await.assert_status(400);
    // Probes are never under a tenant.
    client
        .get("/actuator/health")
        .send()
        .await
        .assert_status(200);
}

#[tokio::test]
async fn the_session_strategy_reads_the_tenant_the_app_stored() {
    let client = app_with(
        "strategy = \"session\"",
        "exempt_paths = [\"/login\", \"/signup\"]",
    );
    client.get("/whoami").send().await.assert_status(400);
    client
        .post("/login")
        .form(&[("text", "acme")])
        .send()
        .await
        .assert_status(200);
    let response = client.get("/whoami").send().await;
    response.assert_status(200);
    assert_eq!(response.text(), "acme");
}

/// The tenant is one of the session's values: signing in as the same user
/// keeps it, as another user or signing out drops it.
#[tokio::test]
async fn the_session_strategy_tenant_goes_where_the_session_values_go() {
    let client = app_with(
        "strategy = \"session\"",
        "exempt_paths = [\"/login\", \"/sign-in\", \"/sign-out\"]",
    );
    let post =
        |path: &'static str, text: &'static str| client.post(path).form(&[("text", text)]).send();
    let tenant = || async {
        let response = client.get("/whoami").send().await;
        match response.status().as_u16() {
            200 => response.text(),
            _ => problem_code(&response),
        }
    };
    post("/sign-in", "alice").await.assert_status(200);
    post("/login", "acme").await.assert_status(200);
    assert_eq!(tenant().await, "acme");
    post("/sign-in", "alice").await.assert_status(200);
    assert_eq!(tenant().await, "acme", "the same user keeps the values");
    post("/sign-in", "bob").await.assert_status(200);
    assert_eq!(tenant().await, "tenant_missing", "another user's drop");
    post("/login", "globex").await.assert_status(200);
    assert_eq!(tenant().await, "globex");
    post("/sign-out", "").await.assert_status(200);
    assert_eq!(tenant().await, "tenant_missing", "a sign-out drops it");
}

#[tokio::test]
async fn exempt_paths_and_the_actuator_need_no_tenant() {
    let client = app_with("strategy = \"header\"", "exempt_paths = [\"/signup\"]");
    let signup = client.get("/signup").send().await;
    signup.assert_status(200);
    assert_eq!(signup.text(), "signup, tenant None");
    // Exempt: even a tenant header resolves nothing there.
    let with_header = client
        .get("/signup")
        .header("x-tenant-id", "acme")
        .send()
        .await;
    assert_eq!(with_header.text(), "signup, tenant None");
    client
        .get("/actuator/health")
        .send()
        .await
        .assert_status(200);
}

#[tokio::test]
async fn a_tenant_extractor_without_tenancy_is_a_readable_500() {
    let client = TestApp::from_builder(builder()).build();
    let response = client
        .get("/whoami")
        .header("x-tenant-id", "acme")
        .send()
        .await;
    response.assert_status(500);
    assert_eq!(problem_code(&response), "tenant_not_resolved");
}

/// An app on `backend` resolving tenants by `strategy`, its sessions in
/// `sessions` (wrapped by the caller when it must watch them).
fn app_on(backend: Backend, tenancy: &str, sessions: Option<Arc<dyn SessionStore>>) -> TestClient {
    let mut storage = backend.storage();
    // The app outlives this function: its schema stays.
    storage.keep_schema();
    let config = storage.config(&format!("[tenancy]\nenabled = true\n{tenancy}"));
    let sessions = sessions.unwrap_or_else(|| storage.session_store());
    TestApp::from_builder(builder().with_session_store(sessions))
        .with_config(config)
        .idempotent()
        .build()
}

on_every_backend!(
    two_tenants_with_the_same_key_path_and_body_get_their_own_runs,
    a_forged_header_under_the_subdomain_strategy_changes_nothing,
    switching_tenants_locks_the_retry_key_before_the_session_is_saved,
);

async fn two_tenants_with_the_same_key_path_and_body_get_their_own_runs(backend: Backend) {
    let client = app_on(backend, "strategy = \"header\"", None);
    let text = format!("iso-{backend:?}");
    let send = |tenant: &'static str| {
        order(&client, "/orders", "same-key", &text)
            .header("x-tenant-id", tenant)
            .send()
    };
    let acme = send("acme").await;
    acme.assert_status(201);
    assert_eq!(acme.text(), format!("acme order 1 for {text}"));
    let globex = send("globex").await;
    globex.assert_status(201);
    assert_eq!(
        globex.text(),
        format!("globex order 1 for {text}"),
        "acme's record is never replayed to globex"
    );
    assert!(globex.headers().get("x-idempotent-replayed").is_none());

    let retry = send("acme").await;
    retry.assert_header("x-idempotent-replayed", "true");
    assert_eq!(retry.text(), format!("acme order 1 for {text}"));
    assert_eq!(runs("acme", &text), 1);
    assert_eq!(runs("globex", &text), 1);
}

async fn a_forged_header_under_the_subdomain_strategy_changes_nothing(backend: Backend) {
    let client = app_on(
        backend,
        "strategy = \"subdomain\"\nbase_domain = \"example.com\"",
        None,
    );
    let text = format!("forged-{backend:?}");
    let send = |forged: Option<&'static str>| {
        let request =
            order(&client, "/orders", "forged-key", &text).header("host", "acme.example.com");
        match forged {
            Some(tenant) => request.header("x-tenant-id", tenant),
            None => request,
        }
        .send()
    };
    let first = send(None).await;
    first.assert_status(201);
    // The header names another tenant: the host still decides, so it is a
    // retry of acme's order, replayed, not globex's first.
    let forged = send(Some("globex")).await;
    forged.assert_header("x-idempotent-replayed", "true");
    assert_eq!(forged.text(), format!("acme order 1 for {text}"));
    assert_eq!(runs("acme", &text), 1);
    assert_eq!(runs("globex", &text), 0);
}

/// A session store whose saves can be held after they are written, so a
/// request arriving meanwhile already sees the new session.
struct HeldSaves {
    inner: Arc<dyn SessionStore>,
    hold: AtomicBool,
    saved: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl SessionStore for HeldSaves {
    fn load<'a>(
        &'a self,
        id: &'a SessionId,
        now_millis: u64,
    ) -> SessionFuture<'a, Option<SessionRecord>> {
        self.inner.load(id, now_millis)
    }

    fn save<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, ()> {
        Box::pin(async move {
            self.inner.save(id, record, now_millis).await?;
            if self.hold.load(Ordering::SeqCst) {
                self.saved.notify_one();
                self.release.notified().await;
            }
            Ok(())
        })
    }

    /// Held as a save, after the inner store's own conditional write.
    fn save_unless_retired<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, SaveOutcome> {
        Box::pin(async move {
            let outcome = self
                .inner
                .save_unless_retired(id, record, now_millis)
                .await?;
            if self.hold.load(Ordering::SeqCst) {
                self.saved.notify_one();
                self.release.notified().await;
            }
            Ok(outcome)
        })
    }

    fn delete<'a>(&'a self, id: &'a SessionId) -> SessionFuture<'a, ()> {
        self.inner.delete(id)
    }
}

async fn switching_tenants_locks_the_retry_key_before_the_session_is_saved(backend: Backend) {
    let storage = backend.storage();
    let store = storage.session_store();
    let sessions = Arc::new(HeldSaves {
        inner: store,
        hold: AtomicBool::new(false),
        saved: tokio::sync::Notify::new(),
        release: tokio::sync::Notify::new(),
    });
    let client = app_on(
        backend,
        "strategy = \"session\"\nexempt_paths = [\"/login\"]",
        Some(sessions.clone()),
    );
    client
        .post("/login")
        .form(&[("text", "acme")])
        .send()
        .await
        .assert_status(200);
    let to = format!("globex-{backend:?}").to_lowercase();
    let switch = || {
        client
            .post("/switch")
            .header("idempotency-key", "switch-1")
            .json(&Order { text: to.clone() })
            .send()
    };

    sessions.hold.store(true, Ordering::SeqCst);
    let first = tokio::spawn(switch());
    sessions.saved.notified().await;
    // The session already names the new tenant: this duplicate is scoped by
    // it, and must find its key locked rather than run the switch again.
    let during = switch().await;
    during.assert_status(409);
    assert_eq!(problem_code(&during), "idempotency_key_in_flight");
    assert_eq!(runs("acme", &format!("switch-to-{to}")), 1);
    assert_eq!(
        runs(&to, &format!("switch-to-{to}")),
        0,
        "no run under the new tenant"
    );

    sessions.hold.store(false, Ordering::SeqCst);
    sessions.release.notify_one();
    let first = first.await.expect("the switch");
    first.assert_status(200);
    assert_eq!(first.text(), format!("left acme for {to}"));
    assert_eq!(client.get("/whoami").send().await.text(), to);

    let retry = switch().await;
    retry.assert_status(200);
    retry.assert_header("x-idempotent-replayed", "true");
    assert_eq!(retry.text(), format!("left acme for {to}"));
    assert_eq!(runs("acme", &format!("switch-to-{to}")), 1);
    assert_eq!(runs(&to, &format!("switch-to-{to}")), 0);
}
