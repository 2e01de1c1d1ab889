//! The orders API under TestApp, and the real binary over a socket.

use std::process::Command;

use autumn_web::config::AutumnConfig;
use autumn_web::test::{ServerProcess, TestApp, TestClient, TestDatabase};
use orders::{Order, Orders};
use serde_json::json;

/// Every order the app lists.
async fn listed(client: &TestClient) -> Vec<Order> {
    client.get("/orders").send().await.json()
}

/// The same scenario on any backend: create, list, reject, retry.
async fn create_list_reject_and_retry(client: &TestClient) {
    let created = client
        .post("/orders")
        .json(&json!({"item": "widget", "qty": 2}))
        .send()
        .await;
    created.assert_status(201);
    let order: Order = created.json();
    assert_eq!((order.item.as_str(), order.qty), ("widget", 2));
    assert_eq!(listed(client).await, vec![order.clone()]);

    for bad in [
        json!({"item": " ", "qty": 1}),
        json!({"item": "widget", "qty": 0}),
    ] {
        let rejected = client.post("/orders").json(&bad).send().await;
        rejected.assert_status(422);
        assert_eq!(
            rejected.header("content-type"),
            Some("application/problem+json")
        );
    }
    assert_eq!(
        listed(client).await.len(),
        1,
        "a rejected order creates nothing"
    );

    let send = || {
        client
            .post("/orders")
            .header("idempotency-key", "order-1")
            .json(&json!({"item": "gadget", "qty": 1}))
            .send()
    };
    let first = send().await;
    let retry = send().await;
    retry.assert_header("x-idempotent-replayed", "true");
    assert_eq!(first.json::<Order>(), retry.json::<Order>());
    assert_eq!(listed(client).await.len(), 2, "the retry created nothing");
}

fn client(config: &str) -> TestClient {
    TestApp::from_builder(orders::app(Orders::default()))
        .with_config(AutumnConfig::from_toml_str(config).expect("config"))
        .build()
}

#[tokio::test]
async fn on_the_memory_store() {
    create_list_reject_and_retry(&client("")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_for_orders_and_keys() {
    let database = TestDatabase::sqlite();
    create_list_reject_and_retry(&client(&format!(
        "{}[idempotency]\nbackend = \"database\"\n",
        database.config_toml()
    )))
    .await;
}

fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_with_keys_in_redis_over_two_replicas() {
    let database = TestDatabase::postgres();
    let config = format!(
        "[database]\nurl = \"{}\"\n[idempotency]\nbackend = \"redis\"\n\
         [idempotency.redis]\nurl = \"{}\"\nkey_prefix = \"orders-test:{}\"\n",
        database.url(),
        redis_url(),
        uuid::Uuid::new_v4().simple()
    );
    let (a, b) = (client(&config), client(&config));
    create_list_reject_and_retry(&a).await;
    // A duplicate that lands on the other replica replays, and the order
    // exists once in the shared database.
    let order = json!({"item": "shared", "qty": 3});
    let first = a
        .post("/orders")
        .header("idempotency-key", "x")
        .json(&order)
        .send()
        .await;
    let retry = b
        .post("/orders")
        .header("idempotency-key", "x")
        .json(&order)
        .send()
        .await;
    retry.assert_header("x-idempotent-replayed", "true");
    assert_eq!(first.json::<Order>(), retry.json::<Order>());
    assert_eq!(listed(&b).await.len(), 3);
}

fn start_binary() -> ServerProcess {
    ServerProcess::start(Command::new(env!("CARGO_BIN_EXE_orders")))
}

async fn http(method: &str, url: &str, key: Option<&str>, body: &str) -> (u16, String) {
    use http_body_util::BodyExt as _;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut request = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .expect("request");
    let response = client.request(request).await.expect("the server answers");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn the_binary_serves_on_the_configured_port() {
    let server = start_binary();
    // The same client as TestApp's, over a real socket to the process.
    let client = server.client();
    let order = json!({"item": "widget", "qty": 2});
    let post = |key: Option<&str>, body: &serde_json::Value| {
        let request = client.post("/orders").json(body);
        match key {
            Some(key) => request.header("idempotency-key", key),
            None => request,
        }
    };

    let first = post(Some("k1"), &order).send().await;
    first.assert_status(201);
    let replay = post(Some("k1"), &order).send().await;
    replay.assert_status(201);
    replay.assert_header("x-idempotent-replayed", "true");
    assert_eq!(replay.text(), first.text());
    post(Some("k1"), &json!({"item": "gadget", "qty": 1}))
        .send()
        .await
        .assert_status(422);
    post(None, &json!({"item": "", "qty": 1}))
        .send()
        .await
        .assert_status(422);

    assert_eq!(listed(&client).await.len(), 1);
}

/// Runs the binary with only `env`, expecting it to refuse to start; returns
/// what it printed on stderr.
fn refused_start(env: &[(&str, &str)]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_orders"))
        .env_clear()
        .envs(env.iter().copied())
        .env("AUTUMN_SERVER__PORT", "0")
        .env("NO_COLOR", "1")
        .output()
        .expect("the orders binary runs");
    assert!(!output.status.success(), "it must not start: {env:?}");
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    // Printed once: not again in the log on standard output.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let message = stderr.trim_start_matches("autumn: ");
    assert!(!stdout.contains(message), "printed twice: {stdout}");
    stderr
}

#[test]
fn startup_fails_fast_with_one_line_naming_the_key() {
    let redis = refused_start(&[("AUTUMN_IDEMPOTENCY__BACKEND", "redis")]);
    assert!(redis.contains("AUTUMN_IDEMPOTENCY__REDIS__URL"), "{redis}");

    let production = refused_start(&[("AUTUMN_PROFILE", "prod")]);
    assert!(
        production.contains("idempotency.allow_memory_in_production"),
        "{production}"
    );

    let database = refused_start(&[("AUTUMN_IDEMPOTENCY__BACKEND", "database")]);
    assert!(database.contains("database.url"), "{database}");

    let typo = refused_start(&[("AUTUMN_SERVER__PROT", "80")]);
    assert!(
        typo.contains("server.prot") && typo.contains("AUTUMN_SERVER__PROT"),
        "{typo}"
    );
}

/// `orders create-token NAME` against `database_url`: the token it prints.
fn create_token(database_url: &str, name: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_orders"))
        .args(["create-token", name])
        .env("AUTUMN_DATABASE__URL", database_url)
        .env("NO_COLOR", "1")
        .output()
        .expect("the orders binary runs");
    assert!(
        output.status.success(),
        "create-token failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let tokens: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("atk_"))
        .collect();
    assert_eq!(tokens.len(), 1, "the token, once: {stdout}");
    tokens[0].to_owned()
}

async fn http_as(url: &str, token: Option<&str>, key: &str, body: &str) -> (u16, String) {
    use http_body_util::BodyExt as _;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut request = http::Request::builder()
        .method("POST")
        .uri(url)
        .header("content-type", "application/json")
        .header("idempotency-key", key);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .expect("request");
    let response = client.request(request).await.expect("the server answers");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn create_token_prints_a_token_the_api_accepts_and_a_refreshed_token_replays() {
    let dir = tempfile::tempdir().expect("temp dir");
    let database = format!("sqlite://{}", dir.path().join("orders.db").display());
    let first_token = create_token(&database, "agent-1");

    let mut command = Command::new(env!("CARGO_BIN_EXE_orders"));
    command
        .env("AUTUMN_DATABASE__URL", &database)
        .env("ORDERS_REQUIRE_TOKEN", "true");
    let server = start_binary_with(command);
    let orders = server.url("/orders");
    let order = r#"{"item":"widget","qty":2}"#;

    let (status, refused) = http_as(&orders, None, "t1", order).await;
    assert_eq!(status, 401, "{refused}");
    let (status, first) = http_as(&orders, Some(&first_token), "t1", order).await;
    assert_eq!(status, 201, "{first}");

    // The agent refreshes its token (same principal) and retries.
    let refreshed = create_token(&database, "agent-1");
    assert_ne!(refreshed, first_token);
    let (status, retry) = http_as(&orders, Some(&refreshed), "t1", order).await;
    assert_eq!((status, &retry), (201, &first), "the retry replays");

    // Another agent with the same key runs its own order.
    let other = create_token(&database, "agent-2");
    let (status, own) = http_as(&orders, Some(&other), "t1", order).await;
    assert_eq!(status, 201);
    assert_ne!(own, first);
}

fn start_binary_with(command: Command) -> ServerProcess {
    ServerProcess::start(command)
}

#[test]
fn the_log_has_no_colours_when_standard_output_is_not_a_terminal() {
    // The startup report is logged, then the database check fails.
    let output = Command::new(env!("CARGO_BIN_EXE_orders"))
        .env_clear()
        .env("AUTUMN_SERVER__PORT", "0")
        .env(
            "AUTUMN_DATABASE__URL",
            "postgres://postgres@127.0.0.1:1/none",
        )
        .output()
        .expect("the orders binary runs");
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("INFO"), "the startup report: {stdout}");
    assert!(stdout.contains("profile: dev"), "{stdout}");
    assert!(
        !stdout.contains('\u{1b}'),
        "no escape codes in a pipe: {stdout:?}"
    );
}

/// `orders idempotency ARGS` with `env`: the JSON line it printed.
fn idempotency_command(env: &[(String, String)], args: &[&str]) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_orders"))
        .arg("idempotency")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .output()
        .expect("the orders binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{args:?} failed: {}{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Standard output is the answer alone, so `| jq` works; the log went
    // to standard error.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one line of JSON on stdout: {stdout}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("INFO"),
        "the log goes to stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(lines[0]).expect("JSON")
}

/// The binary's `idempotency inspect|evict` on the store a running replica
/// of it uses: Redis, then PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_inspects_and_evicts_a_key_of_a_running_replica() {
    let redis = vec![
        ("AUTUMN_IDEMPOTENCY__BACKEND".to_owned(), "redis".to_owned()),
        ("AUTUMN_IDEMPOTENCY__REDIS__URL".to_owned(), redis_url()),
        (
            "AUTUMN_IDEMPOTENCY__REDIS__KEY_PREFIX".to_owned(),
            format!("orders-cli:{}", uuid::Uuid::new_v4().simple()),
        ),
    ];
    let schema = TestDatabase::postgres();
    let database = vec![
        (
            "AUTUMN_IDEMPOTENCY__BACKEND".to_owned(),
            "database".to_owned(),
        ),
        ("AUTUMN_DATABASE__URL".to_owned(), schema.url().to_owned()),
    ];
    for env in [redis, database] {
        let server = ServerProcess::start({
            let mut command = Command::new(env!("CARGO_BIN_EXE_orders"));
            command.envs(env.iter().map(|(k, v)| (k, v)));
            command
        });
        let orders = server.url("/orders");
        let (status, first) = http(
            "POST",
            &orders,
            Some("cli-k"),
            r#"{"item":"widget","qty":2}"#,
        )
        .await;
        assert_eq!(status, 201, "{first}");

        let report = idempotency_command(&env, &["inspect", "cli-k", "--path", "/orders"]);
        assert_eq!(report["state"], "recorded", "{report}");
        assert_eq!(report["status"], 201, "{report}");
        assert!(report.get("body").is_none(), "{report}");
        // A recorded body is shown only where the operator allowed it.
        let mut allowed = env.clone();
        allowed.push((
            "AUTUMN_IDEMPOTENCY__ADMIN__ALLOW_BODIES".to_owned(),
            "true".to_owned(),
        ));
        let with_body = idempotency_command(
            &allowed,
            &["inspect", "cli-k", "--path", "/orders", "--body"],
        );
        assert_eq!(with_body["body"], first.as_str());

        let evicted = idempotency_command(
            &env,
            &["evict", "cli-k", "--path", "/orders", "--by", "test"],
        );
        assert_eq!(evicted["evicted"], true, "{evicted}");
        let gone = idempotency_command(&env, &["inspect", "cli-k", "--path", "/orders"]);
        assert_eq!(gone["state"], "absent", "{gone}");
        // The running replica sees the eviction: the key runs again.
        let (status, again) = http(
            "POST",
            &orders,
            Some("cli-k"),
            r#"{"item":"widget","qty":2}"#,
        )
        .await;
        assert_eq!(status, 201);
        assert_ne!(again, first);
    }
}

#[tokio::test]
async fn a_stopped_server_has_written_every_log_line_before_it_exits() {
    use std::io::{BufRead as _, BufReader};
    // Log lines are written in batches; a server stopped by SIGTERM writes
    // the waiting ones (the access line, the shutdown lines) before the
    // process ends, however soon after the last one it does.
    let mut child = Command::new(env!("CARGO_BIN_EXE_orders"))
        .env("AUTUMN_SERVER__PORT", "0")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the orders binary starts");
    let stdout = child.stdout.take().expect("its standard output");
    let (url_sent, url) = tokio::sync::oneshot::channel();
    let reader = std::thread::spawn(move || {
        let mut url_sent = Some(url_sent);
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("listening on http://")
                && let Some(sender) = url_sent.take()
            {
                let url = line[at + "listening on ".len()..]
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let _ = sender.send(url);
            }
            lines.push(line);
        }
        lines
    });
    let base = tokio::time::timeout(std::time::Duration::from_secs(30), url)
        .await
        .expect("the server starts within 30 s")
        .expect("it logs its address");
    let (status, _) = http(
        "POST",
        &format!("{base}/orders"),
        Some("flush-1"),
        r#"{"item":"widget","qty":2}"#,
    )
    .await;
    assert_eq!(status, 201);

    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(terminated.success());
    let exited = child.wait().expect("the server exits");
    assert!(exited.success(), "{exited}");
    let lines = reader.join().expect("the log was read");
    let log = lines.join("\n");
    assert!(
        log.contains("autumn::access: POST /orders 201"),
        "the request's access line: {log}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|line| line.ends_with("autumn stopped")),
        "the last line logged is the last line written: {log}"
    );
}

#[tokio::test]
async fn the_live_counter_streams_the_number_of_orders_as_it_changes() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let server = start_binary();
    let url = server.url("/orders/live");
    let address = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port")
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    stream
        .write_all(b"GET /orders/live HTTP/1.1\r\nhost: t\r\naccept: text/event-stream\r\n\r\n")
        .await
        .expect("write");
    async fn read_until(stream: &mut tokio::net::TcpStream, seen: &mut String, needle: &str) {
        let mut buf = [0_u8; 1024];
        while !seen.contains(needle) {
            let n = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("{needle:?} within 10 s; got {seen:?}"))
                .expect("read");
            assert!(n > 0, "the stream ended: {seen:?}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, "event: orders\ndata: 0\n").await;
    let (status, _) = http(
        "POST",
        &server.url("/orders"),
        Some("live-1"),
        r#"{"item": "widget", "qty": 1}"#,
    )
    .await;
    assert_eq!(status, 201);
    read_until(&mut stream, &mut seen, "event: orders\ndata: 1\n").await;
}

/// The document a client generator reads: every guarded operation names
/// its `Idempotency-Key`, optional here, and the problems a retry can get.
#[tokio::test]
async fn openapi_lists_the_key_and_the_problem_answers_of_every_guarded_operation() {
    let client = client("");
    let document: serde_json::Value = client.get("/openapi.json").send().await.json();
    assert_eq!(document["openapi"], "3.1.0");
    let create = &document["paths"]["/orders"]["post"];
    let key = create["parameters"]
        .as_array()
        .and_then(|parameters| parameters.iter().find(|p| p["name"] == "Idempotency-Key"))
        .expect("the key header");
    assert_eq!(
        (&key["in"], &key["required"]),
        (&json!("header"), &json!(false))
    );
    assert_eq!(create["x-idempotency"]["ttl"], 86_400);
    for status in ["400", "409", "422", "429", "503"] {
        assert_eq!(
            create["responses"][status]["content"]["application/problem+json"]["schema"]["$ref"],
            "#/components/schemas/Problem",
            "{status}"
        );
    }
    assert_eq!(
        create["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/NewOrder"
    );
    assert_eq!(
        create["responses"]["2XX"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Order"
    );
    // A read takes no key.
    let list = &document["paths"]["/orders"]["get"];
    assert!(list.get("x-idempotency").is_none());
}

/// Tools no one here wrote hold the running binary to its document: the
/// OpenAPI validator checks the document itself, then Schemathesis sends
/// generated requests to every operation, valid and invalid, and fails on a
/// server error, a response the document does not describe, or an
/// undocumented status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_the_document_does_not_say() {
    use autumn_testkit::api_tools;
    let server = start_binary();
    let document = server.client().get("/openapi.json").send().await.text();
    api_tools::validate(document.as_bytes());
    let url = server.url("/openapi.json");
    let report = tokio::task::spawn_blocking(move || {
        api_tools::schemathesis(
            &url,
            &[
                "--max-examples",
                "30",
                // `delay_ms` makes the handler wait up to 10 s by design.
                "--max-response-time",
                "15",
                // An endless event stream: it takes no input to vary, and
                // a response that never ends cannot be checked.
                "--exclude-path",
                "/orders/live",
            ],
        )
    })
    .await
    .expect("schemathesis ran");
    // Its stateful phase chained `POST /orders` to `GET /orders/{id}`
    // through the 201's `Location` and the `Order` schema.
    assert!(
        api_tools::stateful_links_covered(&report) >= 1,
        "the stateful phase followed no link:\n{report}"
    );
}
