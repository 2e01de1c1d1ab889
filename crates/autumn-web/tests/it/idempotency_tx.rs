//! `IdempotencyTx` on PostgreSQL and SQLite through the real launch path:
//! the record commits with the handler's rows or not at all, the fence on
//! the lock's owner, replay only once the lock is gone, recovery points and
//! their binding to the request body, `ShardedDb`, and the round trips
//! `commit` costs.
//!
//! A crash is played by a handler that never returns after its commit (its
//! lock stays until the clock passes it), a lapsed lock by moving the
//! app's `ManualClock` past `in_flight_ttl_secs` mid-handler.
#![cfg(any(feature = "postgres", feature = "sqlite"))]

use crate::support::database;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use autumn_web::clock::ManualClock;
use autumn_web::config::AutumnConfig;
use autumn_web::db::{DbConnection, DbPool};
use autumn_web::test::TestClient;

/// In-flight TTL of every app here (seconds).
const IN_FLIGHT_SECS: u64 = 30;

/// What a handler needs to act as "another request" mid-run: the app's
/// client and clock, found by the test's (unique) key.
#[derive(Clone)]
struct Remote {
    client: TestClient,
    clock: ManualClock,
}

static REMOTES: LazyLock<Mutex<HashMap<String, Remote>>> = LazyLock::new(Mutex::default);
static RUN: AtomicUsize = AtomicUsize::new(0);

/// Signalled by a handler that "crashes", once its work is done, by key.
static CRASHED: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Notify>>>> =
    LazyLock::new(Mutex::default);

/// Stops the handler of the request with `key` for good, telling the test.
async fn crash(key: &str) {
    let notify = CRASHED.lock().expect("crashed").get(key).cloned();
    if let Some(notify) = notify {
        notify.notify_one();
    }
    std::future::pending::<()>().await;
}

/// Sends `request` on a task of its own and returns once its handler
/// "crashed" (see [`crash`]).
async fn send_until_crash(key: &str, request: autumn_web::test::TestRequest) {
    let notify = Arc::new(tokio::sync::Notify::new());
    CRASHED
        .lock()
        .expect("crashed")
        .insert(key.to_owned(), notify.clone());
    // Left running: the "stopped process" never answers.
    let _hung = tokio::spawn(request.send());
    tokio::time::timeout(Duration::from_secs(30), notify.notified())
        .await
        .expect("the handler reached its crash point");
}

fn remote(key: &str) -> Remote {
    REMOTES
        .lock()
        .expect("remotes")
        .get(key)
        .cloned()
        .expect("the test registered its key")
}

fn register(key: &str, client: &TestClient, clock: &ManualClock) {
    REMOTES.lock().expect("remotes").insert(
        key.to_owned(),
        Remote {
            client: client.clone(),
            clock: clock.clone(),
        },
    );
}

fn config(toml: &str) -> AutumnConfig {
    AutumnConfig::from_toml_str(toml).expect("valid config")
}

fn database_config(url: &str, backend: &str) -> AutumnConfig {
    config(&format!(
        "[idempotency]\nbackend = \"{backend}\"\nin_flight_ttl_secs = {IN_FLIGHT_SECS}\n\
         [database]\nurl = \"{url}\"\npool_size = 4\n"
    ))
}

/// Runs `sql` on the database at `url`.
async fn exec(url: &str, sql: &str) {
    use autumn_web::reexports::diesel_async::SimpleAsyncConnection as _;
    let pool = DbPool::new(url, 1, Duration::from_secs(5)).expect("pool");
    #[allow(unreachable_patterns)]
    match pool.get().await.expect("connection") {
        #[cfg(feature = "postgres")]
        DbConnection::Postgres(mut conn) => conn.batch_execute(sql).await.expect("sql"),
        #[cfg(feature = "sqlite")]
        DbConnection::Sqlite(mut conn) => conn.batch_execute(sql).await.expect("sql"),
        _ => unreachable!("a backend this build has"),
    }
}

#[derive(autumn_web::reexports::diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = autumn_web::reexports::diesel::sql_types::BigInt)]
    n: i64,
}

/// `SELECT count(*) AS n ...` on the database at `url`.
async fn count(url: &str, sql: &str) -> i64 {
    use autumn_web::reexports::diesel;
    use autumn_web::reexports::diesel_async::RunQueryDsl as _;
    let pool = DbPool::new(url, 1, Duration::from_secs(5)).expect("pool");
    #[allow(unreachable_patterns)]
    let counted: Count = match pool.get().await.expect("connection") {
        #[cfg(feature = "postgres")]
        DbConnection::Postgres(mut conn) => diesel::sql_query(sql).get_result(&mut *conn).await,
        #[cfg(feature = "sqlite")]
        DbConnection::Sqlite(mut conn) => diesel::sql_query(sql).get_result(&mut *conn).await,
        _ => unreachable!("a backend this build has"),
    }
    .expect("count");
    counted.n
}

/// The routes and tests, once per backend: `$conn` is the connection type,
/// `$url` makes a fresh database with the framework tables, `$id` the
/// dialect's auto-increment key column.
macro_rules! suite {
    ($backend:ident, $conn:ty, $url:expr, $id:literal) => {
        mod $backend {
            use super::*;
            use autumn_web::db::{Db, ShardedDb};
            use autumn_web::idempotency::IdempotencyTx;
            use autumn_web::clock::SharedClock;
            use autumn_web::prelude::*;
            use autumn_web::reexports::diesel;
            use autumn_web::reexports::diesel_async::RunQueryDsl as _;
            use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;
            use autumn_web::test::TestApp;
            use axum::Extension;
            use http::HeaderMap;

            fn mode(headers: &HeaderMap) -> &str {
                headers
                    .get("x-mode")
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or("")
            }

            fn key(headers: &HeaderMap) -> String {
                headers
                    .get("idempotency-key")
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            }

            /// One payment row and the response, in one transaction. The
            /// `x-mode` header (not part of the fingerprint) picks the
            /// trouble to run into.
            #[post("/payments")]
            async fn pay(
                idem: IdempotencyTx,
                mut db: Db<$conn>,
                headers: HeaderMap,
                note: String,
            ) -> AutumnResult<Response> {
                let mode = mode(&headers).to_owned();
                if mode == "late" {
                    // The lock lapses mid-handler and a retry takes the key
                    // and completes before this run commits.
                    let remote = remote(&key(&headers));
                    remote
                        .clock
                        .advance(Duration::from_secs(IN_FLIGHT_SECS + 1));
                    let retry = remote
                        .client
                        .post("/payments")
                        .header("idempotency-key", &key(&headers))
                        .body(note.clone())
                        .send()
                        .await;
                    retry.assert_status(201);
                }
                let run = RUN.fetch_add(1, Ordering::SeqCst);
                let response = db
                    .tx(|conn| {
                        let mode = mode.clone();
                        async move {
                            diesel::sql_query("INSERT INTO payments (note) VALUES ($1)")
                                .bind::<diesel::sql_types::Text, _>(&note)
                                .execute(conn)
                                .await?;
                            if mode == "delete-row" {
                                diesel::sql_query("DELETE FROM autumn_idempotency_keys")
                                    .execute(conn)
                                    .await?;
                            }
                            let response = if mode == "big" {
                                (StatusCode::CREATED, vec![b'x'; 10 * 1024 * 1024 + 1])
                                    .into_response()
                            } else {
                                (StatusCode::CREATED, format!("paid {note} (run {run})"))
                                    .into_response()
                            };
                            let response = idem.commit(conn, response).await?;
                            if mode == "fail-after-commit" {
                                return Err(AutumnError::bad_request("second thoughts"));
                            }
                            Ok(response)
                        }
                        .scope_boxed()
                    })
                    .await?;
                if mode == "hang" {
                    // The process "stops" after its commit: the handler never
                    // returns, so the middleware never rewrites or unlocks.
                    crash(&key(&headers)).await;
                }
                Ok(response)
            }

            /// The spec's multi-step handler: charge once, then commit.
            #[post("/checkout")]
            async fn checkout(
                idem: IdempotencyTx,
                mut db: Db<$conn>,
                headers: HeaderMap,
                _body: String,
            ) -> AutumnResult<Response> {
                match mode(&headers) {
                    "set-only" => {
                        db.tx(|conn| {
                            async move { idem.set_recovery_point(conn, "other").await }
                                .scope_boxed()
                        })
                        .await?;
                        return Ok(StatusCode::NO_CONTENT.into_response());
                    }
                    "commit-only" => {
                        return db
                            .tx(|conn| {
                                async move { idem.commit(conn, (StatusCode::CREATED, "done")).await }
                                    .scope_boxed()
                            })
                            .await;
                    }
                    _ => {}
                }
                let crash = mode(&headers) == "crash";
                if idem.recovery_point(&mut db).await?.is_none() {
                    let step = idem.clone();
                    db.tx(|conn| {
                        async move {
                            diesel::sql_query("INSERT INTO charges DEFAULT VALUES")
                                .execute(conn)
                                .await?;
                            step.set_recovery_point(conn, "charged").await
                        }
                        .scope_boxed()
                    })
                    .await?;
                }
                if crash {
                    super::crash(&key(&headers)).await;
                }
                db.tx(|conn| {
                    async move { idem.commit(conn, (StatusCode::CREATED, "done")).await }
                        .scope_boxed()
                })
                .await
            }

            /// A sign-in that also pays: the session changes before or
            /// after `commit`, so the record must be rewritten with the
            /// session's Set-Cookie before anything replays it.
            #[post("/login")]
            async fn login(
                idem: IdempotencyTx,
                session: Session,
                mut db: Db<$conn>,
                headers: HeaderMap,
            ) -> AutumnResult<Response> {
                let mode = mode(&headers).to_owned();
                let before = mode.starts_with("before");
                if before {
                    session.insert("user", "ann").await?;
                }
                let response = db
                    .tx(|conn| {
                        async move {
                            diesel::sql_query("INSERT INTO payments (note) VALUES ('login')")
                                .execute(conn)
                                .await?;
                            idem.commit(conn, (StatusCode::CREATED, "signed in")).await
                        }
                        .scope_boxed()
                    })
                    .await?;
                if !before {
                    session.insert("user", "ann").await?;
                }
                if mode.ends_with("crash") {
                    crash(&key(&headers)).await;
                }
                Ok(response)
            }

            /// The three calls on a shard's connection.
            #[post("/sharded")]
            async fn sharded(
                idem: IdempotencyTx,
                Extension(pool): Extension<DbPool>,
                headers: HeaderMap,
            ) -> AutumnResult<Response> {
                let mut shard = ShardedDb::<$conn>::from_pool(&pool).await?;
                match mode(&headers) {
                    "set" => idem
                        .set_recovery_point(&mut shard, "x")
                        .await
                        .map(|()| StatusCode::NO_CONTENT.into_response()),
                    "read" => idem
                        .recovery_point(&mut shard)
                        .await
                        .map(|_| StatusCode::NO_CONTENT.into_response()),
                    _ => {
                        shard
                            .tx(|conn| {
                                async move { idem.commit(conn, StatusCode::CREATED).await }
                                    .scope_boxed()
                            })
                            .await
                    }
                }
            }

            struct App {
                client: TestClient,
                clock: ManualClock,
                url: String,
                /// What keeps the database (a schema is dropped with it).
                _database: Box<dyn std::any::Any + Send + Sync>,
            }

            async fn app_on(backend: &str) -> App {
                let database = $url;
                let url = database.to_string();
                exec(
                    &url,
                    &format!(
                        "CREATE TABLE payments ({}, note TEXT NOT NULL); \
                         CREATE TABLE charges ({});",
                        $id, $id
                    ),
                )
                .await;
                let clock = ManualClock::new();
                let shared: SharedClock = Arc::new(clock.clone());
                let client = TestApp::from_builder(
                    autumn_web::app()
                        .routes(routes![pay, checkout, sharded, login])
                        .idempotent(),
                )
                .with_config(database_config(&url, backend))
                .with_clock(shared)
                .build();
                App {
                    client,
                    clock,
                    url,
                    _database: Box::new(database),
                }
            }

            async fn app() -> App {
                app_on("database").await
            }

            impl App {
                async fn pay(&self, key: Option<&str>, note: &str, mode: &str) -> autumn_web::test::TestResponse {
                    let mut request = self.client.post("/payments").header("x-mode", mode).body(note.to_owned());
                    if let Some(key) = key {
                        request = request.header("idempotency-key", key);
                    }
                    request.send().await
                }

                async fn checkout(&self, key: &str, body: &str, mode: &str) -> autumn_web::test::TestResponse {
                    self.client
                        .post("/checkout")
                        .header("idempotency-key", key)
                        .header("x-mode", mode)
                        .body(body.to_owned())
                        .send()
                        .await
                }

                async fn payments(&self) -> i64 {
                    count(&self.url, "SELECT count(*) AS n FROM payments").await
                }

                async fn charges(&self) -> i64 {
                    count(&self.url, "SELECT count(*) AS n FROM charges").await
                }

                async fn records(&self) -> i64 {
                    count(
                        &self.url,
                        "SELECT count(*) AS n FROM autumn_idempotency_keys WHERE record IS NOT NULL",
                    )
                    .await
                }

                fn lapse(&self) {
                    self.clock.advance(Duration::from_secs(IN_FLIGHT_SECS + 1));
                }
            }

            fn is_problem(response: &autumn_web::test::TestResponse) -> bool {
                response
                    .header("content-type")
                    .is_some_and(|value| value.starts_with("application/problem+json"))
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_record_commits_with_the_rows_and_a_retry_replays_it() {
                let app = app().await;
                let first = app.pay(Some("k"), "a", "").await;
                first.assert_status(201);
                let retry = app.pay(Some("k"), "a", "").await;
                retry
                    .assert_status(201)
                    .assert_header("x-idempotent-replayed", "true");
                assert_eq!(retry.text(), first.text());
                assert_eq!(app.payments().await, 1, "one run");
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_rolled_back_transaction_takes_the_record_with_it() {
                let app = app().await;
                // commit succeeded, then the transaction failed: neither the
                // row nor the record is kept, so the retry runs.
                app.pay(Some("k"), "a", "fail-after-commit").await.assert_status(400);
                assert_eq!((app.payments().await, app.records().await), (0, 0));
                let retry = app.pay(Some("k"), "a", "").await;
                retry.assert_status(201);
                assert!(retry.header("x-idempotent-replayed").is_none());
                assert_eq!(app.payments().await, 1);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_late_commit_after_another_request_took_the_key_gets_409_and_rolls_back() {
                let app = app().await;
                let key = format!("{}-late", stringify!($backend));
                register(&key, &app.client, &app.clock);
                let late = app.pay(Some(&key), "a", "late").await;
                late.assert_status(409);
                assert!(is_problem(&late), "{:?}", late.headers());
                assert_eq!(app.payments().await, 1, "only the request holding the key committed");
                app.pay(Some(&key), "a", "")
                    .await
                    .assert_status(201)
                    .assert_header("x-idempotent-replayed", "true");
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_deleted_key_row_gets_409_and_rolls_back() {
                let app = app().await;
                let response = app.pay(Some("k"), "a", "delete-row").await;
                response.assert_status(409);
                assert!(is_problem(&response));
                assert_eq!(app.payments().await, 0);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn after_a_crash_after_commit_retries_get_409_until_the_lock_expires_then_the_replay() {
                let app = app().await;
                let key = format!("{}-hang", stringify!($backend));
                send_until_crash(
                    &key,
                    app.client
                        .post("/payments")
                        .header("idempotency-key", &key)
                        .header("x-mode", "hang")
                        .body("a"),
                )
                .await;
                assert_eq!(app.records().await, 1, "committed before the crash");
                // The record is there, but its request still holds the lock.
                let retry = app.pay(Some(&key), "a", "").await;
                retry.assert_status(409);
                assert!(retry.header("x-idempotent-replayed").is_none());
                app.lapse();
                let replay = app.pay(Some(&key), "a", "").await;
                replay
                    .assert_status(201)
                    .assert_header("x-idempotent-replayed", "true");
                assert!(replay.text().starts_with("paid a (run "), "{}", replay.text());
                assert_eq!(app.payments().await, 1, "the handler ran once");
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn without_a_key_commit_returns_the_response_unchanged() {
                let app = app().await;
                let first = app.pay(None, "a", "").await;
                first.assert_status(201);
                assert!(first.text().starts_with("paid a"));
                app.pay(None, "a", "").await.assert_status(201);
                assert_eq!((app.payments().await, app.records().await), (2, 0));
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_another_backend_commit_returns_the_response_unchanged() {
                let app = app_on("memory").await;
                let first = app.pay(Some("k"), "a", "").await;
                first.assert_status(201);
                // The memory store records it as for any route.
                app.pay(Some("k"), "a", "")
                    .await
                    .assert_header("x-idempotent-replayed", "true");
                assert_eq!((app.payments().await, app.records().await), (1, 0));
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_body_over_10_mib_gives_500_and_rolls_back() {
                let app = app().await;
                let response = app.pay(Some("k"), "a", "big").await;
                response.assert_status(500);
                assert!(is_problem(&response));
                assert_eq!((app.payments().await, app.records().await), (0, 0));
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_retry_after_a_crash_skips_the_steps_that_are_done() {
                let app = app().await;
                let key = format!("{}-crash-0", stringify!($backend));
                send_until_crash(
                    &key,
                    app.client
                        .post("/checkout")
                        .header("idempotency-key", &key)
                        .header("x-mode", "crash")
                        .body("cart"),
                )
                .await;
                assert_eq!(app.charges().await, 1, "charged before the crash");
                // Still locked by the crashed run.
                app.checkout(&key, "cart", "").await.assert_status(409);
                app.lapse();
                let retry = app.checkout(&key, "cart", "").await;
                retry.assert_status(201);
                assert_eq!(retry.text(), "done");
                assert_eq!(app.charges().await, 1, "the card was charged once");
                app.checkout(&key, "cart", "")
                    .await
                    .assert_header("x-idempotent-replayed", "true");
                            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_recovery_point_belongs_to_the_body_that_set_it() {
                let app = app().await;
                let key = format!("{}-crash-1", stringify!($backend));
                send_until_crash(
                    &key,
                    app.client
                        .post("/checkout")
                        .header("idempotency-key", &key)
                        .header("x-mode", "crash")
                        .body("cart"),
                )
                .await;
                assert_eq!(app.charges().await, 1, "charged before the crash");
                app.lapse();
                // recovery_point, set_recovery_point and commit each refuse
                // another body under the same key.
                for mode in ["", "set-only", "commit-only"] {
                    let response = app.checkout(&key, "another cart", mode).await;
                    response.assert_status(422);
                    assert!(is_problem(&response), "{mode}");
                }
                assert_eq!(app.charges().await, 1);
                // The body that set it still goes on from there.
                app.checkout(&key, "cart", "").await.assert_status(201);
                assert_eq!(app.charges().await, 1);
                            }

            /// The spec: a retry whose session is gone runs under a new
            /// key, and the middleware copies the recovery point from the
            /// old session's key to it before the handler runs.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_retry_whose_session_is_gone_still_skips_the_steps_that_are_done() {
                let app = app().await;
                // Signed in: the client now sends the session cookie.
                app.client.post("/login").send().await.assert_status(201);
                let key = format!("{}-gone-session", stringify!($backend));
                send_until_crash(
                    &key,
                    app.client
                        .post("/checkout")
                        .header("idempotency-key", &key)
                        .header("x-mode", "crash")
                        .body("cart"),
                )
                .await;
                assert_eq!(app.charges().await, 1, "charged before the crash");
                exec(&app.url, "DELETE FROM autumn_sessions").await;

                // The cookie names a session the store no longer has: a new
                // key, so the crashed run's lock does not apply (no 409),
                // and the point copied to it still binds the first body.
                let other = app.checkout(&key, "another cart", "").await;
                other.assert_status(422);
                assert!(is_problem(&other));
                let retry = app.checkout(&key, "cart", "").await;
                retry.assert_status(201);
                assert_eq!(retry.text(), "done");
                assert_eq!(app.charges().await, 1, "the card was charged once");
                app.checkout(&key, "cart", "")
                    .await
                    .assert_header("x-idempotent-replayed", "true");

                // Only the caller whose session it was takes the point over:
                // another visitor's request with the same key runs anew.
                app.client
                    .new_browser()
                    .post("/checkout")
                    .header("idempotency-key", &key)
                    .body("cart")
                    .send()
                    .await
                    .assert_status(201);
                assert_eq!(app.charges().await, 2);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_calls_on_a_sharded_db_connection_give_500() {
                let app = app().await;
                for mode in ["", "set", "read"] {
                    for key in [Some("k"), None] {
                        let mut request = app.client.post("/sharded").header("x-mode", mode);
                        if let Some(key) = key {
                            request = request.header("idempotency-key", &format!("{key}-{mode}"));
                        }
                        let response = request.send().await;
                        response.assert_status(500);
                        assert!(is_problem(&response));
                    }
                }
            }

            /// The retry comes from a client that never got the first
            /// response (so no cookie): it must be given the Set-Cookie.
            async fn session_change_reaches_the_replay(mode: &str) {
                let app = app().await;
                let key = format!("{}-login-{mode}", stringify!($backend));
                let first = app
                    .client
                    .post("/login")
                    .header("idempotency-key", &key)
                    .header("x-mode", mode)
                    .send()
                    .await;
                first.assert_status(201);
                let cookie = first.header("set-cookie").expect("a session cookie").to_owned();
                let retry = app
                    .client
                    .new_browser()
                    .post("/login")
                    .header("idempotency-key", &key)
                    .header("x-mode", mode)
                    .send()
                    .await;
                retry
                    .assert_status(201)
                    .assert_header("x-idempotent-replayed", "true");
                assert_eq!(retry.header("set-cookie"), Some(cookie.as_str()));
                assert_eq!(app.payments().await, 1);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_session_change_before_commit_reaches_the_replay() {
                session_change_reaches_the_replay("before").await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_session_change_after_commit_reaches_the_replay() {
                session_change_reaches_the_replay("after").await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_crash_before_the_session_is_saved_never_replays_without_the_cookie() {
                let app = app().await;
                let key = format!("{}-login-crash", stringify!($backend));
                send_until_crash(
                    &key,
                    app.client
                        .post("/login")
                        .header("idempotency-key", &key)
                        .header("x-mode", "before-crash"),
                )
                .await;
                assert_eq!(app.records().await, 1, "committed before the crash");
                // Past the in-flight TTL the lock still stands: commit held
                // it for the record's lifetime, as the session was pending.
                app.lapse();
                let retry = app
                    .client
                    .new_browser()
                    .post("/login")
                    .header("idempotency-key", &key)
                    .send()
                    .await;
                retry.assert_status(409);
                assert!(retry.header("x-idempotent-replayed").is_none());
                assert_eq!(app.payments().await, 1);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_sharded_db_error_says_to_use_the_primary() {
                use axum::extract::FromRequestParts as _;
                let app = app().await;
                let pool = DbPool::new(&app.url, 1, Duration::from_secs(5)).expect("pool");
                let mut shard = ShardedDb::<$conn>::from_pool(&pool).await.expect("shard");
                let (mut parts, ()) = http::Request::new(()).into_parts();
                let idem = IdempotencyTx::from_request_parts(&mut parts, &())
                    .await
                    .expect("no gone session to copy from");
                let error = idem
                    .commit(&mut shard, StatusCode::CREATED)
                    .await
                    .expect_err("a shard is refused");
                assert_eq!(error.status(), 500);
                assert!(error.message().contains("primary"), "{}", error.message());
            }
        }
    };
}

#[cfg(feature = "postgres")]
suite!(
    postgres,
    autumn_web::db::PgConnection,
    database::fresh_postgres_schema(),
    "id BIGSERIAL PRIMARY KEY"
);

#[cfg(feature = "sqlite")]
suite!(
    sqlite,
    autumn_web::db::SqliteConnection,
    database::fresh_sqlite_file(),
    "id INTEGER PRIMARY KEY AUTOINCREMENT"
);

/// What `commit` costs on the wire against the same handler on a plain
/// `Db::tx`: the one owner-fenced statement inside the transaction, nothing
/// after it (the middleware's rewrite replaces its usual record-and-unlock).
#[cfg(feature = "postgres")]
mod round_trips {
    use super::*;
    use autumn_web::db::{Db, PgConnection};
    use autumn_web::idempotency::IdempotencyTx;
    use autumn_web::prelude::*;
    use autumn_web::reexports::diesel;
    use autumn_web::reexports::diesel_async::RunQueryDsl as _;
    use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;
    use autumn_web::test::TestApp;

    async fn insert(conn: &mut PgConnection) -> Result<(), AutumnError> {
        diesel::sql_query("INSERT INTO payments (note) VALUES ('x')")
            .execute(conn)
            .await?;
        Ok(())
    }

    #[post("/plain")]
    async fn plain(mut db: Db) -> AutumnResult<Response> {
        db.tx(|conn| {
            async move {
                insert(conn).await?;
                Ok((StatusCode::CREATED, "paid").into_response())
            }
            .scope_boxed()
        })
        .await
    }

    #[post("/committed")]
    async fn committed(idem: IdempotencyTx, mut db: Db) -> AutumnResult<Response> {
        db.tx(|conn| {
            async move {
                insert(conn).await?;
                idem.commit(conn, (StatusCode::CREATED, "paid")).await
            }
            .scope_boxed()
        })
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commit_costs_one_statement_inside_the_transaction() {
        let url = database::fresh_postgres_schema();
        exec(
            &url,
            "CREATE TABLE payments (id BIGSERIAL PRIMARY KEY, note TEXT NOT NULL)",
        )
        .await;
        let proxy = database::RoundTrips::proxy(&url).await;
        let client = TestApp::from_builder(
            autumn_web::app()
                .routes(routes![plain, committed])
                .idempotent(),
        )
        .with_config(config(&format!(
            "[idempotency]\nbackend = \"database\"\n[database]\nurl = \"{}\"\npool_size = 1\n",
            proxy.url()
        )))
        .build();
        let mut cost = HashMap::new();
        for path in ["/plain", "/committed"] {
            // Warm: the connection is made and every statement prepared.
            for key in ["warm-1", "warm-2"] {
                client
                    .post(path)
                    .header("idempotency-key", key)
                    .send()
                    .await
                    .assert_status(201);
            }
            proxy.take();
            client
                .post(path)
                .header("idempotency-key", "measured")
                .send()
                .await
                .assert_status(201);
            cost.insert(path, proxy.take());
        }
        assert_eq!(
            cost["/committed"],
            cost["/plain"] + 1,
            "round trips of a first-time request: {cost:?}"
        );
    }
}
