//! Settings that would switch the at-most-once guarantee off stop the app at launch, with one
//! line naming the key and where it was set, whether they came from a file or from code.

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::test::TestApp;

#[post("/orders")]
async fn create() -> &'static str {
    "created"
}

fn launch_error(config: AutumnConfig) -> String {
    let app = TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
        .with_config(config);
    match app.try_build() {
        Ok(_) => panic!("expected a launch error"),
        Err(error) => {
            let message = error.to_string();
            assert!(!message.contains('\n'), "one line: {message}");
            message
        }
    }
}

#[test]
fn a_zero_lock_ttl_set_in_code_stops_the_launch() {
    let mut config = AutumnConfig::default();
    config.idempotency.in_flight_ttl_secs = 0;
    let message = launch_error(config);
    assert!(
        message.starts_with(
            "invalid value for `idempotency.in_flight_ttl_secs` in code: must be at least 1"
        ),
        "{message}"
    );
}

#[test]
fn zero_ttls_for_submit_tokens_and_records_stop_the_launch() {
    for (field, key) in [
        ("record", "idempotency.ttl_secs"),
        ("token record", "security.submit_token.ttl_secs"),
        ("token lock", "security.submit_token.in_flight_ttl_secs"),
    ] {
        let mut config = AutumnConfig::default();
        match field {
            "record" => config.idempotency.ttl_secs = 0,
            "token record" => config.security.submit_token.ttl_secs = 0,
            _ => config.security.submit_token.in_flight_ttl_secs = 0,
        }
        let message = launch_error(config);
        assert!(message.contains(&format!("`{key}`")), "{message}");
    }
}

#[test]
fn a_zero_ttl_in_toml_is_refused_before_the_app_is_built() {
    let error = AutumnConfig::from_toml_str("[idempotency]\nin_flight_ttl_secs = 0\n")
        .expect_err("a zero lock TTL is refused");
    assert_eq!(
        error.to_string(),
        "invalid value for `idempotency.in_flight_ttl_secs` in inline TOML: must be at least 1: \
         a lock that lapses at once lets two overlapping duplicates both run the handler"
    );
}
