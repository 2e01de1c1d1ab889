//! The configured backends end to end: `[idempotency] backend` and
//! `[database] url` through the real launch path, against real Redis,
//! PostgreSQL and SQLite.
#![cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]

use crate::support::{database, redis_support};

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient};

static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[post("/orders")]
async fn create() -> (StatusCode, String) {
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    (StatusCode::CREATED, format!("order {run}"))
}

fn config(toml: &str) -> AutumnConfig {
    AutumnConfig::from_toml_str(toml).expect("valid config")
}

/// The app as `main` assembles it, on the configured backend.
fn app(config: AutumnConfig) -> TestClient {
    TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
        .with_config(config)
        .build()
}

fn launch_error(config: AutumnConfig) -> String {
    match TestApp::from_builder(autumn_web::app().routes(routes![create]).idempotent())
        .with_config(config)
        .try_build()
    {
        Ok(_) => panic!("expected a launch error"),
        Err(error) => error.to_string(),
    }
}

/// A first call on one replica, its retry on the other: one run, one replay.
async fn retry_replays_across(first: &TestClient, second: &TestClient, key: &str) {
    let r1 = first
        .post("/orders")
        .header("idempotency-key", key)
        .send()
        .await;
    r1.assert_status(201);
    let r2 = second
        .post("/orders")
        .header("idempotency-key", key)
        .send()
        .await;
    r2.assert_status(201)
        .assert_header("x-idempotent-replayed", "true");
    assert_eq!(r1.text(), r2.text());
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;

    fn redis_config(prefix: &str) -> AutumnConfig {
        let url = super::redis_support::redis_url();
        config(&format!(
            "[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\n"
        ))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_replicas_on_one_redis_replay_each_other() {
        let prefix = super::redis_support::unique_prefix();
        let (a, b) = (app(redis_config(&prefix)), app(redis_config(&prefix)));
        retry_replays_across(&a, &b, "redis-1").await;
    }

    /// Calls of `SCRIPT LOAD` the Redis at `url` has served.
    async fn script_loads(url: &str) -> u64 {
        let stats: String = ::redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut super::redis_support::plain_connection(url).await)
            .await
            .expect("INFO commandstats");
        stats
            .lines()
            .find_map(|line| {
                line.strip_prefix("cmdstat_script|load:calls=")
                    .or_else(|| line.strip_prefix("cmdstat_script:calls="))
            })
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().expect("a call count"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_connects_the_redis_store_before_it_serves() {
        // A Redis of the test's own: its command counts are this test's.
        let server = super::redis_support::RedisServer::new();
        let port = autumn_testkit::free_port();
        let config = config(&format!(
            "[server]\nhost = \"127.0.0.1\"\nport = {port}\n[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{}\"\n",
            server.url()
        ));
        let app = tokio::spawn(
            autumn_web::app()
                .routes(routes![create])
                .idempotent()
                .with_config(config)
                .try_run(),
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(!app.is_finished(), "the app stopped before listening");
            assert!(
                std::time::Instant::now() < deadline,
                "the app did not listen within 10 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // The idempotency store's six scripts loaded twice, by the startup
        // check's own connection and then by the store the app serves with,
        // and the session store's three (the conditional save, the
        // principal index and ending a principal's sessions) and the quota
        // ledger's three (take, settle, give back) once, all before it
        // listened: the first request does not pay for connecting.
        assert_eq!(script_loads(&server.url()).await, 18);
        app.abort();
    }

    #[test]
    fn unreachable_redis_stops_startup_naming_the_key() {
        let mut config = redis_config("autumn-test:unreachable");
        config.idempotency.redis.url = Some("redis://127.0.0.1:1/0".to_owned());
        let message = launch_error(config);
        assert!(message.contains("idempotency.redis.url"), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use autumn_web::db::{Db, SqliteConnection};
    use autumn_web::reexports::diesel;
    use autumn_web::reexports::diesel_async::RunQueryDsl as _;
    use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;

    fn sqlite_config(path: &std::path::Path) -> AutumnConfig {
        config(&format!(
            "[idempotency]\nbackend = \"database\"\n[database]\nurl = \"sqlite://{}\"\n",
            path.display()
        ))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn startup_migrates_and_replicas_share_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("app.db");
        // No migration was run by hand: startup applies FRAMEWORK_MIGRATIONS.
        let (a, b) = (app(sqlite_config(&path)), app(sqlite_config(&path)));
        retry_replays_across(&a, &b, "sqlite-1").await;
    }

    #[post("/notes")]
    async fn add_note(mut db: Db<SqliteConnection>) -> AutumnResult<String> {
        db.tx(|conn| {
            async move {
                diesel::sql_query("CREATE TABLE IF NOT EXISTS notes (body TEXT NOT NULL)")
                    .execute(conn)
                    .await?;
                diesel::sql_query("INSERT INTO notes (body) VALUES ('kept')")
                    .execute(conn)
                    .await?;
                diesel::sql_query("INSERT INTO notes (body) VALUES ('rolled back')")
                    .execute(conn)
                    .await?;
                Err::<(), _>(AutumnError::conflict("second thoughts"))
            }
            .scope_boxed()
        })
        .await
        .or_else(|_| Ok::<_, AutumnError>(()))?;
        let rows = diesel::sql_query("SELECT body FROM notes")
            .execute(&mut *db)
            .await;
        Ok(format!("{rows:?}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn db_tx_rolls_back_on_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("notes.db").display());
        let client = TestApp::new()
            .routes(routes![add_note])
            .with_config(config(&format!("[database]\nurl = \"{url}\"\n")))
            .build();
        // The CREATE TABLE was rolled back with the inserts: the table is gone.
        let text = client.post("/notes").send().await.text();
        assert!(text.contains("no such table"), "{text}");
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use autumn_web::db::Db;
    use autumn_web::reexports::diesel;
    use autumn_web::reexports::diesel::sql_types::BigInt;
    use autumn_web::reexports::diesel_async::RunQueryDsl as _;
    use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;

    fn postgres_config(url: &str) -> AutumnConfig {
        config(&format!(
            "[idempotency]\nbackend = \"database\"\n[database]\nurl = \"{url}\"\n"
        ))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn startup_migrates_and_replicas_share_the_database() {
        // An empty schema: startup creates autumn_idempotency_keys in it.
        let url = database::empty_postgres_schema();
        let (a, b) = (app(postgres_config(&url)), app(postgres_config(&url)));
        retry_replays_across(&a, &b, "pg-1").await;
    }

    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }

    #[post("/payments")]
    async fn pay(mut db: Db) -> AutumnResult<String> {
        db.tx(|conn| {
            async move {
                diesel::sql_query("CREATE TABLE IF NOT EXISTS payments (id BIGSERIAL PRIMARY KEY)")
                    .execute(conn)
                    .await?;
                diesel::sql_query("INSERT INTO payments DEFAULT VALUES")
                    .execute(conn)
                    .await?;
                Ok::<_, AutumnError>(())
            }
            .scope_boxed()
        })
        .await?;
        let count: Count = diesel::sql_query("SELECT count(*) AS n FROM payments")
            .get_result(&mut *db)
            .await?;
        Ok(count.n.to_string())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn db_tx_commits_and_the_key_runs_it_once() {
        let url = database::fresh_postgres_schema();
        let client = TestApp::from_builder(autumn_web::app().routes(routes![pay]).idempotent())
            .with_config(postgres_config(&url))
            .build();
        let first = client
            .post("/payments")
            .header("idempotency-key", "p")
            .send()
            .await;
        first.assert_ok();
        assert_eq!(first.text(), "1");
        let retry = client
            .post("/payments")
            .header("idempotency-key", "p")
            .send()
            .await;
        retry.assert_header("x-idempotent-replayed", "true");
        assert_eq!(
            client.post("/payments").send().await.text(),
            "2",
            "one row per run"
        );
    }

    #[test]
    fn an_unreachable_database_stops_startup_naming_the_key() {
        let message = launch_error(postgres_config(
            "postgres://postgres:secret@127.0.0.1:1/test",
        ));
        assert!(message.contains("database.url"), "{message}");
        assert!(!message.contains("secret"), "password redacted: {message}");
        assert!(!message.contains('\n'), "{message}");
    }
}

#[cfg(feature = "redis")]
mod redis_tokens {
    use super::*;

    #[post("/signup")]
    async fn signup() -> Redirect {
        Redirect::to("/welcome")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_token_posted_to_one_replica_replays_on_the_other() {
        let url = super::redis_support::redis_url();
        let prefix = super::redis_support::unique_prefix();
        let replica = || {
            TestApp::new()
                .routes(routes![signup])
                .with_config(config(&format!(
                    "[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\n"
                )))
                .build()
        };
        let (a, b) = (replica(), replica());
        let token = uuid::Uuid::new_v4().simple().to_string();
        let form = [("_submit_token", token.as_str()), ("email", "a@b.c")];
        a.post("/signup")
            .form(&form)
            .send()
            .await
            .assert_status(303);
        let replayed = b.post("/signup").form(&form).send().await;
        replayed
            .assert_status(303)
            .assert_header("x-submit-token-replayed", "true");
    }
}
