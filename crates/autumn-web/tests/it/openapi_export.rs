//! The document written out, for a client generator or a committed file:
//! `AppBuilder::openapi_document` and the app binary's `openapi [FILE]`.

use autumn_web::config::{AutumnConfig, Profile};
use autumn_web::prelude::*;
use autumn_web::test::TestApp;

#[post("/payments", idempotency = "required")]
async fn pay() -> &'static str {
    "paid"
}

fn app(config: AutumnConfig) -> autumn_web::AppBuilder {
    autumn_web::app()
        .routes(routes![pay])
        .idempotent()
        .with_config(config)
}

#[tokio::test]
async fn the_written_document_is_the_served_one() {
    let config = AutumnConfig::from_toml_str("[openapi]\ntitle = \"Payments\"\n").expect("config");
    let served = TestApp::new()
        .routes(routes![pay])
        .idempotent()
        .with_config(config.clone())
        .build()
        .get("/openapi.json")
        .send()
        .await;
    let written = app(config.clone())
        .openapi_document()
        .expect("the document");
    assert_eq!(served.bytes(), &written);

    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("openapi.json");
    app(config)
        .run_command(["openapi", file.to_str().expect("a UTF-8 path")])
        .await
        .expect("the command writes the file");
    assert_eq!(std::fs::read(&file).expect("the file"), written);
    let document: serde_json::Value = serde_json::from_slice(&written).expect("JSON");
    assert_eq!(document["info"]["title"], "Payments");
}

#[test]
fn a_profile_that_does_not_serve_the_document_still_writes_it() {
    let mut config = AutumnConfig::from_toml_str(
        "[security]\nsecret_key = \"0123456789abcdef0123456789abcdef-secret\"\n",
    )
    .expect("config");
    config.profile = Profile::new("prod");
    config.idempotency.allow_memory_in_production = true;
    config.session.allow_memory_in_production = true;
    assert!(!config.openapi.is_served(&config.profile));
    let document = app(config).openapi_document().expect("the document");
    let document: serde_json::Value = serde_json::from_slice(&document).expect("JSON");
    assert!(
        document["paths"]["/payments"]["post"].is_object(),
        "{document}"
    );
}

#[tokio::test]
async fn a_bad_command_line_or_file_is_one_line_naming_it() {
    let config = AutumnConfig::default();
    let error = app(config.clone())
        .run_command(["openapi", "a.json", "b.json"])
        .await
        .expect_err("two files");
    assert!(error.to_string().starts_with("openapi command:"), "{error}");
    let error = app(config)
        .run_command(["openapi", "/no/such/dir/openapi.json"])
        .await
        .expect_err("no such directory");
    let message = error.to_string();
    assert!(message.contains("/no/such/dir/openapi.json"), "{message}");
    assert!(!message.contains('\n'), "{message}");
}
