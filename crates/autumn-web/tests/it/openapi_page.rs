//! The interactive page at `[openapi] ui_path`: Swagger UI served from the
//! crate itself, under the app's own `Content-Security-Policy`, and shown
//! working in a real browser.

use std::io::Read as _;

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient};

#[post("/payments", idempotency = "required")]
async fn pay() -> &'static str {
    "paid"
}

#[get("/payments")]
async fn payments() -> &'static str {
    "[]"
}

fn client(toml: &str) -> TestClient {
    TestApp::new()
        .routes(routes![pay, payments])
        .idempotent()
        .with_config(AutumnConfig::from_toml_str(toml).expect("config"))
        .build()
}

#[tokio::test]
async fn the_page_and_its_files_come_from_the_app_itself() {
    let client = client("[openapi]\ntitle = \"Payments <API>\"\n");
    let page = client.get("/openapi").send().await;
    page.assert_status(200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let html = page.text();
    assert!(
        html.contains("<title>Payments &lt;API&gt;</title>"),
        "{html}"
    );
    for file in [
        "/openapi/swagger-ui.css",
        "/openapi/swagger-ui-bundle.js",
        "/openapi/init.js",
    ] {
        assert!(html.contains(&format!("\"{file}\"")), "{file} in {html}");
    }
    // Nothing from another origin, nothing inline.
    assert!(!html.contains("http"), "{html}");
    assert!(!html.contains("<script>"), "{html}");
    // The app's policy is on the page, as on every page of the app.
    let policy = page.header("content-security-policy").expect("a policy");
    assert!(policy.contains("script-src 'self'"), "{policy}");

    let init = client.get("/openapi/init.js").send().await;
    init.assert_status(200);
    assert!(
        init.text().contains("url: \"/openapi.json\""),
        "{}",
        init.text()
    );

    // A browser takes the stored gzip as it is; it is the script.
    let gzipped = client
        .get("/openapi/swagger-ui-bundle.js")
        .header("accept-encoding", "gzip, deflate, br")
        .send()
        .await;
    gzipped.assert_status(200);
    assert_eq!(gzipped.header("content-encoding"), Some("gzip"));
    assert_eq!(gzipped.header("vary"), Some("accept-encoding"));
    assert_eq!(
        gzipped.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    let mut script = String::new();
    flate2::read::GzDecoder::new(gzipped.bytes().as_ref())
        .read_to_string(&mut script)
        .expect("gzip");
    assert!(script.contains("SwaggerUIBundle"), "the bundle");
    // A client that does not take gzip gets the same script, plain.
    let plain = client.get("/openapi/swagger-ui-bundle.js").send().await;
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.text(), script);
    let css = client.get("/openapi/swagger-ui.css").send().await;
    css.assert_status(200);
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    assert!(css.text().contains(".swagger-ui"), "the stylesheet");
}

#[tokio::test]
async fn the_page_follows_its_settings_and_the_document() {
    let moved = client("[openapi]\npath = \"/api.json\"\nui_path = \"/docs/api\"\n");
    moved.get("/openapi").send().await.assert_status(404);
    moved.get("/docs/api").send().await.assert_status(200);
    let init = moved.get("/docs/api/init.js").send().await.text();
    assert!(init.contains("url: \"/api.json\""), "{init}");

    let off = client("[openapi]\nui = false\n");
    off.get("/openapi").send().await.assert_status(404);
    off.get("/openapi/swagger-ui-bundle.js")
        .send()
        .await
        .assert_status(404);
    off.get("/openapi.json").send().await.assert_status(200);

    // Where the document is not served, neither is the page.
    let hidden = client("[openapi]\nenabled = false\n");
    hidden.get("/openapi").send().await.assert_status(404);
}

#[test]
fn a_page_path_that_is_taken_stops_the_launch_naming_the_key() {
    let error = AutumnConfig::from_toml_str("[openapi]\nui_path = \"/openapi.json\"\n")
        .expect_err("the document's own path");
    assert!(error.to_string().contains("openapi.ui_path"), "{error}");
    let error = AutumnConfig::from_toml_str("[openapi]\nui_path = \"/docs/\"\n")
        .expect_err("a trailing slash");
    assert!(error.to_string().contains("openapi.ui_path"), "{error}");

    let error = autumn_web::app()
        .routes(routes![payments])
        .with_config(
            AutumnConfig::from_toml_str("[openapi]\nui_path = \"/payments\"\n").expect("config"),
        )
        .into_router()
        .expect_err("the page's path is a route");
    let message = error.to_string();
    assert!(
        message.contains("openapi.ui_path") && message.contains("payments"),
        "{message}"
    );
}

/// In Chromium, under the app's default policy: the page draws every
/// operation, and a guarded one shows its `Idempotency-Key`, so the
/// bundled script ran without anything the policy forbids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_the_page_shows_the_operations_and_their_key() {
    use autumn_testkit::chromium::{Chromedriver, browser};
    use fantoccini::Locator;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind port 0");
    let address = listener.local_addr().expect("bound address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(
        autumn_web::app()
            .routes(routes![pay, payments])
            .idempotent()
            .with_config(AutumnConfig::from_toml_str("").expect("config"))
            .serve(listener, async move {
                let _ = stopped.await;
            }),
    );
    let driver = Chromedriver::start();
    let profile = tempfile::tempdir().expect("a browser profile");
    let browser = browser(&driver, profile.path()).await;
    browser
        .goto(&format!("http://{address}/openapi"))
        .await
        .expect("the page");
    let summary = browser
        .wait()
        .at_most(std::time::Duration::from_secs(20))
        .for_element(Locator::Css("#operations-default-pay .opblock-summary"))
        .await
        .expect("Swagger UI drew `POST /payments`");
    browser
        .find(Locator::Css("#operations-default-payments"))
        .await
        .expect("and `GET /payments`");
    summary.click().await.expect("open the operation");
    let key = browser
        .wait()
        .at_most(std::time::Duration::from_secs(10))
        .for_element(Locator::Css(
            "#operations-default-pay tr[data-param-name='Idempotency-Key']",
        ))
        .await
        .expect("the operation lists its key");
    let text = key.text().await.expect("the row's text");
    assert!(
        text.contains("A new unique value"),
        "the key's description: {text}"
    );
    // Swagger UI marks a required parameter's name.
    browser
        .find(Locator::Css(
            "#operations-default-pay tr[data-param-name='Idempotency-Key'] .parameter__name.required",
        ))
        .await
        .expect("the key is marked required");
    browser.close().await.expect("the browser closes");
    let _ = stop.send(());
    served
        .await
        .expect("the server task")
        .expect("the server stops cleanly");
}
