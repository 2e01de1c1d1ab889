//! PostgreSQL over TLS, against real servers with `ssl = on` and
//! certificates made at run time: each `sslmode` does what libpq's does,
//! through the real pool (both statement-cache modes), its health check and
//! migrations, and the connector the test databases use; a refused
//! certificate says which check failed.
#![cfg(feature = "postgres")]

use std::time::Duration;

use autumn_base::database::{DbConnection, DbError, DbPool, FRAMEWORK_MIGRATIONS, PgConnector};
use autumn_testkit::postgres::PrivatePostgres;
use autumn_testkit::tls::TestCa;

/// Whether the server sees the pool's connection as encrypted (its own
/// view, `pg_stat_ssl`), after the startup check and the framework
/// migrations ran on the pool.
async fn pooled_ssl(url: &str, statement_cache: bool) -> Result<bool, DbError> {
    use diesel::sql_types::Bool;
    use diesel_async::RunQueryDsl as _;
    let pool = DbPool::with_statement_cache(url, 2, Duration::from_secs(5), statement_cache)?;
    pool.health_check().await?;
    FRAMEWORK_MIGRATIONS.run(&pool).await?;
    let DbConnection::Postgres(mut conn) = pool.get().await? else {
        panic!("a PostgreSQL pool gave another connection");
    };
    let ssl = diesel::select(diesel::dsl::sql::<Bool>(
        "(SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid())",
    ))
    .get_result::<bool>(&mut *conn)
    .await?;
    Ok(ssl)
}

/// The same through [`PgConnector::connect`], as `TestDatabase` connects.
async fn client_ssl(url: &str) -> Result<bool, DbError> {
    let client = PgConnector::from_url(url)?.connect().await?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| DbError::Connect(e.to_string()))?;
    Ok(row.get(0))
}

/// `sslrootcert=<path>`, the path percent-encoded as a URL wants it.
fn root_cert(path: &std::path::Path) -> String {
    let mut out = String::from("sslrootcert=");
    for byte in path.display().to_string().bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The error text, for a result that must be an error.
fn refused(result: Result<bool, DbError>) -> DbError {
    match result {
        Ok(ssl) => panic!("connected (ssl = {ssl}) where it must be refused"),
        Err(error) => error,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_encrypts_pooled_connections_in_both_statement_cache_modes() {
    let server = PrivatePostgres::start_tls(&["localhost"], true);
    // No certificate check with `require` alone: the certificate names
    // `localhost`, and an address that it does not name still connects.
    let url = server.url_at("127.0.0.1", "sslmode=require");
    assert!(
        pooled_ssl(&url, true)
            .await
            .expect("with a statement cache"),
        "encrypted"
    );
    assert!(
        pooled_ssl(&url, false)
            .await
            .expect("without one (PgBouncer mode)"),
        "encrypted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_connects_to_the_host_the_certificate_names_and_refuses_another() {
    let server = PrivatePostgres::start_tls(&["localhost"], true);
    let query = format!("sslmode=verify-full&{}", root_cert(server.ca_file()));

    let named = server.url_at("localhost", &query);
    assert!(
        pooled_ssl(&named, true).await.expect("localhost"),
        "encrypted"
    );
    assert!(
        pooled_ssl(&named, false)
            .await
            .expect("localhost, no cache"),
        "encrypted"
    );
    assert!(
        client_ssl(&named).await.expect("the connector"),
        "encrypted"
    );

    // The same server at an address the certificate does not name.
    let unnamed = server.url_at("127.0.0.1", &query);
    for error in [
        refused(pooled_ssl(&unnamed, true).await),
        refused(pooled_ssl(&unnamed, false).await),
        refused(client_ssl(&unnamed).await),
    ] {
        assert!(matches!(error, DbError::Tls(_)), "{error:?}");
        let text = error.to_string();
        assert!(
            text.starts_with("TLS: the server's certificate is not valid for host 127.0.0.1"),
            "{text}"
        );
        assert!(text.contains("localhost"), "says what it names: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_ca_checks_the_chain_and_not_the_name() {
    let server = PrivatePostgres::start_tls(&["localhost"], true);
    let right = root_cert(server.ca_file());
    let dir = tempfile::tempdir().expect("temp dir");
    let other_file = dir.path().join("other-ca.pem");
    std::fs::write(&other_file, TestCa::new().pem()).expect("write another CA");
    let other = root_cert(&other_file);

    // The right CA: connects, even at an address the certificate does not
    // name (verify-ca checks no name).
    let url = server.url_at("127.0.0.1", &format!("sslmode=verify-ca&{right}"));
    assert!(
        pooled_ssl(&url, true).await.expect("the right CA"),
        "encrypted"
    );

    // Another CA: refused, saying so, in verify-ca and in require with a
    // CA file (which libpq checks as verify-ca).
    for mode in ["verify-ca", "require"] {
        let url = server.url_at("localhost", &format!("sslmode={mode}&{other}"));
        let error = refused(pooled_ssl(&url, true).await);
        assert!(matches!(error, DbError::Tls(_)), "{mode}: {error:?}");
        let text = error.to_string();
        assert!(
            text.contains(
                "the server's certificate is not signed by the CA certificates in sslrootcert"
            ) && text.contains("other-ca.pem"),
            "{mode}: {text}"
        );
    }

    // `prefer` with that CA: the handshake fails, and as libpq it connects
    // again without TLS, which this server's pg_hba.conf allows.
    let url = server.url_at("localhost", &format!("sslmode=prefer&{other}"));
    assert!(
        !pooled_ssl(&url, true).await.expect("prefer falls back"),
        "not encrypted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_stays_plaintext_and_the_default_prefer_encrypts() {
    let server = PrivatePostgres::start_tls(&["localhost"], true);
    let disabled = server.url_at("localhost", "sslmode=disable");
    assert!(
        !pooled_ssl(&disabled, true).await.expect("disable"),
        "not encrypted"
    );
    assert!(
        !pooled_ssl(&disabled, false)
            .await
            .expect("disable, no cache"),
        "not encrypted"
    );
    let default = server.url_at("localhost", "");
    assert!(
        pooled_ssl(&default, true).await.expect("the default"),
        "encrypted"
    );
    assert!(
        pooled_ssl(&default, false)
            .await
            .expect("the default, no cache"),
        "encrypted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_turns_to_tls_when_the_server_refuses_plaintext() {
    // pg_hba.conf: hostssl only.
    let server = PrivatePostgres::start_tls(&["localhost"], false);
    let allow = server.url_at("localhost", "sslmode=allow");
    assert!(pooled_ssl(&allow, true).await.expect("allow"), "encrypted");
    let error = refused(pooled_ssl(&server.url_at("localhost", "sslmode=disable"), true).await);
    assert!(
        error.to_string().contains("no encryption"),
        "the server's own refusal: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_is_refused_by_a_server_without_tls() {
    let server = PrivatePostgres::start();
    let url = format!("{}?sslmode=require", server.url());
    let error = refused(pooled_ssl(&url, true).await);
    assert!(matches!(error, DbError::Tls(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "TLS: the server does not accept TLS connections (its ssl setting is off)"
    );
    // The default, prefer, carries on without TLS there.
    assert!(
        !pooled_ssl(&server.url(), true).await.expect("prefer"),
        "not encrypted"
    );
}

#[test]
fn bad_tls_settings_are_refused_before_connecting() {
    let error = DbPool::new(
        "postgres://app@db.internal/app?sslmode=verify_full",
        1,
        Duration::from_secs(1),
    )
    .expect_err("an unknown sslmode");
    assert_eq!(
        error.to_string(),
        "TLS: sslmode \"verify_full\" is not a mode PostgreSQL knows (one of disable, allow, prefer, require, verify-ca, verify-full)"
    );
    let error = DbPool::new(
        "postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
        1,
        Duration::from_secs(1),
    )
    .expect_err("a missing CA file");
    assert!(
        error
            .to_string()
            .starts_with("TLS: cannot read sslrootcert /nonexistent/ca.pem: "),
        "{error}"
    );
    let error = DbPool::new(
        "postgres://app@db.internal/app?sslmode=require&sslrootcert=system",
        1,
        Duration::from_secs(1),
    )
    .expect_err("a weak mode with the platform's roots");
    assert!(
        error
            .to_string()
            .contains("sslrootcert=system needs sslmode=verify-full"),
        "{error}"
    );
}
