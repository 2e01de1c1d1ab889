//! Forms: a rejected post rendered again (422) with its field errors and a
//! fresh submit token, and flash messages across a redirect and a replay.

use crate::support::backend;
use crate::support::token_in;

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use backend::Backend;

use autumn_web::config::AutumnConfig;
use autumn_web::forms::{FLASH_SESSION_KEY, FieldErrors, Flash, FlashMessage, FormPage};
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use autumn_web::test::{TestApp, TestClient, TestResponse};

/// Sign-ups that ran, per email (tests run in parallel: each its own).
static SIGNUPS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn signups(email: &str) -> usize {
    SIGNUPS
        .lock()
        .expect("counts")
        .get(email)
        .copied()
        .unwrap_or(0)
}

#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct Signup {
    email: String,
    name: String,
}

impl Signup {
    fn validate(&self) -> Result<(), FieldErrors> {
        let mut errors = FieldErrors::new();
        if !self.email.contains('@') {
            errors.add("email", "Enter an email address like name@example.com.");
        }
        if self.name.trim().is_empty() {
            errors.add("name", "Enter your name.");
        }
        errors.into_result(())
    }
}

fn render(
    form: &Signup,
    errors: &FieldErrors,
    token: &SubmitToken,
    field: &SubmitFormField,
) -> Markup {
    html! {
        form method="POST" action="/signup" {
            (submit_token_field(token, field))
            @for name in ["email", "name"] {
                @let value = if name == "email" { &form.email } else { &form.name };
                input name=(name) value=(value);
                @if let Some(message) = errors.get(name) {
                    span .error data-field=(name) { (message) }
                }
            }
        }
    }
}

#[get("/signup")]
async fn signup_form(token: SubmitToken, field: SubmitFormField) -> Markup {
    render(&Signup::default(), &FieldErrors::new(), &token, &field)
}

#[post("/signup")]
async fn signup(
    token: SubmitToken,
    field: SubmitFormField,
    flash: Flash,
    Form(form): Form<Signup>,
) -> AutumnResult<FormPage> {
    if let Err(errors) = form.validate() {
        return Ok(FormPage::invalid(render(&form, &errors, &token, &field)));
    }
    *SIGNUPS
        .lock()
        .expect("counts")
        .entry(form.email.clone())
        .or_default() += 1;
    flash
        .set("notice", format!("Welcome, {}!", form.name))
        .await?;
    flash.set("hint", "Add a picture.").await?;
    Ok(FormPage::redirect("/welcome"))
}

#[get("/welcome")]
async fn welcome(flash: Flash) -> AutumnResult<Markup> {
    let messages = flash.take().await?;
    Ok(html! {
        @for message in &messages {
            p class=(message.kind) { (message.text) }
        }
        p { "home" }
    })
}

fn app(config: AutumnConfig) -> TestClient {
    TestApp::new()
        .routes(routes![signup_form, signup, welcome])
        .with_config(config)
        .build()
}

async fn post(client: &TestClient, token: &str, email: &str, name: &str) -> TestResponse {
    client
        .post("/signup")
        .form(&[("_submit_token", token), ("email", email), ("name", name)])
        .send()
        .await
}

#[tokio::test]
async fn a_rejected_post_is_rendered_again_with_its_errors_the_values_and_a_fresh_token() {
    let client = app(AutumnConfig::default());
    let first = token_in(&client.get("/signup").send().await.text());

    let rejected = post(&client, &first, "not-an-email", "Rita").await;
    rejected.assert_status(422);
    assert_eq!(
        rejected.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let page = rejected.text();
    assert!(
        page.contains(r#"<span class="error" data-field="email">Enter an email address like name@example.com.</span>"#),
        "the message next to its field: {page}"
    );
    assert!(
        !page.contains(r#"data-field="name""#),
        "name was fine: {page}"
    );
    assert!(page.contains(r#"value="not-an-email""#), "{page}");
    assert!(page.contains(r#"value="Rita""#), "{page}");
    let fresh = token_in(&page);
    assert_eq!(fresh.len(), 32, "a token: {page}");
    assert_ne!(
        fresh, first,
        "the re-render is a new form with its own token"
    );
    assert_eq!(signups("not-an-email"), 0);

    let accepted = post(&client, &fresh, "rita@example.com", "Rita").await;
    accepted.assert_status(303);
    assert_eq!(accepted.header("location"), Some("/welcome"));
    assert_eq!(signups("rita@example.com"), 1);
}

#[tokio::test]
async fn a_flash_is_shown_once_on_the_page_a_post_redirects_to() {
    let client = app(AutumnConfig::default());
    let token = token_in(&client.get("/signup").send().await.text());
    post(&client, &token, "otto@example.com", "Otto")
        .await
        .assert_status(303);

    let page = client.get("/welcome").send().await.text();
    assert_eq!(
        page,
        r#"<p class="notice">Welcome, Otto!</p><p class="hint">Add a picture.</p><p>home</p>"#,
        "both messages, in the order they were set"
    );
    let again = client.get("/welcome").send().await.text();
    assert_eq!(again, "<p>home</p>", "taken: shown once");
    // Another visitor never sees it.
    let other = client.new_browser().get("/welcome").send().await.text();
    assert_eq!(other, "<p>home</p>");
}

#[tokio::test]
async fn flash_messages_live_under_the_documented_session_key() {
    #[post("/leave")]
    async fn leave(flash: Flash) -> AutumnResult<Redirect> {
        flash.set("error", "Try again.").await?;
        Ok(Redirect::to("/raw"))
    }

    #[get("/raw")]
    async fn raw(session: Session) -> AutumnResult<Json<Vec<FlashMessage>>> {
        Ok(Json(
            session.get(FLASH_SESSION_KEY).await?.unwrap_or_default(),
        ))
    }

    let client = TestApp::new().routes(routes![leave, raw]).build();
    client.post("/leave").send().await.assert_status(303);
    let stored: Vec<FlashMessage> = client.get("/raw").send().await.json();
    assert_eq!(
        stored,
        [FlashMessage {
            kind: "error".to_owned(),
            text: "Try again.".to_owned(),
        }]
    );
}

#[tokio::test]
async fn without_sessions_the_flash_extractor_answers_a_readable_500() {
    let client = app(AutumnConfig::from_toml_str("[session]\nenabled = false\n").expect("config"));
    let response = client.get("/welcome").send().await;
    response.assert_status(500);
    let problem: serde_json::Value = response.json();
    assert_eq!(problem["code"], "session_layer_missing", "{problem}");
}

on_every_backend!(a_replayed_post_carries_the_session_that_holds_the_flash);

/// The browser's session cookie as a `Cookie` header value.
fn cookie_of(client: &TestClient) -> String {
    let name = autumn_web::session::DEFAULT_SECURE_COOKIE_NAME;
    format!("{name}={}", client.cookie(name).expect("a session cookie"))
}

async fn a_replayed_post_carries_the_session_that_holds_the_flash(backend: Backend) {
    let storage = backend.storage();
    let client = app(storage.config(""));
    let email = format!("lost-lou-{backend:?}@example.com");
    let token = token_in(&client.get("/signup").send().await.text());
    let before = cookie_of(&client);

    // The first answer is lost: a browser holding the cookie it had before.
    let lost = |client: TestClient| {
        client
            .post("/signup")
            .header("cookie", &before)
            .form(&[
                ("_submit_token", token.as_str()),
                ("email", email.as_str()),
                ("name", "Lou"),
            ])
            .send()
    };
    let first = lost(client.new_browser()).await;
    first.assert_status(303);
    assert!(
        first.header("set-cookie").is_some(),
        "the flash saved the session"
    );

    let retry = lost(client.new_browser()).await;
    retry.assert_status(303);
    retry.assert_header("x-submit-token-replayed", "true");
    assert_eq!(retry.header("location"), Some("/welcome"));
    assert_eq!(
        retry.header("set-cookie"),
        first.header("set-cookie"),
        "the recorded Set-Cookie, of the session holding the flash"
    );
    assert_eq!(signups(&email), 1, "the handler ran once");

    let browser = client.new_browser();
    let cookie = retry
        .header("set-cookie")
        .and_then(|line| line.split(';').next())
        .expect("a cookie")
        .to_owned();
    let page = browser
        .get("/welcome")
        .header("cookie", &cookie)
        .send()
        .await
        .text();
    assert!(page.contains("Welcome, Lou!"), "{page}");
    let again = browser
        .get("/welcome")
        .header("cookie", &cookie)
        .send()
        .await
        .text();
    assert_eq!(again, "<p>home</p>", "shown once");
}
