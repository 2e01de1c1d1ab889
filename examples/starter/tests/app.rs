//! The app as a client sees it, built in the test process.

use autumn_web::test::{TestApp, json};
use starter::{Notes, app, app_with};

/// The value of the first hidden field in `html`: the submit token.
fn token_in(html: &str) -> String {
    let rest = html.split("value=\"").nth(1).expect("a token field");
    rest[..rest.find('"').expect("a closing quote")].to_owned()
}

#[autumn_web::test]
async fn home_page_links_to_the_form() {
    let client = TestApp::from_builder(app()).build();

    let page = client.get("/").send().await;
    page.assert_ok();
    assert!(page.text().contains(r#"href="/notes/new""#));
}

#[autumn_web::test]
async fn a_form_posted_twice_saves_one_note() {
    let notes = Notes::default();
    let client = TestApp::from_builder(app_with(notes.clone())).build();

    let form = client.get("/notes/new").send().await;
    form.assert_ok();
    let token = token_in(&form.text());
    let post = || {
        client
            .post("/notes")
            .form(&[("_submit_token", token.as_str()), ("text", "buy milk")])
            .send()
    };

    let first = post().await;
    first.assert_status(303).assert_header("location", "/");
    // The double-click: the same answer, and no second note.
    let again = post().await;
    again
        .assert_status(303)
        .assert_header("x-submit-token-replayed", "true");
    assert_eq!(notes.all().len(), 1);

    let home = client.get("/").send().await;
    assert!(home.text().contains("<li>buy milk</li>"));
}

#[autumn_web::test]
async fn an_empty_note_is_refused() {
    let client = TestApp::from_builder(app()).build();

    let response = client
        .post("/notes")
        .form(&[("_submit_token", "t-1"), ("text", "  ")])
        .send()
        .await;
    response.assert_status(422);
}

#[autumn_web::test]
async fn a_retried_api_call_adds_one_note() {
    let notes = Notes::default();
    let client = TestApp::from_builder(app_with(notes.clone())).build();
    let add = || {
        client
            .post("/api/notes")
            .header("idempotency-key", "note-1")
            .json(&json!({ "text": "call Ada" }))
            .send()
    };

    add().await.assert_status(201);
    let retry = add().await;
    retry
        .assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(notes.all().len(), 1);

    let listed = client.get("/api/notes").send().await;
    assert_eq!(
        listed.json::<autumn_web::test::Value>()[0]["text"],
        "call Ada"
    );
}

#[autumn_web::test]
async fn the_api_is_described_for_clients_and_shown_in_development() {
    let client = TestApp::from_builder(app()).build();

    let document: autumn_web::reexports::serde_json::Value =
        client.get("/openapi.json").send().await.json();
    let create = &document["paths"]["/api/notes"]["post"];
    assert_eq!(
        create["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/NewNote"
    );
    assert!(
        create["parameters"]
            .as_array()
            .is_some_and(|parameters| parameters.iter().any(|p| p["name"] == "Idempotency-Key")),
        "the API's POST takes a key"
    );
    client.get("/openapi").send().await.assert_ok();
}
