//! A submit token belongs to one tenant as well as one session: posted
//! under another tenant (a header switched, or the other tenant's path), it
//! never replays the first tenant's answer, and it never runs twice. Each
//! case runs on every backend.

use crate::support::{backend, token_in};
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use autumn_web::test::{TestApp, TestClient, TestResponse};
use backend::{Backend, Storage};

/// Notes per (tenant, text): tests run in parallel, each with its texts.
static NOTES: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn notes(tenant: &str, text: &str) -> usize {
    NOTES
        .lock()
        .expect("notes")
        .get(&format!("{tenant}/{text}"))
        .copied()
        .unwrap_or(0)
}

#[derive(serde::Deserialize)]
struct Note {
    text: String,
}

#[get("/notes/new")]
async fn new_note(token: SubmitToken, field: SubmitFormField) -> Markup {
    html! {
        form method="POST" action="notes" {
            (submit_token_field(&token, &field))
        }
    }
}

#[post("/notes")]
async fn create_note(tenant: Tenant, Form(note): Form<Note>) -> String {
    let mut notes = NOTES.lock().expect("notes");
    let count = notes
        .entry(format!("{}/{}", tenant.id(), note.text))
        .or_default();
    *count += 1;
    format!("{} note {} for {}", tenant.id(), count, note.text)
}

/// The app on `backend`, and the storage it keeps its tokens and sessions
/// in (hold it while the app runs).
fn app(strategy: &str, backend: Backend) -> (TestClient, Storage) {
    let storage = backend.storage();
    let config: AutumnConfig = storage.config(&format!(
        "[tenancy]\nenabled = true\nstrategy = \"{strategy}\"\n"
    ));
    let client = TestApp::new()
        .routes(routes![new_note, create_note])
        .with_config(config)
        .build();
    (client, storage)
}

fn code(response: &TestResponse) -> String {
    let body: serde_json::Value = serde_json::from_str(&response.text()).expect("problem+json");
    body["code"].as_str().unwrap_or_default().to_owned()
}

on_every_backend!(
    a_token_posted_under_another_tenants_header_is_refused_and_runs_nothing,
    a_token_posted_to_another_tenants_path_is_refused_and_runs_nothing,
);

async fn a_token_posted_under_another_tenants_header_is_refused_and_runs_nothing(backend: Backend) {
    let (browser, _storage) = app("header", backend);
    let text = format!("header-note-{backend:?}");
    let page = browser
        .get("/notes/new")
        .header("x-tenant-id", "acme")
        .send()
        .await;
    let token = token_in(&page.text());
    let post = |tenant: &'static str| {
        browser
            .post("/notes")
            .header("x-tenant-id", tenant)
            .header("accept", "application/json")
            .form(&[("_submit_token", token.as_str()), ("text", text.as_str())])
            .send()
    };
    post("acme").await.assert_status(200);
    // The same browser (same session), the same token, another tenant.
    let elsewhere = post("globex").await;
    elsewhere.assert_status(409);
    assert_eq!(code(&elsewhere), "submit_token_other_session");
    assert_eq!(notes("globex", &text), 0);
    // Under its own tenant the resend still replays.
    let again = post("acme").await;
    again.assert_header("x-submit-token-replayed", "true");
    assert_eq!(again.text(), format!("acme note 1 for {text}"));
    assert_eq!(notes("acme", &text), 1);
}

async fn a_token_posted_to_another_tenants_path_is_refused_and_runs_nothing(backend: Backend) {
    let (browser, _storage) = app("path", backend);
    let text = format!("path-note-{backend:?}");
    let page = browser.get("/acme/notes/new").send().await;
    let token = token_in(&page.text());
    let post = |path: &'static str| {
        browser
            .post(path)
            .header("accept", "application/json")
            .form(&[("_submit_token", token.as_str()), ("text", text.as_str())])
            .send()
    };
    post("/acme/notes").await.assert_status(200);
    let elsewhere = post("/globex/notes").await;
    assert!(
        matches!(elsewhere.status().as_u16(), 409 | 422),
        "{}: {}",
        elsewhere.status(),
        elsewhere.text()
    );
    assert_ne!(elsewhere.text(), format!("acme note 1 for {text}"));
    assert_eq!(notes("globex", &text), 0);
    let again = post("/acme/notes").await;
    again.assert_header("x-submit-token-replayed", "true");
    assert_eq!(notes("acme", &text), 1);
}
