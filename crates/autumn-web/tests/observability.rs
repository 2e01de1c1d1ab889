//! What the app tells operators: the boot warning about lock and request
//! timeouts, and the debug events of the idempotency layer.

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
            .config(AutumnConfig::from_toml_str(toml).expect("config"))
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

#[test]
fn the_layer_emits_debug_events_with_the_key_and_whether_it_replayed() {
    let (captured, subscriber) = capturing(tracing::Level::DEBUG);
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
    let log = captured.text();
    assert!(
        log.contains("idempotency.key=observed-key idempotency.replayed=false"),
        "{log}"
    );
    assert!(
        log.contains("idempotency.key=observed-key idempotency.replayed=true"),
        "{log}"
    );
}
