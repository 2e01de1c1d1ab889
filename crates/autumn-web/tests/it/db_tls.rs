//! An app whose `database.url` asks for TLS (`sslmode=verify-full`) starts
//! and serves database-backed idempotent requests over it, against a real
//! PostgreSQL that accepts only TLS connections; a certificate that does
//! not name the host, or an unknown `sslmode`, fails the launch in one line
//! naming `database.url`.
#![cfg(feature = "postgres")]

use autumn_web::config::AutumnConfig;
use autumn_web::db::{Db, PgConnection};
use autumn_web::prelude::*;
use autumn_web::test::TestApp;
use http::StatusCode;

use crate::support::database::PrivatePostgres;

/// Creates an order and says whether the connection it used is encrypted,
/// as the server sees it.
#[post("/orders")]
async fn create(mut db: Db<PgConnection>) -> Result<(StatusCode, String), (StatusCode, String)> {
    use diesel_async::RunQueryDsl as _;
    let ssl = diesel::select(diesel::dsl::sql::<diesel::sql_types::Bool>(
        "(SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid())",
    ))
    .get_result::<bool>(&mut *db)
    .await
    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok((StatusCode::CREATED, format!("created, ssl={ssl}")))
}

/// The app with `.idempotent()` on the database store at `url`.
fn app(url: &str) -> TestApp {
    let config = AutumnConfig::from_toml_str(&format!(
        "[idempotency]\nbackend = \"database\"\n[database]\nurl = \"{url}\"\npool_size = 2\n"
    ))
    .expect("config");
    TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
        .with_config(config)
}

/// `sslmode=verify-full&sslrootcert=<the server's CA>`.
fn verify_full(server: &PrivatePostgres) -> String {
    format!(
        "sslmode=verify-full&sslrootcert={}",
        server.ca_file().display()
    )
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_on_verify_full_serves_idempotent_requests_over_tls() {
    // pg_hba.conf allows TLS connections only.
    let server = PrivatePostgres::start_tls(&["localhost"], false);
    let url = server.url_at("localhost", &verify_full(&server));
    let client = app(&url).build();

    let first = client
        .post("/orders")
        .header("idempotency-key", "tls-order-1")
        .send()
        .await;
    first.assert_status(StatusCode::CREATED);
    assert_eq!(first.text(), "created, ssl=true");
    assert_eq!(first.header("x-idempotent-replayed"), None);

    // The retry is answered from the record the store kept over TLS.
    let retry = client
        .post("/orders")
        .header("idempotency-key", "tls-order-1")
        .send()
        .await;
    retry.assert_status(StatusCode::CREATED);
    retry.assert_header("x-idempotent-replayed", "true");
    assert_eq!(retry.text(), "created, ssl=true");
}

#[test]
fn a_certificate_for_another_host_fails_the_launch_naming_database_url() {
    let server = PrivatePostgres::start_tls(&["localhost"], false);
    // The certificate names localhost, not 127.0.0.1.
    let url = server.url_at("127.0.0.1", &verify_full(&server));
    let message = launch_error(app(&url));
    assert_eq!(
        message,
        format!(
            "cannot use the database at database.url ({url}): TLS: the server's certificate is not valid for host 127.0.0.1 (it names localhost)"
        )
    );
}

#[test]
fn an_unknown_sslmode_fails_the_launch_naming_database_url() {
    let url = "postgres://app:secret@db.internal/app?sslmode=verify_full";
    let message = launch_error(app(url));
    assert_eq!(
        message,
        "cannot use the database at database.url (postgres://app:***@db.internal/app?sslmode=verify_full): TLS: sslmode \"verify_full\" is not a mode PostgreSQL knows (one of disable, allow, prefer, require, verify-ca, verify-full)"
    );
}
