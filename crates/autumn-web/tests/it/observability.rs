//! What the app tells operators: the startup report, the access log and
//! request ids, JSON lines, the boot warnings about lock and request
//! timeouts, and the debug events of the idempotency layer.

use crate::support::database;

use std::io::Write;
use std::sync::{Arc, Mutex};

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::test::TestApp;
use tracing_subscriber::fmt::MakeWriter;

/// Log lines, captured for one test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

fn capturing(level: tracing::Level) -> (Captured, impl tracing::Subscriber) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(level)
        .with_ansi(false)
        .finish();
    (captured, subscriber)
}

#[post("/orders")]
async fn create() -> &'static str {
    "created"
}

fn build_with(toml: &str) -> String {
    let (captured, subscriber) = capturing(tracing::Level::INFO);
    tracing::subscriber::with_default(subscriber, || {
        TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
            .with_config(AutumnConfig::from_toml_str(toml).expect("config"))
            .build();
    });
    captured.text()
}

#[test]
fn a_lock_shorter_than_the_request_timeout_warns_at_boot() {
    let log = build_with(
        "[server.timeouts]\nrequest_timeout_ms = 90000\n[idempotency]\nin_flight_ttl_secs = 60\n",
    );
    assert!(log.contains("WARN"), "{log}");
    assert!(log.contains("idempotency.in_flight_ttl_secs (60s) is shorter than server.timeouts.request_timeout_ms (90000ms)"), "{log}");

    let fine = build_with("[server.timeouts]\nrequest_timeout_ms = 30000\n");
    assert!(
        !fine.contains("in_flight_ttl_secs"),
        "no warning when the lock outlives the timeout: {fine}"
    );

    let default = build_with("");
    assert!(
        !default.contains("in_flight_ttl_secs"),
        "the default request timeout (30s) sits below the default lock TTL (60s): {default}"
    );

    let note = build_with("[server.timeouts]\nrequest_timeout_ms = 0\n");
    assert!(
        note.contains("INFO") && note.contains("no server.timeouts.request_timeout_ms set"),
        "{note}"
    );
}

/// A duplicate's wait that the request timeout would cut short is named at
/// boot, once, and the app still starts.
#[test]
fn a_wait_longer_than_the_request_timeout_warns_at_boot() {
    let log = build_with(
        "[server.timeouts]\nrequest_timeout_ms = 5000\n\
         [idempotency]\nin_flight_wait_ms = 8000\n\
         [security.submit_token]\nin_flight_wait_ms = 5000\n",
    );
    let warned = |key: &str| {
        log.lines()
            .filter(|line| line.contains("WARN") && line.contains(&format!("{key} (")))
            .count()
    };
    assert_eq!(warned("idempotency.in_flight_wait_ms"), 1, "{log}");
    assert!(
        log.contains("idempotency.in_flight_wait_ms (8000 ms) is not shorter than server.timeouts.request_timeout_ms (5000 ms)"),
        "{log}"
    );
    assert_eq!(
        warned("security.submit_token.in_flight_wait_ms"),
        1,
        "a wait equal to the timeout never runs out: {log}"
    );

    for fine in [
        "[server.timeouts]\nrequest_timeout_ms = 5000\n[idempotency]\nin_flight_wait_ms = 2000\n",
        "[server.timeouts]\nrequest_timeout_ms = 0\n[idempotency]\nin_flight_wait_ms = 60000\n",
        "",
    ] {
        let log = build_with(fine);
        assert!(!log.contains("in_flight_wait_ms"), "{fine}: {log}");
    }
}

#[post("/slow", in_flight_wait_ms = 9000)]
async fn slow() -> &'static str {
    "created"
}

#[test]
fn a_route_whose_wait_outlasts_the_request_timeout_warns_at_boot() {
    let build = |toml: &str| {
        let (captured, subscriber) = capturing(tracing::Level::INFO);
        tracing::subscriber::with_default(subscriber, || {
            TestApp::from_builder(autumn_web::app().routes(routes![create, slow]).idempotent())
                .with_config(AutumnConfig::from_toml_str(toml).expect("config"))
                .build();
        });
        captured.text()
    };
    let log = build("[server.timeouts]\nrequest_timeout_ms = 5000\n");
    let warnings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("in_flight_wait_ms"))
        .collect();
    assert_eq!(warnings.len(), 1, "only the slow route: {log}");
    assert!(
        warnings[0].contains("route `slow` (POST /slow) in_flight_wait_ms (9000 ms)"),
        "{log}"
    );
    let log = build("[server.timeouts]\nrequest_timeout_ms = 10000\n");
    assert!(!log.contains("in_flight_wait_ms"), "{log}");
}

/// `sha256:` and the first 12 hex digits of the SHA-256 of `value`.
fn digest(value: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(value.as_bytes());
    let hex: String = digest[..6]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Logs the layer's events for two posts with one key, at `level`.
fn keyed_log(level: tracing::Level) -> String {
    let (captured, subscriber) = capturing(level);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            let client = TestApp::new().routes(routes![create]).idempotent().build();
            for _ in 0..2 {
                client
                    .post("/orders")
                    .header("idempotency-key", "observed-key")
                    .send()
                    .await;
            }
        });
    });
    captured.text()
}

#[test]
fn the_layer_emits_debug_events_with_the_keys_digest_and_whether_it_replayed() {
    let log = keyed_log(tracing::Level::DEBUG);
    let hash = digest("observed-key");
    assert!(
        log.contains(&format!(
            "idempotency.key_hash={hash} idempotency.replayed=false"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "idempotency.key_hash={hash} idempotency.replayed=true"
        )),
        "{log}"
    );
    // The raw key, the only secret an anonymous caller has, and the storage
    // key, which evicts a record, never appear below trace.
    assert!(!log.contains("observed-key"), "{log}");
    assert!(!log.contains("idem:v1:"), "{log}");
}

#[test]
fn raw_keys_never_appear_even_at_trace() {
    let log = keyed_log(tracing::Level::TRACE);
    let line = log
        .lines()
        .find(|line| line.contains("idempotency key and its storage key"))
        .unwrap_or_else(|| panic!("no trace line for the key: {log}"));
    assert!(line.contains("TRACE"), "{line}");
    assert!(
        line.contains(&format!("idempotency.key_hash={}", digest("observed-key"))),
        "{line}"
    );
    assert!(line.contains("storage_key_hash=sha256:"), "{line}");
    assert!(!log.contains("observed-key"), "{log}");
    assert!(!log.contains("idem:v1:"), "{log}");
}

// ---- access log, request id, JSON lines, the startup report ----------------------------------

#[post("/traced")]
async fn traced(id: autumn_web::RequestId) -> (StatusCode, String) {
    tracing::info!("inside the handler");
    (StatusCode::CREATED, id.to_string())
}

/// What serving the requests `requests` makes logs, with the subscriber
/// `subscriber` and the configuration `toml`; the responses' request ids
/// and bodies.
fn serve_logged(
    subscriber: impl tracing::Subscriber + Send + Sync + 'static,
    toml: &str,
    sent_ids: &[Option<&str>],
) -> Vec<(String, String)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            let client = TestApp::new()
                .routes(routes![traced])
                .with_config(AutumnConfig::from_toml_str(toml).expect("config"))
                .build();
            let mut answers = Vec::new();
            for sent in sent_ids {
                let mut request = client.post("/traced");
                if let Some(id) = sent {
                    request = request.header("x-request-id", id);
                }
                let response = request.send().await;
                response.assert_status(StatusCode::CREATED);
                let id = response
                    .header("x-request-id")
                    .expect("the response carries its request id")
                    .to_owned();
                answers.push((id, response.text()));
            }
            answers
        })
    })
}

#[test]
fn every_request_has_an_access_log_line_at_info_with_its_request_id() {
    let (captured, subscriber) = capturing(tracing::Level::INFO);
    let answers = serve_logged(subscriber, "", &[None]);
    let (id, body) = &answers[0];
    assert_eq!(id.len(), 32, "a generated id: {id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    assert_eq!(body, id, "the handler sees the id the response carries");

    let log = captured.text();
    let access: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("autumn::access"))
        .collect();
    assert_eq!(access.len(), 1, "one line per request: {log}");
    let line = access[0];
    assert!(line.contains(" INFO "), "{line}");
    assert!(line.contains("POST /traced 201"), "{line}");
    assert!(
        line.contains("method=POST path=/traced status=201 latency_ms="),
        "{line}"
    );
    assert!(line.contains(&format!("request_id={id}")), "{line}");

    // What the handler logs is inside the request's span, so it names the id.
    let inside = log
        .lines()
        .find(|line| line.contains("inside the handler"))
        .unwrap_or_else(|| panic!("the handler's line: {log}"));
    assert!(inside.contains(&format!("request_id={id}")), "{inside}");
}

#[test]
fn a_request_id_sent_is_kept_and_one_unfit_to_log_is_replaced() {
    let (captured, subscriber) = capturing(tracing::Level::INFO);
    let long = "x".repeat(129);
    let answers = serve_logged(
        subscriber,
        "",
        &[Some("edge-4f2a"), Some(long.as_str()), None],
    );
    assert_eq!(answers[0].0, "edge-4f2a");
    assert_eq!(answers[0].1, "edge-4f2a");
    assert_ne!(answers[1].0, long, "too long to keep");
    assert_eq!(answers[1].0.len(), 32);
    assert_ne!(answers[2].0, answers[1].0, "each request its own id");
    let log = captured.text();
    assert!(log.contains("request_id=edge-4f2a"), "{log}");
    assert!(!log.contains(&long), "{log}");
}

#[test]
fn the_access_log_can_be_turned_off() {
    let (captured, subscriber) = capturing(tracing::Level::INFO);
    let answers = serve_logged(subscriber, "[log]\naccess_log = false\n", &[None]);
    assert_eq!(answers[0].0.len(), 32, "the request id stays");
    let log = captured.text();
    assert!(!log.contains("autumn::access"), "{log}");
    assert!(log.contains("inside the handler"), "{log}");
}

#[test]
fn autumn_plain_text_lines_name_the_request_as_a_span_would() {
    // Autumn's own plain-text subscriber keeps the request's scope without a
    // span and writes the access line without an event: the lines must read
    // exactly as tracing's default format (with its span) writes them.
    let captured = Captured::default();
    let subscriber = autumn_web::telemetry::subscriber(
        &autumn_web::config::LogConfig::default(),
        captured.clone(),
        false,
    );
    let sent = Some("plain-7c1e");
    let answers = serve_logged(subscriber, "", &[sent, None]);
    let (default, reference) = capturing(tracing::Level::INFO);
    serve_logged(reference, "", &[sent]);

    let untimed = |line: &str| {
        line.split_once("Z ")
            .map_or(line, |(_, rest)| rest)
            .to_owned()
    };
    let ours: Vec<String> = captured.text().lines().map(untimed).collect();
    let theirs: Vec<String> = default.text().lines().map(untimed).collect();
    let first = |lines: &[String], needle: &str| {
        lines
            .iter()
            .find(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} in {lines:#?}"))
            .clone()
    };
    assert_eq!(
        first(&ours, "inside the handler"),
        format!(
            " INFO request{{request_id=plain-7c1e}}: {}: inside the handler",
            module_path!()
        )
    );
    assert_eq!(
        first(&ours, "inside the handler"),
        first(&theirs, "inside the handler")
    );
    let access = |lines: &[String]| {
        let line = first(lines, "autumn::access");
        // The latency differs from run to run.
        let (head, _) = line.split_once("ms ").expect("a latency");
        head.rsplit_once(' ')
            .expect("status then latency")
            .0
            .to_owned()
    };
    assert_eq!(access(&ours), " INFO autumn::access: POST /traced 201");
    assert_eq!(access(&ours), access(&theirs));
    // The second request's lines name its own id, and the scope ends with
    // the request: nothing after it claims an id.
    let second = &answers[1].0;
    assert!(
        ours.iter().any(|line| line.contains(&format!(
            "request{{request_id={second}}}: {}: inside",
            module_path!()
        ))),
        "{ours:#?}"
    );
    assert_eq!(
        ours.iter().filter(|line| line.contains("request{")).count(),
        2,
        "only the handler's lines are inside a request: {ours:#?}"
    );
}

#[test]
fn the_json_format_writes_one_object_a_line_with_the_request_id() {
    let captured = Captured::default();
    let mut config = autumn_web::config::LogConfig::default();
    config.format = autumn_web::config::LogFormat::Json;
    let subscriber = autumn_web::telemetry::subscriber(&config, captured.clone(), false);
    let answers = serve_logged(subscriber, "[log]\nformat = \"json\"\n", &[None]);
    let id = &answers[0].0;
    let log = captured.text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let access = lines
        .iter()
        .find(|line| line["target"] == "autumn::access")
        .unwrap_or_else(|| panic!("an access line: {log}"));
    assert_eq!(access["level"], "INFO");
    assert_eq!(access["fields"]["status"], 201);
    assert_eq!(access["fields"]["method"], "POST");
    assert_eq!(access["fields"]["path"], "/traced");
    assert_eq!(access["fields"]["request_id"], id.as_str());
    let inside = lines
        .iter()
        .find(|line| line["fields"]["message"] == "inside the handler")
        .unwrap_or_else(|| panic!("the handler's line: {log}"));
    assert_eq!(inside["span"]["request_id"], id.as_str(), "{inside}");
    assert!(!log.contains('\u{1b}'), "no colours in JSON: {log}");
}

#[test]
fn the_startup_report_names_the_profile_the_files_the_stores_and_the_database() {
    let url = database::empty_postgres_schema();
    // Trust authentication takes any password: one to see redacted.
    let url = url.replacen("postgres@", "postgres:hunter2@", 1);
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("autumn.toml"),
        format!("[idempotency]\nbackend = \"database\"\n[database]\nurl = \"{url}\"\n"),
    )
    .expect("write autumn.toml");
    let config =
        AutumnConfig::load_from(dir.path(), &std::collections::HashMap::new()).expect("config");
    let (captured, subscriber) = capturing(tracing::Level::INFO);
    tracing::subscriber::with_default(subscriber, || {
        TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
            .with_config(config)
            .build();
    });
    let log = captured.text();
    let one = |needle: &str| {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(needle)).collect();
        assert_eq!(lines.len(), 1, "one line with {needle:?}: {log}");
        lines[0].to_owned()
    };
    assert!(one("profile: ").contains("INFO"), "{log}");
    let files = one("configuration read from");
    assert!(
        files.contains(&dir.path().join("autumn.toml").display().to_string()),
        "{files}"
    );
    assert!(
        files.contains(&format!(
            "not found: {}",
            dir.path().join("autumn-dev.toml").display()
        )),
        "{files}"
    );
    let stores = one("stores: ");
    assert!(stores.contains("idempotency: database"), "{stores}");
    assert!(stores.contains("session: database"), "{stores}");
    let database = one("database: postgres://");
    assert!(database.contains("postgres:***@"), "{database}");
    assert!(!log.contains("hunter2"), "the password never shows: {log}");
    assert!(
        one("framework migrations applied: ").contains("INFO"),
        "a new schema gets the framework tables: {log}"
    );
}
