//! The app's own migrations (`migrations!` and `AppBuilder::migrations`),
//! on PostgreSQL and SQLite: applied at startup after the framework's, once
//! however many replicas start together, each run all or nothing; only
//! checked with `migrate_on_start = false`, startup naming the key; and
//! reverted and listed by the app binary's `db` command.

use autumn_testkit::on_databases;
use autumn_web::LaunchError;
use autumn_web::config::AutumnConfig;
use autumn_web::db::{AppMigrations, DbPool, Migration};
use autumn_web::test::TestApp;

use crate::support::database::count;

/// The two migrations under `tests/it/fixtures/migrations`.
const MIGRATIONS: AppMigrations = autumn_web::migrations!("tests/it/fixtures/migrations");

/// A good first migration and a second one that fails halfway through.
const BROKEN: AppMigrations = AppMigrations::new(&[
    Migration {
        version: "2026-01-01-000000",
        name: "create_products",
        up: "CREATE TABLE products (id BIGINT PRIMARY KEY, name TEXT NOT NULL);",
        down: "DROP TABLE products;",
    },
    Migration {
        version: "2026-01-02-000000",
        name: "broken",
        up: "CREATE TABLE halfway (id BIGINT); INSERT INTO no_such_table VALUES (1);",
        down: "",
    },
]);

fn config(url: &str, extra: &str) -> AutumnConfig {
    AutumnConfig::from_toml_str(&format!("[database]\nurl = \"{url}\"\n{extra}")).expect("config")
}

fn pool(url: &str) -> DbPool {
    DbPool::new(url, 4, std::time::Duration::from_secs(5)).expect("pool")
}

async fn tables_named(pool: &DbPool, table: &str) -> i64 {
    let sql = if matches!(pool, DbPool::Sqlite(_)) {
        format!("SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = '{table}'")
    } else {
        format!(
            "SELECT COUNT(*) AS n FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name = '{table}'"
        )
    };
    count(pool, &sql).await
}

/// Startup applies both, in order; the table has the second's column; a
/// second start applies nothing; status lists both applied.
async fn startup_applies_the_apps_migrations_once(url: String) {
    assert_eq!(MIGRATIONS.all().len(), 2, "read from the folder");
    assert_eq!(MIGRATIONS.all()[1].name, "add_price");
    for _ in 0..2 {
        TestApp::from_builder(autumn_web::app().migrations(MIGRATIONS))
            .with_config(config(&url, ""))
            .build();
    }
    let pool = pool(&url);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) AS n FROM autumn_app_migrations").await,
        2
    );
    count(&pool, "SELECT COUNT(price_cents) AS n FROM products").await;
    let status = MIGRATIONS.status(&pool).await.expect("status");
    assert!(status.iter().all(|line| line.applied), "{status:?}");
}

/// With `migrate_on_start = false` a pending migration stops startup,
/// naming the key; `db migrate` applies it, and the app then starts.
async fn without_migrate_on_start_a_pending_migration_stops_startup(url: String) {
    let off = "migrate_on_start = false\n";
    let refused = TestApp::from_builder(autumn_web::app().migrations(MIGRATIONS))
        .with_config(config(&url, off))
        .try_build()
        .expect_err("refused");
    let line = refused.to_string();
    assert!(
        line.contains("2 app migration(s) pending") && line.contains("database.migrate_on_start"),
        "{line}"
    );
    assert!(
        matches!(refused, LaunchError::MigrationsPending { count: 2, .. }),
        "{refused:?}"
    );
    let pool = pool(&url);
    assert_eq!(tables_named(&pool, "products").await, 0, "nothing applied");

    autumn_web::app()
        .migrations(MIGRATIONS)
        .with_config(config(&url, off))
        .run_command(["db", "migrate"])
        .await
        .expect("db migrate");
    assert_eq!(tables_named(&pool, "products").await, 1);
    TestApp::from_builder(autumn_web::app().migrations(MIGRATIONS))
        .with_config(config(&url, off))
        .build();

    // Back one, then forward again.
    autumn_web::app()
        .migrations(MIGRATIONS)
        .with_config(config(&url, off))
        .run_command(["db", "rollback"])
        .await
        .expect("db rollback");
    let pending = MIGRATIONS.pending(&pool).await.expect("pending");
    assert_eq!(
        pending.iter().map(|m| m.name).collect::<Vec<_>>(),
        ["add_price"]
    );
    let error = autumn_web::app()
        .migrations(MIGRATIONS)
        .with_config(config(&url, off))
        .run_command(["db", "sideways"])
        .await
        .expect_err("a bad command");
    assert!(error.to_string().contains("usage: db migrate"), "{error}");
}

/// A run whose second migration fails applies neither: the first's table
/// is not there, nothing is recorded (the tracking table the run made is
/// gone too), and the error names the migration.
async fn a_failed_migration_leaves_nothing_of_its_run(url: String) {
    let pool = pool(&url);
    let error = BROKEN.migrate(&pool).await.expect_err("the second fails");
    let message = error.to_string();
    assert!(
        message.contains("2026-01-02-000000_broken") && message.contains("nothing of this run"),
        "{message}"
    );
    assert_eq!(tables_named(&pool, "products").await, 0);
    assert_eq!(tables_named(&pool, "halfway").await, 0);
    // Not even the tracking table the run made first.
    assert_eq!(tables_named(&pool, "autumn_app_migrations").await, 0);
}

on_databases!(
    startup_applies_the_apps_migrations_once,
    without_migrate_on_start_a_pending_migration_stops_startup,
    a_failed_migration_leaves_nothing_of_its_run,
);

/// Four replicas migrating at once on PostgreSQL: each succeeds, and each
/// migration is applied once (the advisory lock orders them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_apply_each_migration_once() {
    let schema = autumn_testkit::framework::fresh_postgres_schema();
    let pool = pool(schema.url());
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { MIGRATIONS.migrate(&pool).await })
        })
        .collect();
    let mut applied = 0;
    for run in runs {
        applied += run.await.expect("a run").expect("migrated").len();
    }
    assert_eq!(applied, 2, "each migration applied by one replica");
    assert_eq!(
        count(&pool, "SELECT COUNT(*) AS n FROM autumn_app_migrations").await,
        2
    );
}
