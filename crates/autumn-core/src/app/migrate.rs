//! [`AppBuilder::migrations`], and the `db migrate|rollback|status` command
//! every app binary understands.

use autumn_base::database::AppMigrations;

use super::{AppBuilder, CommandError};

/// The word that, first on an app binary's command line, runs a `db`
/// command instead of the server.
pub(crate) const COMMAND: &str = "db";

const USAGE: &str = "usage: db migrate | db rollback | db status";

impl AppBuilder {
    /// The app's own migrations, from `autumn_web::migrations!("migrations")`:
    /// applied at startup after the framework's, one replica at a time, each
    /// run all or nothing; or, with `[database] migrate_on_start = false`
    /// (the default under a production profile), only checked, startup
    /// refusing to serve while one is pending. The app's binary also runs
    /// them on demand: `my-app db migrate`, `db rollback`, `db status`.
    ///
    /// ```
    /// use autumn_core::app;
    /// use autumn_base::database::{AppMigrations, Migration};
    ///
    /// // What `autumn_web::migrations!("migrations")` expands to.
    /// const MIGRATIONS: AppMigrations = AppMigrations::new(&[Migration {
    ///     version: "2026-12-08-093000",
    ///     name: "create_products",
    ///     up: "CREATE TABLE products (id BIGINT PRIMARY KEY, name TEXT NOT NULL)",
    ///     down: "DROP TABLE products",
    /// }]);
    ///
    /// let app = app().migrations(MIGRATIONS);
    /// # let _ = app;
    /// ```
    pub fn migrations(mut self, migrations: AppMigrations) -> Self {
        self.app_migrations = Some(migrations);
        self
    }

    /// `db ...`: the app's migrations, applied, reverted or listed, one
    /// line each on standard output.
    pub(super) async fn run_db_command(mut self, args: &[String]) -> Result<(), CommandError> {
        let command = match args {
            [one] if matches!(one.as_str(), "migrate" | "rollback" | "status") => one.clone(),
            _ => return Err(CommandError::Migrations(USAGE.to_owned())),
        };
        let Some(migrations) = self.app_migrations.take() else {
            return Err(CommandError::Migrations(
                "the app gives no migrations: call AppBuilder::migrations(autumn_web::migrations!(\"migrations\"))".to_owned(),
            ));
        };
        // This process migrates and exits: it runs no job.
        self.commit_hooks = self.commit_hooks.map(|hooks| hooks.paused(true));
        let launched = self.launch()?;
        let Some(pool) = launched.database.clone() else {
            return Err(CommandError::Migrations(
                "the migrations need the app database: set database.url (AUTUMN_DATABASE__URL)"
                    .to_owned(),
            ));
        };
        // The framework's tables first, as at startup.
        launched.startup.check().await?;
        let failed =
            |error: autumn_base::database::DbError| CommandError::Migrations(error.to_string());
        let lines: Vec<String> = match command.as_str() {
            "migrate" => {
                let applied = migrations.migrate(&pool).await.map_err(failed)?;
                if applied.is_empty() {
                    vec!["no migration pending".to_owned()]
                } else {
                    applied
                        .iter()
                        .map(|version| format!("applied {version}"))
                        .collect()
                }
            }
            "rollback" => match migrations.rollback(&pool).await.map_err(failed)? {
                Some(version) => vec![format!("reverted {version}")],
                None => vec!["no migration applied".to_owned()],
            },
            _ => migrations
                .status(&pool)
                .await
                .map_err(failed)?
                .into_iter()
                .map(|status| {
                    let state = if status.applied { "applied" } else { "pending" };
                    format!("{state:<8} {}_{}", status.version, status.name)
                })
                .collect(),
        };
        crate::telemetry::flush_logs();
        for line in lines {
            println!("{line}");
        }
        Ok(())
    }
}
