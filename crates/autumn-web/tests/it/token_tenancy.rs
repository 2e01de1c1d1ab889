//! A submit token belongs to one tenant as well as one session: posted
//! under another tenant (a header switched, or the other tenant's path), it
//! never replays the first tenant's answer, and it never runs twice.

use crate::support::token_in;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use autumn_web::test::{TestApp, TestClient, TestResponse};

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

fn app(strategy: &str) -> TestClient {
    let config = AutumnConfig::from_toml_str(&format!(
        "[tenancy]\nenabled = true\nstrategy = \"{strategy}\"\n"
    ))
    .expect("config");
    TestApp::new()
        .routes(routes![new_note, create_note])
        .with_config(config)
        .build()
}

fn code(response: &TestResponse) -> String {
    let body: serde_json::Value = serde_json::from_str(&response.text()).expect("problem+json");
    body["code"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_token_posted_under_another_tenants_header_is_refused_and_runs_nothing() {
    let browser = app("header");
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
            .form(&[("_submit_token", token.as_str()), ("text", "header-note")])
            .send()
    };
    post("acme").await.assert_status(200);
    // The same browser (same session), the same token, another tenant.
    let elsewhere = post("globex").await;
    elsewhere.assert_status(409);
    assert_eq!(code(&elsewhere), "submit_token_other_session");
    assert_eq!(notes("globex", "header-note"), 0);
    // Under its own tenant the resend still replays.
    let again = post("acme").await;
    again.assert_header("x-submit-token-replayed", "true");
    assert_eq!(again.text(), "acme note 1 for header-note");
    assert_eq!(notes("acme", "header-note"), 1);
}

#[tokio::test]
async fn a_token_posted_to_another_tenants_path_is_refused_and_runs_nothing() {
    let browser = app("path");
    let page = browser.get("/acme/notes/new").send().await;
    let token = token_in(&page.text());
    let post = |path: &'static str| {
        browser
            .post(path)
            .header("accept", "application/json")
            .form(&[("_submit_token", token.as_str()), ("text", "path-note")])
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
    assert_ne!(elsewhere.text(), "acme note 1 for path-note");
    assert_eq!(notes("globex", "path-note"), 0);
    let again = post("/acme/notes").await;
    again.assert_header("x-submit-token-replayed", "true");
    assert_eq!(notes("acme", "path-note"), 1);
}
