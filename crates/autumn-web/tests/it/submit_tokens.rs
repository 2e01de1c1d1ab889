//! One-time submit tokens through the app builder: minted on every request,
//! consumed by the form post that carries one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use tokio::sync::Notify;

use autumn_web::config::{AutumnConfig, Profile};
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use autumn_web::test::{TestApp, TestClient};

/// How many posts were created per title (tests run in parallel: each
/// counts its own titles).
static CREATED: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);
static SEQUENCE: AtomicUsize = AtomicUsize::new(0);
/// A post titled "gated" signals STARTED, then waits for GATE.
static STARTED: LazyLock<Notify> = LazyLock::new(Notify::new);
static GATE: LazyLock<Notify> = LazyLock::new(Notify::new);

#[derive(serde::Deserialize)]
struct NewPost {
    title: String,
}

#[get("/posts/new")]
async fn new_post(token: SubmitToken, field: SubmitFormField) -> Markup {
    html! {
        form method="POST" action="/posts" {
            (submit_token_field(&token, &field))
            input type="text" name="title";
        }
    }
}

#[post("/posts")]
async fn create_post(Form(post): Form<NewPost>) -> AutumnResult<Redirect> {
    if post.title.trim().is_empty() {
        return Err(AutumnError::unprocessable("title must not be blank"));
    }
    if post.title.starts_with("gated") {
        STARTED.notify_one();
        GATE.notified().await;
    }
    *CREATED
        .lock()
        .expect("counts")
        .entry(post.title)
        .or_default() += 1;
    let n = SEQUENCE.fetch_add(1, Ordering::SeqCst);
    Ok(Redirect::to(&format!("/posts/{n}")))
}

#[post("/echo")]
async fn echo(body: axum::body::Bytes) -> axum::body::Bytes {
    body
}

#[get("/cached")]
async fn cached(token: SubmitToken) -> impl IntoResponse {
    ([("cache-control", "max-age=60")], token.token().to_owned())
}

fn client(toml: &str) -> TestClient {
    TestApp::new()
        .routes(routes![new_post, create_post, echo, cached])
        .with_config(AutumnConfig::from_toml_str(toml).expect("config"))
        .build()
}

/// The token a rendered form carries.
async fn rendered_token(client: &TestClient) -> String {
    let page = client.get("/posts/new").send().await;
    page.assert_ok();
    let html = page.text();
    let value = html
        .split("value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the form has a token");
    value.to_owned()
}

async fn submit(client: &TestClient, token: &str, title: &str) -> autumn_web::test::TestResponse {
    client
        .post("/posts")
        .form(&[("_submit_token", token), ("title", title)])
        .send()
        .await
}

fn created(title: &str) -> usize {
    CREATED
        .lock()
        .expect("counts")
        .get(title)
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn every_render_mints_a_fresh_token_into_the_first_field() {
    let client = client("");
    let page = client.get("/posts/new").send().await;
    let html = page.text();
    assert!(
        html.starts_with(r#"<form method="POST" action="/posts"><input type="hidden" name="_submit_token" value=""#),
        "the token field comes first: {html}"
    );
    let (a, b) = (rendered_token(&client).await, rendered_token(&client).await);
    assert_ne!(a, b);
    assert_eq!(a.len(), 32, "a UUID v4: 122 random bits");
    assert_eq!(page.header("cache-control"), Some("private, no-cache"));
    let own = client.get("/cached").send().await;
    assert_eq!(
        own.header("cache-control"),
        Some("private, no-cache"),
        "a handler's max-age would let a shared cache hand the token to others"
    );
}

/// A configured field name is escaped in the rendered field; the usual
/// ones are written as they are.
#[tokio::test]
async fn the_field_name_is_escaped_where_it_needs_to_be() {
    for (name, rendered) in [
        ("form.token-2_x", r#"name="form.token-2_x""#),
        (r#"a"b<c&d'e"#, r#"name="a&quot;b&lt;c&amp;d'e""#),
    ] {
        // Debug's quoting is a valid TOML basic string for these.
        let toml = format!("[security.submit_token]\nfield_name = {name:?}\n");
        let html = client(&toml).get("/posts/new").send().await.text();
        assert!(html.contains(rendered), "{name}: {html}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_runs_its_form_once_and_replays_the_first_answer() {
    let client = client("[actuator]\nmetrics_on_app_port = true\n");
    let token = rendered_token(&client).await;
    let first = submit(&client, &token, "hello").await;
    first.assert_status(303);
    let again = submit(&client, &token, "hello").await;
    again.assert_status(303);
    again.assert_header("x-submit-token-replayed", "true");
    assert_eq!(again.header("location"), first.header("location"));
    // Back, edit, resubmit: still the same rendering, still one post.
    let edited = submit(&client, &token, "hello, edited").await;
    edited.assert_header("x-submit-token-replayed", "true");
    assert_eq!(created("hello") + created("hello, edited"), 1);

    let metrics: serde_json::Value = client.get("/actuator/metrics").send().await.json();
    let tokens = &metrics["submit_token"];
    assert_eq!(
        [
            &tokens["hits"],
            &tokens["misses"],
            &tokens["conflicts"],
            &tokens["lock_renewal_failures"],
            &tokens["unrecorded_too_large"],
        ],
        [2, 1, 0, 0, 0],
        "{metrics}"
    );
    assert_eq!(
        tokens["store"]["entries"], 1,
        "one consumed token: {metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_submission_leaves_the_token_usable() {
    let client = client("");
    let token = rendered_token(&client).await;
    submit(&client, &token, " ").await.assert_status(422);
    let fixed = submit(&client, &token, "fixed").await;
    fixed.assert_status(303);
    assert_eq!(fixed.header("x-submit-token-replayed"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_duplicate_gets_409_or_waits_for_the_first() {
    let immediate = client("");
    let token = rendered_token(&immediate).await;
    let first = tokio::spawn({
        let (client, token) = (immediate.clone(), token.clone());
        async move { submit(&client, &token, "gated").await }
    });
    STARTED.notified().await;
    // The duplicate of a double-click, while the first still runs.
    let duplicate = submit(&immediate, &token, "gated").await;
    duplicate.assert_status(409);
    assert_eq!(duplicate.header("retry-after"), Some("1"));
    GATE.notify_one();
    first.await.expect("first").assert_status(303);

    let waiting = client("[security.submit_token]\nin_flight_wait_ms = 5000\n");
    let token = rendered_token(&waiting).await;
    let first = tokio::spawn({
        let (client, token) = (waiting.clone(), token.clone());
        async move { submit(&client, &token, "gated-wait").await }
    });
    STARTED.notified().await;
    let duplicate = tokio::spawn({
        let (client, token) = (waiting.clone(), token.clone());
        async move { submit(&client, &token, "gated-wait").await }
    });
    GATE.notify_one();
    let (a, b) = (
        first.await.expect("first"),
        duplicate.await.expect("duplicate"),
    );
    a.assert_status(303);
    b.assert_status(303)
        .assert_header("x-submit-token-replayed", "true");
    assert_eq!(
        a.header("location"),
        b.header("location"),
        "both land on the same page"
    );
    assert_eq!(created("gated-wait"), 1);
}

#[tokio::test]
async fn forms_without_the_field_pass_through_byte_for_byte() {
    let client = client("");
    let form = "a=1&b=%C3%A9+x&c=";
    let echoed = client
        .post("/echo")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await;
    assert_eq!(echoed.text(), form);

    let multipart = "--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.bin\"\r\n\r\n\x00\x01binary\r\n--B--\r\n";
    let echoed = client
        .post("/echo")
        .header("content-type", "multipart/form-data; boundary=B")
        .body(multipart)
        .send()
        .await;
    assert_eq!(echoed.bytes().as_ref(), multipart.as_bytes());
}

#[tokio::test]
async fn malformed_and_oversized_forms_are_refused_before_the_handler() {
    let client = client("[security.submit_token]\nmax_form_bytes = 64\n");
    let form = |body: &'static str| {
        client
            .post("/echo")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    let bad_escape = form("_submit_token=abc&title=%zz").await;
    bad_escape.assert_status(400);
    assert!(bad_escape.text().contains("form_malformed"));
    let twice = form("_submit_token=a&_submit_token=b").await;
    twice.assert_status(400);
    assert!(twice.text().contains("submit_token_repeated"));
    let big = client
        .post("/echo")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("_submit_token=abc&title={}", "x".repeat(100)))
        .send()
        .await;
    big.assert_status(413);
    assert!(
        big.text().contains("security.submit_token.max_form_bytes"),
        "{}",
        big.text()
    );
    // Broken multipart framing is refused when the body names the field;
    // without it, the body is the route's business, as without the layer.
    let broken = client
        .post("/echo")
        .header("content-type", "multipart/form-data; boundary=B")
        .body("no boundary, but name=\"_submit_token\" in here")
        .send()
        .await;
    broken.assert_status(400);
    assert!(
        broken.text().contains("form_malformed"),
        "{}",
        broken.text()
    );
    let tokenless = client
        .post("/echo")
        .header("content-type", "multipart/form-data; boundary=B")
        .body("no boundary in here")
        .send()
        .await;
    tokenless.assert_status(200);
    assert_eq!(tokenless.text(), "no boundary in here");
}

#[tokio::test]
async fn multipart_forms_are_guarded_too() {
    let client = client("");
    let token = rendered_token(&client).await;
    let body = format!(
        "--B\r\nContent-Disposition: form-data; name=\"_submit_token\"\r\n\r\n{token}\r\n--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\n\r\nhello\r\n--B--\r\n"
    );
    let send = || {
        client
            .post("/echo")
            .header("content-type", "multipart/form-data; boundary=B")
            .body(body.clone())
            .send()
    };
    let first = send().await;
    assert_eq!(first.text(), body, "the handler gets the body untouched");
    send()
        .await
        .assert_header("x-submit-token-replayed", "true");
}

#[tokio::test]
async fn exempt_paths_and_a_disabled_layer_skip_the_guard() {
    let exempt = client("[security.submit_token]\nexempt_paths = [\"/echo\"]\n");
    for _ in 0..2 {
        let answer = exempt
            .post("/echo")
            .form(&[("_submit_token", "same-token")])
            .send()
            .await;
        assert_eq!(answer.header("x-submit-token-replayed"), None);
    }
    let off = client("[security.submit_token]\nenabled = false\n");
    off.get("/posts/new").send().await.assert_status(500);
}

#[tokio::test]
async fn a_form_with_a_token_and_an_idempotency_key_is_guarded_by_both() {
    let client = TestApp::new()
        .routes(routes![create_post])
        .idempotent()
        .build();
    let send = || {
        client
            .post("/posts")
            .header("idempotency-key", "k")
            .form(&[("_submit_token", "tok-1"), ("title", "both")])
            .send()
    };
    send().await.assert_status(303);
    let again = send().await;
    // The token is checked first, so its replay answers.
    again.assert_header("x-submit-token-replayed", "true");
    assert_eq!(created("both"), 1);
}

#[test]
fn an_explicit_memory_store_for_tokens_is_refused_in_production() {
    let mut config = AutumnConfig::from_toml_str("[security.submit_token]\nbackend = \"memory\"\n")
        .expect("config");
    config.profile = Profile::new("prod");
    config.security.secret_key = Some(crate::support::SECRET_KEY.to_owned());
    let error = TestApp::new()
        .with_config(config)
        .try_build()
        .expect_err("refused");
    let message = error.to_string();
    assert!(
        message.contains("security.submit_token.backend"),
        "{message}"
    );
    assert!(!message.contains('\n'));
    // Unset, it inherits the idempotency backend and starts.
    let mut inherited = AutumnConfig::default();
    inherited.profile = Profile::new("prod");
    inherited.security.secret_key = Some(crate::support::SECRET_KEY.to_owned());
    inherited.session.allow_memory_in_production = true;
    assert!(TestApp::new().with_config(inherited).try_build().is_ok());
}
