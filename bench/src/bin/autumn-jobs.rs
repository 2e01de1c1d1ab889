//! Jobs per second of one worker: `autumn-jobs postgres|sqlite [N]` queues
//! N no-op jobs (20,000 by default) in a fresh schema or file with the
//! framework tables, starts one worker (32 at once, looking every 10 ms)
//! and times it from start until every job is done. `cargo xtask bench
//! jobs` runs it pinned to one core, the database on the other.

use std::sync::Arc;
use std::time::{Duration, Instant};

use autumn_web::clock::SystemClock;
use autumn_web::db::DbPool;
use autumn_web::jobs::{
    CommitHooks, CommitJob, CommitJobWorker, Job, JobError, Jobs, MutationContext,
};
use serde::{Deserialize, Serialize};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Serialize, Deserialize)]
struct Noop {
    n: u32,
}

impl Job for Noop {
    const NAME: &'static str = "bench.noop";

    async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
        std::hint::black_box(self.n);
        Ok(())
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let backend = args.next().unwrap_or_else(|| "postgres".to_owned());
    let count: u32 = args.next().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    // Kept alive to the end: the schema is dropped with it.
    let (url, _schema) = match backend.as_str() {
        "sqlite" => (autumn_testkit::framework::fresh_sqlite_file(), None),
        _ => {
            let schema = autumn_testkit::framework::fresh_postgres_schema();
            (schema.url().to_owned(), Some(schema))
        }
    };
    let pool = DbPool::new(&url, 8, Duration::from_secs(5)).expect("the pool");
    let jobs = Jobs::new(pool.clone(), MutationContext::detached());
    for n in 0..count {
        jobs.enqueue(Noop { n }).await.expect("queued");
    }
    let hooks = CommitHooks::new()
        .job::<Noop>()
        .concurrency(32)
        .poll_every(Duration::from_millis(10));
    let started = Instant::now();
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(SystemClock)).start();
    let done = "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE state = 'done'";
    loop {
        if count_rows(&pool, done).await >= i64::from(count) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    worker.abort();
    println!(
        "{backend}: {count} jobs in {:.2} s: {:.0} jobs/s",
        took.as_secs_f64(),
        f64::from(count) / took.as_secs_f64()
    );
}

use autumn_web::reexports::diesel;

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

async fn count_rows(pool: &DbPool, sql: &str) -> i64 {
    use autumn_web::db::DbConnection;
    use autumn_web::reexports::diesel_async::RunQueryDsl as _;
    let counted: Count = match pool.get().await.expect("a connection") {
        DbConnection::Postgres(mut conn) => diesel::sql_query(sql).get_result(&mut *conn).await,
        DbConnection::Sqlite(mut conn) => diesel::sql_query(sql).get_result(&mut *conn).await,
        _ => unreachable!("the bench builds both backends"),
    }
    .expect("the count");
    counted.n
}
