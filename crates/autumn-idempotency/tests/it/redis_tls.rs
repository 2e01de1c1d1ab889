//! The Redis store over TLS and with ACL users, against redis-servers of the
//! test's own: TLS-only servers (`--port 0`, so nothing answers in
//! plaintext) with certificates made for the test by a CA of its own, and a
//! server whose default user is off.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use crate::support::app::Fixture;
use crate::support::redis::{ClientCerts, RedisServer, unique_prefix};
use autumn_base::redis::{RedisConnection, RedisTls};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{IdempotencyStore, RedisIdempotencyStore};
use autumn_testkit::tls::TestCa;
use http::StatusCode;

fn store(
    connection: RedisConnection,
    prefix: &str,
    clock: &ManualClock,
) -> Arc<RedisIdempotencyStore> {
    Arc::new(
        RedisIdempotencyStore::from_connection(connection, prefix)
            .with_clock(Arc::new(clock.clone())),
    )
}

/// Guards a call that must fail fast: a regression fails instead of hanging.
async fn fast<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not answer within 10 s"))
}

/// `CONFIG GET name` as the connection sees it.
async fn config_get(connection: &RedisConnection, name: &'static str) -> String {
    let pair: Vec<String> = connection
        .run(|mut link| async move {
            ::redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut link)
                .await
        })
        .await
        .expect("CONFIG GET");
    pair.get(1).cloned().unwrap_or_default()
}

/// A store request made through the layer and replayed: the store works.
async fn a_keyed_request_is_replayed(connection: RedisConnection) {
    let clock = ManualClock::new();
    let f = Fixture::with_store(
        store(connection, &unique_prefix(), &clock),
        clock,
        |layer| layer,
    );
    assert_eq!(
        f.post("/orders").key("tls-1").send().await.status,
        StatusCode::CREATED
    );
    assert!(f.post("/orders").key("tls-1").send().await.replayed());
    assert_eq!(f.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_passes_the_conformance_suite_over_tls() {
    let ca = TestCa::new();
    let server = RedisServer::with_tls(&ca, ClientCerts::NotAsked);
    let tls = RedisTls::new().with_ca_file(ca.ca_file());
    let url = server.url();
    assert!(url.starts_with("rediss://localhost:"), "{url}");

    let connection = RedisConnection::with_tls(&url, &tls).expect("a rediss:// URL");
    assert!(connection.is_tls());
    // The server has no plaintext port: what answers is the TLS port.
    assert_eq!(config_get(&connection, "port").await, "0");
    assert_eq!(
        config_get(&connection, "tls-port").await,
        server.port().to_string()
    );

    crate::support::conformance::run_all_shared(|clocks| {
        let prefix = unique_prefix();
        let connection = RedisConnection::with_tls(&url, &tls).expect("a rediss:// URL");
        clocks
            .iter()
            .map(|clock| store(connection.clone(), &prefix, clock) as Arc<dyn IdempotencyStore>)
            .collect()
    })
    .await;
}

#[tokio::test]
async fn a_plaintext_client_gets_no_answer_from_the_tls_port() {
    let ca = TestCa::new();
    let server = RedisServer::with_tls(&ca, ClientCerts::NotAsked);
    let plain = RedisConnection::new(&format!("redis://127.0.0.1:{}", server.port()))
        .expect("a redis:// URL");
    assert!(!plain.is_tls());
    fast("plaintext ping", plain.ping())
        .await
        .expect_err("the port speaks TLS only");
}

#[tokio::test]
async fn a_server_certificate_signed_by_another_ca_is_refused() {
    let ca = TestCa::new();
    let server = RedisServer::with_tls(&ca, ClientCerts::NotAsked);
    let other = TestCa::new();

    let trusting_another = RedisConnection::with_tls(
        &server.url(),
        &RedisTls::new().with_ca_file(other.ca_file()),
    )
    .expect("a rediss:// URL");
    let error = fast("ping", trusting_another.ping())
        .await
        .expect_err("the server's CA is not trusted")
        .to_string();
    assert!(
        error.contains(&format!("Redis at {} did not answer PING", server.url())),
        "{error}"
    );
    assert!(error.contains("invalid peer certificate"), "{error}");
    assert!(error.contains("UnknownIssuer"), "{error}");

    // Without a CA file the built-in roots are used: a private CA is not
    // among them.
    let built_in = RedisConnection::new(&server.url()).expect("a rediss:// URL");
    let error = fast("ping", built_in.ping())
        .await
        .expect_err("a private CA is not a built-in root")
        .to_string();
    assert!(error.contains("UnknownIssuer"), "{error}");
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let ca = TestCa::new();
    let server = RedisServer::with_tls(&ca, ClientCerts::NotAsked);
    let tls = RedisTls::new().with_ca_file(ca.ca_file());
    // The certificate names localhost, 127.0.0.1 and ::1; the server also
    // listens on 127.0.0.2, which it does not name.
    let url = format!("rediss://127.0.0.2:{}", server.port());
    let error = fast(
        "ping",
        RedisConnection::with_tls(&url, &tls).expect("a URL").ping(),
    )
    .await
    .expect_err("the name does not match")
    .to_string();
    assert!(error.contains("invalid peer certificate"), "{error}");
    assert!(
        error.contains("certificate not valid for name \"127.0.0.2\""),
        "{error}"
    );
}

#[tokio::test]
async fn a_server_that_requires_a_client_certificate_takes_ours_and_refuses_a_client_without_one() {
    let ca = TestCa::new();
    let server = RedisServer::with_tls(&ca, ClientCerts::Required);

    let anonymous =
        RedisConnection::with_tls(&server.url(), &RedisTls::new().with_ca_file(ca.ca_file()))
            .expect("a rediss:// URL");
    fast("ping", anonymous.ping())
        .await
        .expect_err("the server asks for a client certificate");

    let tls = RedisTls::new()
        .with_ca_file(ca.ca_file())
        .with_client_cert(ca.client_cert(), ca.client_key());
    let connection = RedisConnection::with_tls(&server.url(), &tls).expect("a rediss:// URL");
    fast("ping", connection.ping())
        .await
        .expect("our certificate is accepted");
    a_keyed_request_is_replayed(connection).await;
}

#[test]
fn tls_files_that_cannot_be_used_are_named_when_the_connection_is_built() {
    let ca = TestCa::new();
    let url = "rediss://localhost:6380";
    let missing = ca.dir().join("missing.pem");
    let error = RedisConnection::with_tls(url, &RedisTls::new().with_ca_file(&missing))
        .expect_err("no such file")
        .to_string();
    assert!(
        error.contains(&format!("CA file {}", missing.display())),
        "{error}"
    );
    assert!(error.contains("cannot read it"), "{error}");

    // A key that is not the certificate's.
    let other = TestCa::new();
    let error = RedisConnection::with_tls(
        url,
        &RedisTls::new().with_client_cert(ca.client_cert(), other.client_key()),
    )
    .expect_err("mismatched key")
    .to_string();
    assert!(error.contains("client key file"), "{error}");
    assert!(
        error.contains("cannot be used with the certificate"),
        "{error}"
    );

    // A certificate where the key should be.
    let error = RedisConnection::with_tls(
        url,
        &RedisTls::new().with_client_cert(ca.client_cert(), ca.client_cert()),
    )
    .expect_err("not a key")
    .to_string();
    assert!(error.contains("holds no usable PEM private key"), "{error}");

    // TLS files with a URL that does not use TLS would be ignored.
    let error = RedisConnection::with_tls(
        "redis://localhost:6379",
        &RedisTls::new().with_ca_file(ca.ca_file()),
    )
    .expect_err("not rediss://")
    .to_string();
    assert!(error.contains("does not use TLS"), "{error}");
}

#[tokio::test]
async fn an_acl_user_with_its_password_works_and_a_wrong_password_is_refused_without_showing_it() {
    let server = RedisServer::with_acl_user("orders-app", "correct-horse");

    let connection = RedisConnection::new(&server.url_as("orders-app", "correct-horse"))
        .expect("a URL with an ACL user");
    fast("ping", connection.ping())
        .await
        .expect("the ACL user logs in");
    let whoami: String = connection
        .run(|mut link| async move {
            ::redis::cmd("ACL")
                .arg("WHOAMI")
                .query_async(&mut link)
                .await
        })
        .await
        .expect("ACL WHOAMI");
    assert_eq!(whoami, "orders-app");
    a_keyed_request_is_replayed(connection).await;

    let wrong = RedisConnection::new(&server.url_as("orders-app", "battery-staple"))
        .expect("a URL with an ACL user");
    let error = fast("ping", wrong.ping())
        .await
        .expect_err("wrong password")
        .to_string();
    assert_eq!(
        error,
        format!(
            "Redis at redis://orders-app:***@127.0.0.1:{} refused the user and password in the URL (AUTH failed): the password is wrong, or the ACL user does not exist or is disabled",
            server.port()
        )
    );
    assert!(!error.contains("battery-staple"), "{error}");

    // The default user is off: no credentials, no entry.
    let anonymous = RedisConnection::new(&server.url()).expect("a URL");
    let error = fast("ping", anonymous.ping())
        .await
        .expect_err("the default user is off")
        .to_string();
    assert!(error.contains("NOAUTH"), "{error}");
}
