//! Typed jobs in an app: a handler queues them with the `Jobs` extractor in
//! its transaction, a retried request (its first attempt committed, then
//! failed) queues nothing new, and the app's own worker performs each job
//! once, on PostgreSQL and SQLite.

use autumn_testkit::on_databases;

use crate::support::database::{count, eventually};

use autumn_web::config::AutumnConfig;
use autumn_web::db::{Db, DbConnection, PgConnection, SqliteConnection};
use autumn_web::jobs::{CommitHooks, CommitJob, Job, JobError, Jobs};
use autumn_web::prelude::*;
use autumn_web::reexports::diesel;
use autumn_web::reexports::diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;
use autumn_web::test::TestApp;
use serde::{Deserialize, Serialize};

/// Sends a welcome mail to `user`: here, a row of `welcomes`, unique per
/// user, so a second run of the job changes nothing.
#[derive(Serialize, Deserialize)]
struct Welcome {
    user: i64,
}

impl Job for Welcome {
    const NAME: &'static str = "mail.welcome";

    async fn perform(self, run: CommitJob) -> Result<(), JobError> {
        let sql = format!(
            "INSERT INTO welcomes (user_id, attempt, request_id) VALUES ({}, {}, '{}')",
            self.user,
            run.attempt(),
            run.request_id().unwrap_or("none")
        );
        let written = match run.pool().get().await.map_err(JobError::retry)? {
            DbConnection::Postgres(mut conn) => diesel::sql_query(sql).execute(&mut *conn).await,
            DbConnection::Sqlite(mut conn) => diesel::sql_query(sql).execute(&mut *conn).await,
            _ => unreachable!("the tests build both backends"),
        };
        match written {
            Ok(_) => Ok(()),
            Err(error) if error.to_string().to_lowercase().contains("unique") => Ok(()),
            Err(error) => Err(JobError::retry(error)),
        }
    }
}

/// Signs up two users in one transaction, queuing a welcome for each: one
/// handler per backend, since `Db` names its connection type.
macro_rules! sign_up_on {
    ($name:ident, $conn:ty) => {
        #[post("/signups")]
        async fn $name(
            mut db: Db<$conn>,
            jobs: Jobs,
            headers: HeaderMap,
        ) -> AutumnResult<StatusCode> {
            db.tx(|conn| {
                let jobs = jobs.clone();
                async move {
                    for user in [1, 2] {
                        jobs.enqueue_in(conn, Welcome { user }).await?;
                    }
                    Ok::<_, AutumnError>(())
                }
                .scope_boxed()
            })
            .await?;
            jobs.committed();
            if headers.contains_key("x-fail-after-commit") {
                // Committed, then failed: the 500 releases the key, so the
                // retry runs the handler again.
                return Err(AutumnError::internal("failed after the commit"));
            }
            Ok(StatusCode::CREATED)
        }
    };
}

sign_up_on!(sign_up_postgres, PgConnection);
sign_up_on!(sign_up_sqlite, SqliteConnection);

async fn a_retried_request_queues_its_jobs_once_and_each_runs_once(url: String) {
    let pool =
        autumn_web::db::DbPool::new(&url, 4, std::time::Duration::from_secs(5)).expect("pool");
    let ddl = if url.starts_with("sqlite") {
        "CREATE TABLE welcomes (id INTEGER PRIMARY KEY AUTOINCREMENT, user_id BIGINT NOT NULL UNIQUE, attempt INTEGER NOT NULL, request_id TEXT NOT NULL);"
    } else {
        "CREATE TABLE welcomes (id BIGSERIAL PRIMARY KEY, user_id BIGINT NOT NULL UNIQUE, attempt INTEGER NOT NULL, request_id TEXT NOT NULL);"
    };
    match pool.get().await.expect("connection") {
        DbConnection::Postgres(mut conn) => conn.batch_execute(ddl).await,
        DbConnection::Sqlite(mut conn) => conn.batch_execute(ddl).await,
        _ => unreachable!("the tests build both backends"),
    }
    .expect("the welcomes table");
    let config = AutumnConfig::from_toml_str(&format!(
        "[idempotency]\nbackend = \"database\"\n[database]\nurl = \"{url}\"\npool_size = 4\n\
         [actuator]\nmetrics_on_app_port = true\n"
    ))
    .expect("config");
    let client = TestApp::from_builder(
        autumn_web::app().with_commit_hooks(CommitHooks::new().job::<Welcome>()),
    )
    .routes(if url.starts_with("sqlite") {
        routes![sign_up_sqlite]
    } else {
        routes![sign_up_postgres]
    })
    .idempotent()
    .with_config(config)
    .build();
    let post = || {
        client
            .post("/signups")
            .header("idempotency-key", "signup-1")
    };
    post()
        .header("x-fail-after-commit", "1")
        .header("x-request-id", "signup-first")
        .send()
        .await
        .assert_status(500);
    post()
        .header("x-request-id", "signup-retry")
        .send()
        .await
        .assert_status(201);
    // The retry's replay: nothing runs.
    post().send().await.assert_status(201);
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE hook = 'mail.welcome'"
        )
        .await,
        2,
        "two jobs for the request, however often it ran"
    );
    eventually(&pool, "SELECT COUNT(*) AS n FROM welcomes", 2).await;
    eventually(
        &pool,
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE state = 'done'",
        2,
    )
    .await;
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) AS n FROM welcomes WHERE attempt = 1"
        )
        .await,
        2,
        "each sent on its first run"
    );
    // The worker's counts, per queue, for operators (counted just after
    // each row is written done).
    let metrics = autumn_testkit::eventually_async(
        "two jobs counted done",
        std::time::Duration::from_secs(10),
        || async {
            let metrics: serde_json::Value = client.get("/actuator/metrics").send().await.json();
            if metrics["jobs"]["default"]["done"] == 2 {
                Ok(metrics)
            } else {
                Err(metrics.to_string())
            }
        },
    )
    .await;
    assert_eq!(metrics["jobs"]["default"]["dead"], 0, "{metrics}");
    let prometheus = client.get("/actuator/prometheus").send().await.text();
    assert!(
        prometheus.contains("autumn_job_runs_total{queue=\"default\",outcome=\"done\"} 2"),
        "{prometheus}"
    );
    // The jobs carry the id of the request that queued them, the first
    // attempt's (into their log lines too).
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) AS n FROM welcomes WHERE request_id = 'signup-first'"
        )
        .await,
        2
    );
}

/// Refused for good: its rows die at once.
#[derive(Serialize, Deserialize)]
struct Doomed {}

impl Job for Doomed {
    const NAME: &'static str = "mail.doomed";

    async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
        Err(JobError::permanent("the mailbox does not exist"))
    }
}

/// The app binary's `jobs retry|discard ID` on a dead job, through
/// `run_command`, and the one-line refusals.
async fn the_jobs_command_runs_a_dead_job_again_or_discards_it(url: String) {
    let config =
        AutumnConfig::from_toml_str(&format!("[database]\nurl = \"{url}\"\npool_size = 2\n"))
            .expect("config");
    let pool =
        autumn_web::db::DbPool::new(&url, 2, std::time::Duration::from_secs(5)).expect("pool");
    let app = || {
        autumn_web::app()
            .with_commit_hooks(CommitHooks::new().job::<Doomed>())
            .with_config(config.clone())
    };
    Jobs::new(pool.clone(), autumn_web::jobs::MutationContext::detached())
        .enqueue(Doomed {})
        .await
        .expect("queued");
    let worker = autumn_web::jobs::CommitJobWorker::new(
        pool.clone(),
        CommitHooks::new().job::<Doomed>(),
        std::sync::Arc::new(autumn_web::clock::SystemClock),
    );
    assert_eq!(worker.run_due().await.expect("run").dead, 1);
    let id = count(&pool, "SELECT MAX(id) AS n FROM autumn_commit_jobs").await;
    let dead =
        format!("SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE id = {id} AND state = 'dead'");

    app()
        .run_command(["jobs", "retry", &id.to_string()])
        .await
        .expect("retried");
    assert_eq!(count(&pool, &dead).await, 0, "pending again");
    assert_eq!(
        worker.run_due().await.expect("run").dead,
        1,
        "and run again"
    );
    app()
        .run_command(["jobs", "discard", &id.to_string()])
        .await
        .expect("discarded");
    assert_eq!(
        count(&pool, "SELECT COUNT(*) AS n FROM autumn_commit_jobs").await,
        0
    );
    let error = app()
        .run_command(["jobs", "retry", &id.to_string()])
        .await
        .expect_err("no dead job now")
        .to_string();
    assert!(
        error.starts_with("jobs command: no dead job has the id"),
        "{error}"
    );
    let error = autumn_web::app()
        .with_config(AutumnConfig::default())
        .run_command(["jobs", "dead"])
        .await
        .expect_err("no database")
        .to_string();
    assert!(error.contains("database.url"), "{error}");
}

on_databases!(
    a_retried_request_queues_its_jobs_once_and_each_runs_once,
    the_jobs_command_runs_a_dead_job_again_or_discards_it,
);
