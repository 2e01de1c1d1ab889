//! The middleware `autumn.toml` configures: static files, compression, CORS
//! and security headers, through the app builder, as a browser or client
//! meets them.

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::atomic::{AtomicUsize, Ordering};

use autumn_web::config::{AutumnConfig, DEFAULT_CONTENT_SECURITY_POLICY, Profile};
use autumn_web::prelude::*;
use autumn_web::security::double_submit_guard;
use autumn_web::test::{Method, TestApp, TestClient};
use sha2::Digest as _;

/// Handler runs of `/transfer` (only one test posts to it).
static TRANSFERS: AtomicUsize = AtomicUsize::new(0);

/// Larger than the 32 bytes below which nothing is compressed.
fn report_text() -> String {
    "every line of this report repeats, so it compresses well\n".repeat(64)
}

#[get("/report")]
async fn report() -> String {
    report_text()
}

#[get("/tiny")]
async fn tiny() -> &'static str {
    "ok"
}

#[get("/own-policy")]
async fn own_policy() -> impl IntoResponse {
    (
        [(
            autumn_web::test::header::CONTENT_SECURITY_POLICY,
            "default-src 'none'",
        )],
        "framed",
    )
}

#[get("/form")]
async fn form() -> Markup {
    html! {
        (maud::DOCTYPE)
        html {
            body {
                form method="POST" action="/transfer" data-autumn-once {
                    button type="submit" { "Send" }
                }
                (double_submit_guard())
            }
        }
    }
}

#[post("/transfer")]
async fn transfer() -> StatusCode {
    TRANSFERS.fetch_add(1, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

fn config(toml: &str) -> AutumnConfig {
    AutumnConfig::from_toml_str(toml).expect("config")
}

fn app_with(config: AutumnConfig) -> TestClient {
    TestApp::new()
        .routes(routes![report, tiny, own_policy, form, transfer])
        .with_config(config)
        .build()
}

fn app(toml: &str) -> TestClient {
    app_with(config(toml))
}

/// A directory with `public/app.css` and, beside `public`, a file that must
/// never be served.
fn site() -> (tempfile::TempDir, String) {
    let root = tempfile::tempdir().expect("tempdir");
    let public = root.path().join("public");
    std::fs::create_dir(&public).expect("public");
    std::fs::write(public.join("app.css"), "body { color: teal; }\n").expect("app.css");
    std::fs::write(root.path().join("secret.txt"), "the secret").expect("secret");
    let public = public.to_str().expect("a UTF-8 path").to_owned();
    (root, public)
}

// ---- static files --------------------------------------------------------------------------

#[tokio::test]
async fn a_static_file_is_served_under_the_mount() {
    let (_root, public) = site();
    let client = app(&format!("[static]\ndir = {public:?}\n"));
    let response = client.get("/static/app.css").send().await;
    response
        .assert_status(200)
        .assert_header("content-type", "text/css");
    assert_eq!(response.text(), "body { color: teal; }\n");

    let client = app(&format!(
        "[static]\ndir = {public:?}\nmount = \"/assets/\"\n"
    ));
    client
        .get("/assets/app.css")
        .send()
        .await
        .assert_status(200);
    client
        .get("/static/app.css")
        .send()
        .await
        .assert_status(404);
}

#[tokio::test]
async fn a_missing_static_file_is_a_readable_404() {
    let (_root, public) = site();
    let client = app(&format!("[static]\ndir = {public:?}\n"));
    let response = client.get("/static/missing.css").send().await;
    response
        .assert_status(404)
        .assert_header("content-type", "application/problem+json");
    let problem: serde_json::Value = response.json();
    assert_eq!(problem["status"], 404, "{problem}");
}

#[tokio::test]
async fn no_path_leaves_the_static_directory() {
    let (_root, public) = site();
    let client = app(&format!("[static]\ndir = {public:?}\n"));
    for path in [
        "/static/../secret.txt",
        "/static/%2e%2e/secret.txt",
        "/static/..%2fsecret.txt",
        "/static/%2e%2e%2fsecret.txt",
        "/static//etc/passwd",
    ] {
        let response = client.get(path).send().await;
        assert_eq!(response.status(), 404, "{path}");
        assert!(!response.text().contains("the secret"), "{path}");
        assert!(!response.text().contains("root:"), "{path}");
    }
}

#[tokio::test]
async fn no_static_directory_serves_no_files() {
    let client = app("");
    client
        .get("/static/app.css")
        .send()
        .await
        .assert_status(404);
}

// ---- compression ---------------------------------------------------------------------------

fn gunzip(bytes: &[u8]) -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_string(&mut text)
        .expect("a gzip body");
    text
}

#[tokio::test]
async fn a_large_enough_body_is_gzipped_when_the_client_asks() {
    let client = app("");
    let response = client
        .get("/report")
        .header("accept-encoding", "gzip")
        .send()
        .await;
    response
        .assert_status(200)
        .assert_header("content-encoding", "gzip");
    assert!(response.bytes().len() < report_text().len());
    assert_eq!(gunzip(response.bytes()), report_text());

    // Not asked: sent as is.
    let response = client.get("/report").send().await;
    assert_eq!(response.header("content-encoding"), None);
    assert_eq!(response.text(), report_text());

    // Too small to be worth it.
    let response = client
        .get("/tiny")
        .header("accept-encoding", "gzip")
        .send()
        .await;
    assert_eq!(response.header("content-encoding"), None);
    assert_eq!(response.text(), "ok");
}

#[tokio::test]
async fn brotli_is_used_when_asked_for() {
    let client = app("");
    let response = client
        .get("/report")
        .header("accept-encoding", "br")
        .send()
        .await;
    response.assert_header("content-encoding", "br");
}

#[tokio::test]
async fn compression_can_be_turned_off() {
    let client = app("[compression]\nenabled = false\n");
    let response = client
        .get("/report")
        .header("accept-encoding", "gzip")
        .send()
        .await;
    assert_eq!(response.header("content-encoding"), None);
    assert_eq!(response.text(), report_text());
}

// ---- CORS ----------------------------------------------------------------------------------

const APP: &str = "https://app.example";
const OTHER: &str = "https://other.example";

fn cors_client() -> TestClient {
    app(&format!(
        "[cors]\nallowed_origins = [{APP:?}]\nallowed_methods = [\"GET\", \"POST\"]\nmax_age_secs = 120\n"
    ))
}

async fn preflight(client: &TestClient, origin: &str) -> autumn_web::test::TestResponse {
    client
        .request(Method::OPTIONS, "/transfer")
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "idempotency-key")
        .send()
        .await
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_is_answered() {
    let client = cors_client();
    let response = preflight(&client, APP).await;
    response
        .assert_status(200)
        .assert_header("access-control-allow-origin", APP)
        .assert_header("access-control-max-age", "120");
    let methods = response
        .header("access-control-allow-methods")
        .expect("allowed methods");
    assert!(methods.contains("POST"), "{methods}");
    let headers = response
        .header("access-control-allow-headers")
        .expect("allowed headers");
    assert!(headers.contains("idempotency-key"), "{headers}");

    let response = client.get("/tiny").header("origin", APP).send().await;
    response
        .assert_status(200)
        .assert_header("access-control-allow-origin", APP);
}

#[tokio::test]
async fn another_origin_gets_no_cors_headers() {
    let client = cors_client();
    let response = preflight(&client, OTHER).await;
    assert_eq!(response.header("access-control-allow-origin"), None);
    let response = client.get("/tiny").header("origin", OTHER).send().await;
    response.assert_status(200);
    assert_eq!(response.header("access-control-allow-origin"), None);

    // And with no [cors] at all, nobody gets them.
    let response = app("").get("/tiny").header("origin", APP).send().await;
    assert_eq!(response.header("access-control-allow-origin"), None);
}

#[tokio::test]
async fn cors_does_not_let_another_sites_page_post() {
    let client = cors_client();
    let before = TRANSFERS.load(Ordering::SeqCst);
    let response = client
        .post("/transfer")
        .header("origin", APP)
        .header("sec-fetch-site", "cross-site")
        .form(&[("amount", "100")])
        .send()
        .await;
    response
        .assert_status(403)
        .assert_header("access-control-allow-origin", APP);
    let problem: serde_json::Value = response.json();
    assert_eq!(problem["code"], "cross_origin_request_refused", "{problem}");
    assert_eq!(TRANSFERS.load(Ordering::SeqCst), before);

    // Trusting the origin is a separate, explicit decision.
    let client = app(&format!(
        "[cors]\nallowed_origins = [{APP:?}]\n[security.cross_origin]\ntrusted_origins = [{APP:?}]\n"
    ));
    client
        .post("/transfer")
        .header("origin", APP)
        .header("sec-fetch-site", "cross-site")
        .form(&[("amount", "100")])
        .send()
        .await
        .assert_status(204);
    assert_eq!(TRANSFERS.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn any_origin_with_a_star() {
    let client = app("[cors]\nallowed_origins = [\"*\"]\n");
    client
        .get("/tiny")
        .header("origin", OTHER)
        .send()
        .await
        .assert_header("access-control-allow-origin", "*");
}

// ---- security headers ----------------------------------------------------------------------

fn production() -> AutumnConfig {
    let mut config = AutumnConfig::default();
    config.profile = Profile::new("prod");
    config.security.secret_key = Some(crate::support::SECRET_KEY.to_owned());
    config.idempotency.allow_memory_in_production = true;
    config.session.allow_memory_in_production = true;
    config
}

#[tokio::test]
async fn security_headers_are_on_every_answer_and_hsts_only_in_production() {
    let client = app("");
    for path in ["/tiny", "/no-such-page"] {
        let response = client.get(path).send().await;
        response
            .assert_header("x-content-type-options", "nosniff")
            .assert_header("referrer-policy", "strict-origin-when-cross-origin")
            .assert_header("content-security-policy", DEFAULT_CONTENT_SECURITY_POLICY);
        assert_eq!(response.header("strict-transport-security"), None, "{path}");
    }

    let client = app_with(production());
    let response = client.get("/tiny").send().await;
    response
        .assert_header("strict-transport-security", "max-age=31536000")
        .assert_header("x-content-type-options", "nosniff");

    let mut config = production();
    config.security.headers.hsts = Some(false);
    let response = app_with(config).get("/tiny").send().await;
    assert_eq!(response.header("strict-transport-security"), None);

    let response = app("[security.headers]\nhsts = true\n")
        .get("/tiny")
        .send()
        .await;
    response.assert_header("strict-transport-security", "max-age=31536000");
}

#[tokio::test]
async fn the_headers_follow_the_configuration() {
    let client = app(
        "[security.headers]\ncontent_security_policy = \"default-src 'none'\"\nreferrer_policy = \"no-referrer\"\n",
    );
    client
        .get("/tiny")
        .send()
        .await
        .assert_header("content-security-policy", "default-src 'none'")
        .assert_header("referrer-policy", "no-referrer");

    let response =
        app("[security.headers]\ncontent_security_policy = \"\"\nreferrer_policy = \"\"\n")
            .get("/tiny")
            .send()
            .await;
    assert_eq!(response.header("content-security-policy"), None);
    assert_eq!(response.header("referrer-policy"), None);
    response.assert_header("x-content-type-options", "nosniff");

    let response = app("[security.headers]\nenabled = false\n")
        .get("/tiny")
        .send()
        .await;
    for name in [
        "x-content-type-options",
        "content-security-policy",
        "referrer-policy",
    ] {
        assert_eq!(response.header(name), None, "{name}");
    }
}

#[tokio::test]
async fn a_handlers_own_policy_is_kept() {
    app("")
        .get("/own-policy")
        .send()
        .await
        .assert_header("content-security-policy", "default-src 'none'");
}

/// Standard base64, as CSP hash sources are written.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, byte)| n | u32::from(*byte) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test]
async fn the_guard_script_is_allowed_by_the_default_policy() {
    let response = app("").get("/form").send().await;
    response.assert_status(200);
    let policy = response
        .header("content-security-policy")
        .expect("a policy")
        .to_owned();
    let script_src: Vec<&str> = policy
        .split(';')
        .map(str::trim)
        .find_map(|directive| directive.strip_prefix("script-src "))
        .expect("a script-src directive")
        .split_whitespace()
        .collect();
    assert!(!script_src.contains(&"'unsafe-inline'"), "{policy}");

    // Every inline script on the page is allowed by its hash.
    let page = response.text();
    let mut scripts = 0;
    for piece in page.split("<script>").skip(1) {
        let (script, _) = piece.split_once("</script>").expect("a closed script");
        let hash = format!("'sha256-{}'", base64(&sha2::Sha256::digest(script)));
        assert!(
            script_src.contains(&hash.as_str()),
            "{hash} not in {policy}"
        );
        scripts += 1;
    }
    assert_eq!(scripts, 1, "{page}");
    // No script loaded by the page that the policy would refuse, and no
    // inline handler (which a hash does not allow).
    assert!(!page.contains("<script src"), "{page}");
    assert!(
        !page.contains(" onsubmit=") && !page.contains(" onclick="),
        "{page}"
    );
}

#[test]
fn the_base64_of_the_tests_is_standard() {
    assert_eq!(base64(b"Man"), "TWFu");
    assert_eq!(base64(b"Ma"), "TWE=");
    assert_eq!(base64(b"M"), "TQ==");
}

// ---- settings ------------------------------------------------------------------------------

#[test]
fn bad_values_are_refused_naming_the_key() {
    for (toml, key) in [
        ("[static]\nmount = \"static\"\n", "static.mount"),
        ("[static]\nmount = \"/\"\n", "static.mount"),
        ("[static]\nmount = \"/{file}\"\n", "static.mount"),
        ("[static]\ndir = \"\"\n", "static.dir"),
        (
            "[cors]\nallowed_origins = [\"app.example\"]\n",
            "cors.allowed_origins",
        ),
        (
            "[cors]\nallowed_origins = [\"https://app.example/\"]\n",
            "cors.allowed_origins",
        ),
        (
            "[cors]\nallowed_origins = [\"*\", \"https://app.example\"]\n",
            "cors.allowed_origins",
        ),
        (
            "[cors]\nallowed_methods = [\"GET POST\"]\n",
            "cors.allowed_methods",
        ),
        (
            "[cors]\nallowed_headers = [\"x y\"]\n",
            "cors.allowed_headers",
        ),
        ("[cors]\nmax_age_secs = -1\n", "cors.max_age_secs"),
        ("[compression]\nenabled = \"yes\"\n", "compression.enabled"),
        (
            "[security.headers]\ncontent_security_policy = \"a\\nb\"\n",
            "security.headers.content_security_policy",
        ),
        (
            "[security.headers]\nreferrer_policy = \"sometimes\"\n",
            "security.headers.referrer_policy",
        ),
        ("[security.headers]\nhsts = 1\n", "security.headers.hsts"),
        ("[static]\nfolder = \"public\"\n", "static.folder"),
    ] {
        let error = AutumnConfig::from_toml_str(toml).expect_err(toml);
        assert_eq!(error.key(), Some(key), "{toml}: {error}");
    }
}

#[test]
fn a_static_dir_that_is_not_there_stops_the_launch() {
    let Err(error) = TestApp::new()
        .with_config(config("[static]\ndir = \"/no/such/dir/anywhere\"\n"))
        .try_build()
    else {
        panic!("a missing static.dir must stop the launch");
    };
    let message = error.to_string();
    assert!(message.contains("static.dir"), "{message}");
    assert!(message.contains("/no/such/dir/anywhere"), "{message}");
}

#[test]
fn a_static_mount_over_a_route_stops_the_launch_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = format!(
        "[static]\ndir = {:?}\nmount = \"/report\"\n",
        dir.path().display().to_string()
    );
    let Err(error) = TestApp::new()
        .routes(routes![report])
        .with_config(config(&toml))
        .try_build()
    else {
        panic!("a mount over a route must stop the launch");
    };
    let message = error.to_string();
    assert!(message.contains("static.mount"), "{message}");
    assert!(!message.contains('\n'), "{message}");
}

#[test]
fn environment_variables_set_every_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env: HashMap<String, String> = [
        ("AUTUMN_STATIC__DIR", "public"),
        ("AUTUMN_STATIC__MOUNT", "/assets"),
        ("AUTUMN_COMPRESSION__ENABLED", "false"),
        ("AUTUMN_CORS__ALLOWED_ORIGINS", "[\"https://app.example\"]"),
        ("AUTUMN_CORS__MAX_AGE_SECS", "60"),
        ("AUTUMN_SECURITY__HEADERS__HSTS", "true"),
        ("AUTUMN_SECURITY__HEADERS__REFERRER_POLICY", "same-origin"),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .collect();
    let config = AutumnConfig::load_from(dir.path(), &env).expect("config");
    assert_eq!(config.static_files.dir.as_deref(), Some("public"));
    assert_eq!(config.static_files.mount, "/assets");
    assert!(!config.compression.enabled);
    assert_eq!(config.cors.allowed_origins, ["https://app.example"]);
    assert_eq!(config.cors.max_age_secs, 60);
    assert_eq!(config.security.headers.hsts, Some(true));
    assert_eq!(config.security.headers.referrer_policy, "same-origin");

    let mut env = env;
    env.insert(
        "AUTUMN_SECURITY__HEADERS__REFERRER_POLICY".to_owned(),
        "sometimes".to_owned(),
    );
    let error = AutumnConfig::load_from(dir.path(), &env).expect_err("refused");
    assert_eq!(error.key(), Some("security.headers.referrer_policy"));
    let message = error.to_string();
    assert!(
        message.contains("AUTUMN_SECURITY__HEADERS__REFERRER_POLICY"),
        "{message}"
    );
}
