//! The committed OpenAPI document is the one the payments app builds.

use autumn_web::config::AutumnConfig;

#[test]
fn the_committed_document_is_the_one_the_app_builds() {
    let built = payments::app()
        .with_config(AutumnConfig::default())
        .openapi_document()
        .expect("the app builds");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
    let committed = std::fs::read(path).unwrap_or_default();
    assert!(
        committed == built,
        "examples/payments/openapi.json is not the app's document: run `cargo xtask openapi` and commit it"
    );
}
