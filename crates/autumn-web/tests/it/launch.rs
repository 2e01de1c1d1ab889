//! The launch path refuses what cannot work, with one line naming the key.

use autumn_web::config::{AutumnConfig, Profile};
use autumn_web::prelude::*;
use autumn_web::test::TestApp;

use crate::support::logs;

#[post("/orders")]
async fn create() -> &'static str {
    "created"
}

#[post("/orders")]
async fn create_again() -> &'static str {
    "again"
}

fn config(toml: &str, profile: &str) -> AutumnConfig {
    let mut config = AutumnConfig::from_toml_str(toml).expect("valid TOML");
    config.profile = Profile::new(profile);
    config.security.secret_key = Some(crate::support::SECRET_KEY.to_owned());
    config
}

fn launch_error(app: TestApp) -> String {
    match app.try_build() {
        Ok(_) => panic!("expected a launch error"),
        Err(error) => {
            let message = error.to_string();
            assert!(!message.contains('\n'), "one line: {message}");
            message
        }
    }
}

/// The app as `main` would assemble it: `.idempotent()` with the configured backend.
fn configured(config: AutumnConfig) -> TestApp {
    TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
        .with_config(config)
}

#[test]
fn memory_store_in_production_is_refused_unless_allowed() {
    for profile in ["prod", "production"] {
        let message = launch_error(configured(config("", profile)));
        assert!(
            message.contains("idempotency.allow_memory_in_production"),
            "{message}"
        );
        assert!(message.contains(profile), "{message}");
    }
    let allowed = config(
        "[idempotency]\nallow_memory_in_production = true\n[session]\nallow_memory_in_production = true\n",
        "prod",
    );
    assert!(configured(allowed).try_build().is_ok());
    assert!(configured(config("", "dev")).try_build().is_ok());
}

#[test]
fn memory_sessions_in_production_are_refused_unless_allowed() {
    let idempotency_allowed = "[idempotency]\nallow_memory_in_production = true\n";
    let message = launch_error(configured(config(idempotency_allowed, "prod")));
    assert!(
        message.contains("session.allow_memory_in_production"),
        "{message}"
    );
    assert!(message.contains("AUTUMN_SESSION__BACKEND"), "{message}");
    assert!(!message.contains('\n'), "one line: {message}");
    let sessions_off = format!("{idempotency_allowed}[session]\nenabled = false\n");
    assert!(
        configured(config(&sessions_off, "prod"))
            .try_build()
            .is_ok()
    );
}

#[test]
fn submit_tokens_on_a_memory_store_in_production_warn_whether_or_not_the_store_is_shared() {
    let allowed = "[idempotency]\nallow_memory_in_production = true\n[session]\nallow_memory_in_production = true\n";
    let warning = "submit tokens use a memory store in production profile `prod`";
    // `.idempotent()` shares its memory store with the tokens; without it
    // the tokens get a memory store of their own. Both warn.
    for shared in [true, false] {
        let (_logging, logs) = logs::capture();
        let app = if shared {
            configured(config(allowed, "prod"))
        } else {
            TestApp::new()
                .routes(routes![create])
                .with_config(config(allowed, "prod"))
        };
        assert!(app.try_build().is_ok());
        let lines = logs.lines_with(warning);
        assert_eq!(lines.len(), 1, "shared: {shared}: {}", logs.text());
        assert!(lines[0].contains("WARN"), "{lines:?}");
    }
    let (_logging, logs) = logs::capture();
    assert!(configured(config("", "dev")).try_build().is_ok());
    assert!(
        logs.lines_with("submit tokens use a memory store")
            .is_empty()
    );
}

#[test]
fn redis_without_a_url_and_database_without_a_database_are_refused() {
    let message = launch_error(configured(config(
        "[idempotency]\nbackend = \"redis\"\n",
        "dev",
    )));
    assert!(message.contains("idempotency.redis.url"), "{message}");
    assert!(
        message.contains("AUTUMN_IDEMPOTENCY__REDIS__URL"),
        "{message}"
    );

    let message = launch_error(configured(config(
        "[idempotency]\nbackend = \"database\"\n",
        "dev",
    )));
    assert!(message.contains("database.url"), "{message}");
}

#[test]
fn a_redis_url_that_does_not_parse_says_invalid_url_and_shows_the_form() {
    for url in ["localhost:6379", "http://cache:6379", "redis://:6379:x"] {
        // Idempotency and sessions each check the URL they are given.
        for sessions in ["false", "true"] {
            let message = launch_error(configured(config(
                &format!(
                    "[idempotency]\nbackend = \"redis\"\nredis.url = \"{url}\"\n[session]\nenabled = {sessions}\nbackend = \"redis\"\n"
                ),
                "dev",
            )));
            assert!(message.contains("invalid URL"), "{url}: {message}");
            assert!(
                message.contains("redis://[user:password@]host[:port][/db]"),
                "{url}: {message}"
            );
            assert!(
                message.contains("idempotency.redis.url"),
                "{url}: {message}"
            );
            assert!(!message.contains("cannot reach"), "{url}: {message}");
        }
    }
}

#[test]
fn a_malformed_redis_cluster_url_is_refused_in_one_line_naming_the_key() {
    for (url, reason) in [
        ("redis+cluster://", "names no node"),
        ("redis+cluster://app:secret@cache-a", "no port"),
        ("redis+cluster://cache-a:7000,cache-b:x", "invalid port"),
        ("redis+cluster://cache-a:7000/2", "no database number"),
    ] {
        let message = launch_error(configured(config(
            &format!("[idempotency]\nbackend = \"redis\"\nredis.url = \"{url}\"\n"),
            "dev",
        )));
        assert!(
            message.contains("idempotency.redis.url"),
            "{url}: {message}"
        );
        assert!(message.contains(reason), "{url}: {message}");
        assert!(
            message.contains("redis+cluster://[user:password@]host1:port1"),
            "{message}"
        );
        assert!(!message.contains("secret"), "{url}: {message}");
        assert!(!message.contains('\n'), "one line: {message}");
    }
}

#[test]
fn a_tls_redis_url_is_accepted_and_startup_tries_to_reach_it() {
    for url in [
        "rediss://:secret@127.0.0.1:1",
        "rediss+cluster://:secret@127.0.0.1:1",
    ] {
        let message = launch_error(configured(config(
            &format!("[idempotency]\nbackend = \"redis\"\nredis.url = \"{url}\"\n"),
            "dev",
        )));
        assert!(
            message.starts_with("cannot reach Redis for idempotency.redis.url"),
            "{url}: {message}"
        );
        assert!(!message.contains("not supported"), "{url}: {message}");
        assert!(!message.contains("secret"), "{url}: {message}");
    }
}

#[test]
fn a_redis_url_that_does_not_parse_is_refused_for_sessions_alone() {
    let message = launch_error(configured(config(
        "[idempotency]\nbackend = \"memory\"\nredis.url = \"localhost:6379\"\n[session]\nbackend = \"redis\"\n",
        "dev",
    )));
    assert!(message.contains("invalid URL"), "{message}");
    assert!(message.contains("redis://"), "{message}");
}

#[test]
fn duplicate_routes_and_old_path_syntax_are_refused() {
    let message = launch_error(TestApp::new().routes(routes![create, create_again]));
    assert!(message.contains("POST /orders"), "{message}");
    assert!(message.contains("create_again"), "{message}");

    let old = Route::new(
        http::Method::GET,
        "/orders/:id",
        axum::routing::get(|| async { "" }),
    );
    let message = launch_error(TestApp::new().routes(vec![old]));
    assert!(message.contains("{name}"), "{message}");
}

#[test]
fn a_bad_tenancy_setting_is_refused_naming_its_key() {
    let error = AutumnConfig::from_toml_str("[tenancy]\nenabled = true\nheader = \"bad header\"\n")
        .expect_err("refused at load");
    assert_eq!(error.key(), Some("tenancy.header"));
    // Set in code, it is refused at launch.
    for (strategy, key) in [
        (autumn_web::config::TenantStrategy::Header, "tenancy.header"),
        (
            autumn_web::config::TenantStrategy::Subdomain,
            "tenancy.base_domain",
        ),
    ] {
        let mut config = config("", "dev");
        config.tenancy.enabled = true;
        config.tenancy.strategy = strategy;
        config.tenancy.header = "bad header".to_owned();
        let message = launch_error(TestApp::new().with_config(config));
        assert!(message.contains(key), "{message}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_request_timeout_answers_408() {
    #[post("/slow")]
    async fn slow() -> &'static str {
        std::future::pending::<()>().await;
        "never"
    }
    let client = TestApp::new()
        .routes(routes![slow])
        .with_config(config(
            "[server.timeouts]\nrequest_timeout_ms = 250\n",
            "dev",
        ))
        .build();
    // Time is paused: the runtime jumps to the deadline once nothing else can run.
    client.post("/slow").send().await.assert_status(408);
}

#[autumn_web::test]
async fn scoped_routes_are_served_under_their_prefix() {
    let client = TestApp::new().scoped("/admin/", routes![create]).build();
    client.post("/admin/orders").send().await.assert_ok();
    client.post("/orders").send().await.assert_status(404);
}

#[autumn_web::test]
async fn errors_choose_their_status_and_never_leak_internals() {
    #[post("/missing")]
    async fn missing() -> AutumnResult<&'static str> {
        Err(AutumnError::not_found("no such order"))
    }
    #[post("/broken")]
    async fn broken() -> AutumnResult<&'static str> {
        let secret: Result<(), std::io::Error> =
            Err(std::io::Error::other("password=hunter2 at db.internal"));
        secret?;
        Ok("unreachable")
    }
    let client = TestApp::new().routes(routes![missing, broken]).build();
    let missing = client.post("/missing").send().await;
    missing.assert_status(404);
    assert!(missing.text().contains("no such order"));
    let broken = client.post("/broken").send().await;
    broken.assert_status(500);
    assert_eq!(
        broken.header("content-type"),
        Some("application/problem+json")
    );
    assert!(!broken.text().contains("hunter2"), "{}", broken.text());
}

/// Under a production profile the startup report warns once per setting
/// left unsafe, naming its key; the same settings under `staging` are not
/// warned about (they are not refused anywhere).
#[test]
fn a_production_launch_warns_about_each_unsafe_setting() {
    let unsafe_settings = "[idempotency]\nallow_memory_in_production = true\n[session]\nallow_memory_in_production = true\nsecure = false\n[security.headers]\nhsts = false\n[actuator]\nmetrics_on_app_port = true\n";
    let (_logging, logs) = logs::capture();
    assert!(
        configured(config(unsafe_settings, "prod"))
            .try_build()
            .is_ok()
    );
    for key in [
        "actuator.metrics_on_app_port = true: /actuator",
        "session.secure = false: session cookies",
        "security.headers.hsts = false: browsers",
    ] {
        let lines = logs.lines_with(key);
        assert_eq!(lines.len(), 1, "{key}: {}", logs.text());
        assert!(lines[0].contains("WARN"), "{lines:?}");
    }
    let (_logging, logs) = logs::capture();
    assert!(
        configured(config(unsafe_settings, "staging"))
            .try_build()
            .is_ok()
    );
    assert!(
        logs.lines_with("actuator.metrics_on_app_port = true: /actuator")
            .is_empty(),
        "{}",
        logs.text()
    );
}

#[tokio::test]
async fn a_test_app_from_a_builder_keeps_the_builders_configuration() {
    let off = AutumnConfig::from_toml_str("[actuator]\nenabled = false\n").expect("config");
    let client = TestApp::from_builder(autumn_web::app().with_config(off.clone())).build();
    client
        .get("/actuator/health")
        .send()
        .await
        .assert_status(404);
    // One given to the test app wins over the builder's.
    let client = TestApp::from_builder(autumn_web::app().with_config(off))
        .with_config(AutumnConfig::default())
        .build();
    client
        .get("/actuator/health")
        .send()
        .await
        .assert_status(200);
}
