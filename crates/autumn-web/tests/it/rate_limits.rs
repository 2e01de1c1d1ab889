//! `[rate_limit.rules]` through the real launch path: who is refused, what
//! the refusal and every limited answer say, and that a limit of N holds
//! for a fleet of replicas sharing Redis, not per replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use autumn_web::clock::ManualClock;
use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient};

use crate::support::redis_support;

/// Runs of the handlers, by the `x-test` header each test sends: tests
/// run in parallel in one process.
static RUNS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

fn ran(headers: &HeaderMap) {
    let test = headers
        .get("x-test")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut runs = RUNS.lock().expect("the runs");
    *runs
        .get_or_insert_with(HashMap::new)
        .entry(test)
        .or_default() += 1;
}

fn runs(test: &str) -> usize {
    RUNS.lock()
        .expect("the runs")
        .as_ref()
        .and_then(|runs| runs.get(test).copied())
        .unwrap_or_default()
}

#[post("/orders")]
async fn place_order(headers: HeaderMap) -> (StatusCode, &'static str) {
    ran(&headers);
    (StatusCode::CREATED, "placed")
}

#[get("/orders")]
async fn list_orders() -> &'static str {
    "[]"
}

#[post("/login", rate_limit = "login")]
async fn login(headers: HeaderMap) -> &'static str {
    ran(&headers);
    "in"
}

#[post("/logout")]
async fn logout() -> &'static str {
    "out"
}

fn config(toml: &str) -> AutumnConfig {
    AutumnConfig::from_toml_str(toml).expect("valid config")
}

/// The app, with `/login` (which names the rule `login`) when `config`
/// defines that rule.
fn client(config: AutumnConfig, clock: &Arc<ManualClock>) -> TestClient {
    let mut routes = routes![place_order, list_orders, logout];
    if config.rate_limit.rules.contains_key("login") {
        routes.extend(routes![login]);
    }
    TestApp::from_builder(
        autumn_web::app()
            .routes(routes)
            .rate_limit_key("account", |parts| {
                parts
                    .headers
                    .get("x-account")
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_owned)
            }),
    )
    .with_config(config)
    .with_clock(clock.clone())
    .build()
}

fn launch_error(config: AutumnConfig) -> String {
    match TestApp::from_builder(autumn_web::app().routes(routes![login, logout]))
        .with_config(config)
        .try_build()
    {
        Ok(_) => panic!("expected a launch error"),
        Err(error) => error.to_string(),
    }
}

/// Statuses of `count` posts to `path`, each with the header pairs given.
async fn post_statuses(
    client: &TestClient,
    path: &str,
    headers: &[(&str, &str)],
    count: usize,
) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..count {
        let mut request = client.post(path);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        statuses.push(request.send().await.status().as_u16());
    }
    statuses
}

const ORDERS_RULE: &str = r#"
[rate_limit.rules.orders]
limit = 3
window_secs = 60
routes = ["POST /orders"]
"#;

#[tokio::test]
async fn past_its_limit_a_client_gets_429_with_retry_after_and_the_handler_does_not_run() {
    let clock = Arc::new(ManualClock::new());
    let app = client(config(ORDERS_RULE), &clock);
    let test = ("x-test", "past_its_limit");
    // `t`: seconds until the quota is whole again, a third of the window
    // per request used.
    for (remaining, whole_in) in [(2, 20), (1, 40), (0, 60)] {
        let placed = app.post("/orders").header(test.0, test.1).send().await;
        placed
            .assert_status(201)
            .assert_header("ratelimit-policy", "\"orders\";q=3;w=60")
            .assert_header(
                "ratelimit",
                &format!("\"orders\";r={remaining};t={whole_in}"),
            );
    }
    let refused = app.post("/orders").header(test.0, test.1).send().await;
    refused
        .assert_status(429)
        .assert_header("content-type", "application/problem+json")
        // One request's share of the window: 60 s / 3.
        .assert_header("retry-after", "20")
        .assert_header("ratelimit", "\"orders\";r=0;t=20");
    let problem: serde_json::Value = refused.json();
    assert_eq!(problem["code"], "rate_limited");
    assert_eq!(problem["rule"], "orders");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("3 per 60 s")),
        "{problem}"
    );
    // The rule covers POST only: listing is not counted.
    app.get("/orders").send().await.assert_status(200);
    assert!(
        app.get("/orders")
            .send()
            .await
            .header("ratelimit")
            .is_none()
    );
    assert_eq!(runs(test.1), 3);
    // One request's share of the window later, one more goes through.
    clock.advance(Duration::from_secs(20));
    app.post("/orders").send().await.assert_status(201);
    app.post("/orders").send().await.assert_status(429);
}

#[tokio::test]
async fn a_browser_gets_the_refusal_as_a_page() {
    let clock = Arc::new(ManualClock::new());
    let app = client(config(ORDERS_RULE), &clock);
    post_statuses(&app, "/orders", &[], 3).await;
    let page = app
        .post("/orders")
        .header("accept", "text/html")
        .send()
        .await;
    page.assert_status(429).assert_header("retry-after", "20");
    assert!(
        page.header("content-type")
            .is_some_and(|value| value.starts_with("text/html")),
        "{:?}",
        page.headers()
    );
    assert!(page.text().contains("Too Many Requests"), "{}", page.text());
}

#[tokio::test]
async fn a_route_macro_names_its_rule_and_other_routes_are_not_counted() {
    let clock = Arc::new(ManualClock::new());
    let app = client(
        config("[rate_limit.rules.login]\nlimit = 2\nwindow_secs = 300\n"),
        &clock,
    );
    let test = [("x-test", "route_macro")];
    assert_eq!(
        post_statuses(&app, "/login", &test, 4).await,
        [200, 200, 429, 429]
    );
    assert_eq!(runs("route_macro"), 2);
    // A rule without `routes` covers only the routes that name it.
    assert_eq!(post_statuses(&app, "/logout", &[], 4).await, [200; 4]);
}

#[tokio::test]
async fn a_client_counted_by_an_apps_function_has_a_count_of_its_own() {
    let clock = Arc::new(ManualClock::new());
    let app = client(
        config("[rate_limit.rules.login]\nlimit = 2\nby = \"key:account\"\n"),
        &clock,
    );
    let alice = [("x-account", "alice")];
    let bob = [("x-account", "bob")];
    assert_eq!(
        post_statuses(&app, "/login", &alice, 3).await,
        [200, 200, 429]
    );
    // Another account from the same address is not held back by alice.
    assert_eq!(post_statuses(&app, "/login", &bob, 2).await, [200, 200]);
    // No account: counted by the client's address, a count of its own.
    assert_eq!(post_statuses(&app, "/login", &[], 3).await, [200, 200, 429]);
}

#[tokio::test]
async fn one_rule_covers_every_route_under_a_prefix_by_whole_segments() {
    let clock = Arc::new(ManualClock::new());
    let app = client(
        config("[rate_limit.rules.all_posts]\nlimit = 1\nroutes = [\"POST /*\"]\n"),
        &clock,
    );
    // One count per rule and client, shared by the routes it covers.
    assert_eq!(post_statuses(&app, "/logout", &[], 1).await, [200]);
    assert_eq!(post_statuses(&app, "/orders", &[], 1).await, [429]);
    app.get("/orders").send().await.assert_status(200);
}

#[tokio::test]
async fn rules_that_cannot_work_stop_the_launch_naming_the_key() {
    let unknown = launch_error(config("[rate_limit.rules.other]\nlimit = 5\n"));
    assert!(
        unknown.contains("rate_limit.rules") && unknown.contains("rate_limit = \"login\""),
        "{unknown}"
    );
    let no_function = launch_error(config(
        "[rate_limit.rules.login]\nlimit = 5\nby = \"key:tenant_header\"\n",
    ));
    assert!(
        no_function.contains("rate_limit.rules.login.by")
            && no_function.contains("rate_limit_key(\"tenant_header\""),
        "{no_function}"
    );
    for (toml, key) in [
        (
            "[rate_limit.rules.login]\nlimit = 0\n",
            "rate_limit.rules.login.limit",
        ),
        (
            "[rate_limit.rules.login]\nlimit = 5\nwindow_secs = 0\n",
            "rate_limit.rules.login.window_secs",
        ),
        (
            "[rate_limit.rules.login]\nlimit = 5\nroutes = [\"login\"]\n",
            "rate_limit.rules.login.routes",
        ),
        (
            "[rate_limit]\nbackend = \"database\"\n",
            "rate_limit.backend",
        ),
    ] {
        let error = AutumnConfig::from_toml_str(toml).expect_err(toml);
        assert_eq!(error.key(), Some(key), "{error}");
    }
    let by = AutumnConfig::from_toml_str("[rate_limit.rules.login]\nlimit = 5\nby = \"ip\"\n")
        .expect_err("an unknown client kind");
    assert!(by.to_string().contains("client_ip"), "{by}");
}

#[tokio::test]
async fn disabled_rate_limits_count_nothing() {
    let clock = Arc::new(ManualClock::new());
    let app = client(
        config(&format!("[rate_limit]\nenabled = false\n{ORDERS_RULE}")),
        &clock,
    );
    assert_eq!(post_statuses(&app, "/orders", &[], 5).await, [201; 5]);
}

#[tokio::test]
async fn the_actuator_counts_what_each_rule_decided() {
    let clock = Arc::new(ManualClock::new());
    let app = client(
        config(&format!(
            "[actuator]\nmetrics_on_app_port = true\n{ORDERS_RULE}"
        )),
        &clock,
    );
    post_statuses(&app, "/orders", &[], 5).await;
    let metrics: serde_json::Value = app.get("/actuator/metrics").send().await.json();
    assert_eq!(metrics["rate_limits"]["orders"]["allowed"], 3, "{metrics}");
    assert_eq!(metrics["rate_limits"]["orders"]["limited"], 2, "{metrics}");
    let text = app.get("/actuator/prometheus").send().await.text();
    assert!(
        text.contains("autumn_rate_limit_requests_total{rule=\"orders\",outcome=\"limited\"} 2"),
        "{text}"
    );
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;

    fn redis_config(prefix: &str, rules: &str) -> AutumnConfig {
        let url = redis_support::require_redis();
        config(&format!(
            "[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\n{rules}"
        ))
    }

    const FIVE_A_MINUTE: &str =
        "[rate_limit.rules.orders]\nlimit = 5\nroutes = [\"POST /orders\"]\n";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_limit_of_n_lets_n_through_across_two_replicas_not_n_each() {
        let prefix = redis_support::unique_prefix();
        let clock = Arc::new(ManualClock::new());
        let a = client(redis_config(&prefix, FIVE_A_MINUTE), &clock);
        let b = client(redis_config(&prefix, FIVE_A_MINUTE), &clock);
        let mut statuses = Vec::new();
        for _ in 0..5 {
            statuses.extend(post_statuses(&a, "/orders", &[], 1).await);
            statuses.extend(post_statuses(&b, "/orders", &[], 1).await);
        }
        assert_eq!(
            statuses.iter().filter(|s| **s == 201).count(),
            5,
            "{statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 429).count(),
            5,
            "{statuses:?}"
        );
        // The counts follow the injected clock on Redis too.
        clock.advance(Duration::from_secs(12));
        assert_eq!(post_statuses(&b, "/orders", &[], 2).await, [201, 429]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_requests_on_two_replicas_let_exactly_n_through() {
        let prefix = redis_support::unique_prefix();
        let clock = Arc::new(ManualClock::new());
        let a = Arc::new(client(redis_config(&prefix, FIVE_A_MINUTE), &clock));
        let b = Arc::new(client(redis_config(&prefix, FIVE_A_MINUTE), &clock));
        let tasks: Vec<_> = (0..40)
            .map(|n| {
                let replica = if n % 2 == 0 { a.clone() } else { b.clone() };
                tokio::spawn(async move { replica.post("/orders").send().await.status().as_u16() })
            })
            .collect();
        let mut statuses = Vec::new();
        for task in tasks {
            statuses.push(task.await.expect("a request"));
        }
        assert_eq!(
            statuses.iter().filter(|s| **s == 201).count(),
            5,
            "{statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 429).count(),
            35,
            "{statuses:?}"
        );
    }

    #[tokio::test]
    async fn the_counts_in_redis_name_no_client() {
        let prefix = redis_support::unique_prefix();
        let clock = Arc::new(ManualClock::new());
        let app = client(
            redis_config(
                &prefix,
                "[rate_limit.rules.login]\nlimit = 5\nby = \"key:account\"\n",
            ),
            &clock,
        );
        post_statuses(&app, "/login", &[("x-account", "alice@example.com")], 1).await;
        let keys = redis_support::keys_under(&redis_support::redis_url(), &prefix).await;
        let counts: Vec<_> = keys.iter().filter(|key| key.contains(":rl:")).collect();
        assert_eq!(counts.len(), 1, "{keys:?}");
        assert!(
            counts[0].starts_with(&format!("{prefix}:rl:login:k:")),
            "{keys:?}"
        );
        assert!(!counts[0].contains("alice"), "{keys:?}");
    }

    /// A Redis that is not there: a port nothing listens on.
    fn unreachable(rules: &str) -> AutumnConfig {
        let port = autumn_testkit::free_port();
        config(&format!(
            "[rate_limit]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"redis://127.0.0.1:{port}\"\n{rules}"
        ))
    }

    #[tokio::test]
    async fn an_unreachable_redis_refuses_mutations_and_lets_reads_through_by_default() {
        let clock = Arc::new(ManualClock::new());
        let app = client(
            unreachable("[rate_limit.rules.orders]\nlimit = 5\nroutes = [\"/orders\"]\n"),
            &clock,
        );
        let refused = app
            .post("/orders")
            .header("x-test", "unreachable")
            .send()
            .await;
        refused
            .assert_status(503)
            .assert_header("retry-after", "1")
            .assert_header("content-type", "application/problem+json");
        let problem: serde_json::Value = refused.json();
        assert_eq!(problem["code"], "rate_limit_unavailable");
        // The store's error (which names the host) is not sent.
        assert!(!refused.text().contains("127.0.0.1"), "{}", refused.text());
        app.get("/orders").send().await.assert_status(200);
        assert_eq!(runs("unreachable"), 0);
    }

    #[tokio::test]
    async fn a_rule_that_fails_open_lets_mutations_through_uncounted() {
        let clock = Arc::new(ManualClock::new());
        let app = client(
            unreachable(
                "[rate_limit.rules.orders]\nlimit = 1\nroutes = [\"POST /orders\"]\non_store_error = \"open\"\n",
            ),
            &clock,
        );
        assert_eq!(post_statuses(&app, "/orders", &[], 3).await, [201; 3]);
    }
}

/// Unknown API tokens, counted per client address.
mod api_tokens {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use autumn_web::api_token::{
        ApiTokenFuture, ApiTokenRecord, ApiTokenStore, ApiTokens, MemoryApiTokenStore,
        RequireApiTokenLayer,
    };

    use super::*;

    /// A memory token store that counts its look-ups.
    #[derive(Default)]
    struct Counted {
        inner: MemoryApiTokenStore,
        finds: AtomicUsize,
    }

    impl ApiTokenStore for Counted {
        fn insert<'a>(&'a self, record: &'a ApiTokenRecord) -> ApiTokenFuture<'a, ()> {
            self.inner.insert(record)
        }

        fn find<'a>(&'a self, prefix: &'a str) -> ApiTokenFuture<'a, Option<ApiTokenRecord>> {
            self.finds.fetch_add(1, Ordering::SeqCst);
            self.inner.find(prefix)
        }

        fn revoke<'a>(&'a self, prefix: &'a str, now_millis: u64) -> ApiTokenFuture<'a, bool> {
            self.inner.revoke(prefix, now_millis)
        }

        fn touch<'a>(
            &'a self,
            prefix: &'a str,
            now_millis: u64,
            stale_before_millis: u64,
        ) -> ApiTokenFuture<'a, bool> {
            self.inner.touch(prefix, now_millis, stale_before_millis)
        }

        fn list<'a>(&'a self, principal: &'a str) -> ApiTokenFuture<'a, Vec<ApiTokenRecord>> {
            self.inner.list(principal)
        }
    }

    /// A well-formed token no store of the app knows.
    async fn unknown_token() -> String {
        let elsewhere = ApiTokens::new(Arc::new(MemoryApiTokenStore::new()));
        let created = elsewhere
            .create("nobody", "elsewhere", None)
            .await
            .expect("a token");
        created.token().to_owned()
    }

    async fn statuses(app: &TestClient, token: &str, count: usize) -> Vec<u16> {
        let mut statuses = Vec::new();
        for _ in 0..count {
            let response = app
                .get("/orders")
                .header("authorization", &format!("Bearer {token}"))
                .send()
                .await;
            statuses.push(response.status().as_u16());
        }
        statuses
    }

    #[tokio::test]
    async fn unknown_tokens_from_one_address_are_refused_before_they_are_looked_up() {
        let store = Arc::new(Counted::default());
        let tokens = ApiTokens::new(store.clone());
        let real = tokens
            .create("agent-7", "sync", None)
            .await
            .expect("a token");
        let clock = Arc::new(ManualClock::new());
        let app = TestApp::from_builder(
            autumn_web::app()
                .routes(routes![list_orders])
                .api_tokens(RequireApiTokenLayer::new(tokens)),
        )
        .with_config(config(
            "[rate_limit.rules.api_token_failures]\nlimit = 3\nwindow_secs = 60\n",
        ))
        .with_clock(clock.clone())
        .build();
        let guess = unknown_token().await;
        assert_eq!(statuses(&app, &guess, 3).await, [401, 401, 401]);
        // The fourth unknown token is looked up, and refused past the rule.
        assert_eq!(statuses(&app, &guess, 1).await, [429]);
        assert_eq!(store.finds.load(Ordering::SeqCst), 4);
        // While held back, nothing from this address is looked up.
        assert_eq!(statuses(&app, &guess, 10).await, [429; 10]);
        assert_eq!(statuses(&app, real.token(), 1).await, [429]);
        assert_eq!(store.finds.load(Ordering::SeqCst), 4);
        // Once the rule lets one more through, a real token works.
        clock.advance(Duration::from_secs(20));
        assert_eq!(statuses(&app, real.token(), 1).await, [200]);
    }

    #[tokio::test]
    async fn api_tokens_count_unknown_tokens_thirty_a_minute_unless_configured() {
        let app = TestApp::from_builder(autumn_web::app().routes(routes![list_orders]).api_tokens(
            RequireApiTokenLayer::new(ApiTokens::new(Arc::new(MemoryApiTokenStore::new()))),
        ))
        .with_clock(Arc::new(ManualClock::new()))
        .build();
        let guess = unknown_token().await;
        let seen = statuses(&app, &guess, 31).await;
        assert_eq!(seen[..30], [401; 30]);
        assert_eq!(seen[30], 429);
    }
    /// Two replicas on one Redis count unknown tokens together.
    #[cfg(feature = "redis")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_replicas_count_unknown_tokens_together() {
        let prefix = redis_support::unique_prefix();
        let url = redis_support::require_redis();
        let replica = || {
            TestApp::from_builder(
                autumn_web::app()
                    .routes(routes![list_orders])
                    .api_tokens(RequireApiTokenLayer::new(ApiTokens::new(Arc::new(
                        MemoryApiTokenStore::new(),
                    )))),
            )
            .with_config(config(&format!(
                "[rate_limit]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\n\
                 [rate_limit.rules.api_token_failures]\nlimit = 3\nwindow_secs = 60\n"
            )))
            .with_clock(Arc::new(ManualClock::new()))
            .build()
        };
        let (a, b) = (replica(), replica());
        let guess = unknown_token().await;
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.extend(statuses(&a, &guess, 1).await);
            seen.extend(statuses(&b, &guess, 1).await);
        }
        // Three unknown tokens in all, not three per replica.
        assert_eq!(seen, [401, 401, 401, 429, 429, 429]);
    }
}

/// A handler's own count, on two replicas sharing Redis.
#[cfg(feature = "redis")]
mod handler_counts {
    use autumn_web::rate_limit::RateLimits;

    use super::*;

    #[post("/reset")]
    async fn reset(limits: RateLimits, headers: HeaderMap) -> AutumnResult<&'static str> {
        let account = headers
            .get("x-account")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        limits.check("reset_account", account).await?;
        Ok("sent")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_handlers_count_holds_across_two_replicas() {
        let prefix = redis_support::unique_prefix();
        let url = redis_support::require_redis();
        let replica = || {
            TestApp::from_builder(autumn_web::app().routes(routes![reset]))
                .with_config(config(&format!(
                    "[rate_limit]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\n\
                     [rate_limit.rules.reset_account]\nlimit = 2\nwindow_secs = 3600\n"
                )))
                .with_clock(Arc::new(ManualClock::new()))
                .build()
        };
        let (a, b) = (replica(), replica());
        let ada = [("x-account", "ada")];
        let mut seen = Vec::new();
        for _ in 0..2 {
            seen.extend(post_statuses(&a, "/reset", &ada, 1).await);
            seen.extend(post_statuses(&b, "/reset", &ada, 1).await);
        }
        assert_eq!(seen, [200, 200, 429, 429]);
        // Another account has a count of its own.
        assert_eq!(
            post_statuses(&b, "/reset", &[("x-account", "grace")], 1).await,
            [200]
        );
    }
}

/// A flood against a full store logs a summary, not a line per request.
#[tokio::test]
async fn a_flood_against_a_full_store_logs_one_warning_not_one_per_request() {
    let (guard, logs) = crate::support::logs::capture();
    let app = TestApp::from_builder(autumn_web::app().routes(routes![place_order]))
        .with_config(config("[idempotency.memory]\nmax_entries = 1\n"))
        .idempotent()
        .build();
    let mut statuses = Vec::new();
    for n in 0..200 {
        let key = format!("flood-{n}");
        statuses.push(
            app.post("/orders")
                .header("idempotency-key", &key)
                .send()
                .await
                .status()
                .as_u16(),
        );
    }
    drop(guard);
    // The first key fits; every other one is refused, the store full.
    assert_eq!(statuses[0], 201);
    assert!(statuses[1..].iter().all(|s| *s == 503), "{statuses:?}");
    let warnings = logs.lines_with("a guard's store failed");
    assert_eq!(warnings.len(), 1, "{}", logs.text());
    assert!(warnings[0].contains("idempotency:full=1"), "{warnings:?}");
}

/// One client floods the app with new keys and new form tokens as fast as
/// it can, from its own address, while another does ordinary keyed and
/// form traffic from another: the ordinary client is never refused, stays
/// fast, and the store does not grow past what the flooder's rule allows.
mod flood {
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Instant;

    use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};

    use super::*;

    #[get("/form")]
    async fn form(token: SubmitToken, field: SubmitFormField) -> Html<String> {
        Html(format!(
            "<form method=post action=/form>{}</form>",
            submit_token_field(&token, &field).into_string()
        ))
    }

    #[post("/form")]
    async fn submit() -> &'static str {
        "saved"
    }

    /// Rules for every write, per client address; a memory store small
    /// enough that the flood would fill it without them.
    const CONFIG: &str = "[actuator]\nmetrics_on_app_port = true\n\
        [idempotency.memory]\nmax_entries = 400\n\
        [rate_limit.rules.writes]\nlimit = 100\nroutes = [\"POST /*\"]\n";

    fn address(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    /// The percentile `p` (0 to 100) of `durations`.
    fn percentile(mut durations: Vec<Duration>, p: usize) -> Duration {
        durations.sort();
        let at = (durations.len() * p / 100).min(durations.len().saturating_sub(1));
        durations[at]
    }

    /// 40 keyed orders and 40 forms with a fresh token: 80 writes, all
    /// answered (no refusal) with a p99 under a second.
    async fn ordinary_traffic(ordinary: &TestClient) {
        let mut durations = Vec::new();
        let mut statuses = Vec::new();
        for n in 0..40 {
            let started = Instant::now();
            let keyed = ordinary
                .post("/orders")
                .header("idempotency-key", &format!("ordinary-{n}"))
                .send()
                .await;
            durations.push(started.elapsed());
            statuses.push(keyed.status().as_u16());
            let page = ordinary.get("/form").send().await.text();
            let token = crate::support::token_in(&page);
            let started = Instant::now();
            let posted = ordinary
                .post("/form")
                .form(&[("_submit_token", token.as_str())])
                .send()
                .await;
            durations.push(started.elapsed());
            statuses.push(posted.status().as_u16());
        }
        assert!(
            statuses.iter().all(|s| *s < 400),
            "the ordinary client was refused: {statuses:?}"
        );
        let p99 = percentile(durations, 99);
        assert!(p99 < Duration::from_secs(1), "p99 {p99:?}");
    }

    async fn flood(client: TestClient, requests: usize) -> Vec<u16> {
        let mut statuses = Vec::with_capacity(requests);
        for n in 0..requests {
            let response = if n % 2 == 0 {
                client
                    .post("/orders")
                    .header("idempotency-key", &format!("flood-{n}"))
                    .send()
                    .await
            } else {
                // A made-up token: a value never minted.
                client
                    .post("/form")
                    .form(&[("_submit_token", format!("made-up-{n}").as_str())])
                    .send()
                    .await
            };
            statuses.push(response.status().as_u16());
        }
        statuses
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flooding_client_is_held_to_its_rule_and_another_is_served_as_usual() {
        let served = crate::support::served::Served::start(
            autumn_web::app()
                .routes(routes![place_order, form, submit])
                .with_config(config(CONFIG))
                .idempotent(),
        )
        .await;
        let base = served.base();
        let client = TestClient::for_server(&base);
        let began = Instant::now();
        let flooder = tokio::spawn(flood(client.from_address(address(2)), 2_000));
        let ordinary = client.from_address(address(3));
        ordinary_traffic(&ordinary).await;
        let flooded = flooder.await.expect("the flood runs");
        // The flooder: held to its burst of 100 and the 100 a minute that
        // refill while the test runs, the rest refused (429) before any
        // store, so the store never fills (no 503 for anyone).
        let refilled = began.elapsed().as_secs_f64() * 100.0 / 60.0;
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a few seconds' worth"
        )]
        let allowed = 100 + refilled.ceil() as usize;
        let through = flooded.iter().filter(|s| **s != 429).count();
        assert!(
            through <= allowed,
            "{through} flood writes went through, {allowed} allowed"
        );
        assert!(flooded.len() - through >= 1_800, "{flooded:?}");
        assert_eq!(
            flooded.iter().filter(|s| **s == 503).count(),
            0,
            "{flooded:?}"
        );
        // The store holds what the two rules allowed, not the flood.
        let metrics: serde_json::Value = ordinary.get("/actuator/metrics").send().await.json();
        let entries = metrics["idempotency"]["store"]["entries"]
            .as_u64()
            .expect("the memory store's size");
        assert!(
            entries <= (allowed + 80) as u64,
            "{entries} entries: {metrics}"
        );
        served.stop().await;
    }
    /// No rule at all: the flooder's quota alone keeps the store from
    /// filling. It holds at most its 150 records and tokens; everything
    /// past them is refused (429) while its neighbour is served.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flooding_client_without_a_rule_is_held_to_its_quota() {
        let served = crate::support::served::Served::start(
            autumn_web::app()
                .routes(routes![place_order, form, submit])
                .with_config(config(
                    "[actuator]\nmetrics_on_app_port = true\n\
                     [idempotency.memory]\nmax_entries = 400\n\
                     [idempotency.quota]\nmax_records = 150\n",
                ))
                .idempotent(),
        )
        .await;
        let client = TestClient::for_server(&served.base());
        let flooder = tokio::spawn(flood(client.from_address(address(5)), 2_000));
        let ordinary = client.from_address(address(6));
        ordinary_traffic(&ordinary).await;
        let flooded = flooder.await.expect("the flood runs");
        let through = flooded.iter().filter(|s| **s < 400).count();
        assert_eq!(through, 150, "the flooder holds its quota, no more");
        assert_eq!(
            flooded.iter().filter(|s| **s == 429).count(),
            2_000 - 150,
            "{flooded:?}"
        );
        let metrics: serde_json::Value = ordinary.get("/actuator/metrics").send().await.json();
        let entries = metrics["idempotency"]["store"]["entries"]
            .as_u64()
            .expect("the memory store's size");
        assert!(entries <= 150 + 80, "{entries} entries: {metrics}");
        let refused = metrics["idempotency"]["quota_refusals"]
            .as_u64()
            .unwrap_or(0)
            + metrics["submit_token"]["quota_refusals"]
                .as_u64()
                .unwrap_or(0);
        assert_eq!(refused, 2_000 - 150, "{metrics}");
        served.stop().await;
    }
}
