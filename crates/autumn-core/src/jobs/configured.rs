//! [`CommitHooks::configured`]: the `[jobs.schedule.NAME]` tables of the
//! configuration laid over the schedules given in code.

use super::hook::{CommitHooks, Scheduled};
use crate::config::{AutumnConfig, ConfigError, JobScheduleConfig, Source};
use crate::cron::Cron;

impl CommitHooks {
    /// These hooks with the schedules of `config`'s `[jobs.schedule]`
    /// tables: a table whose name is a schedule given in code
    /// ([`schedule`](Self::schedule)) replaces the keys it sets and keeps
    /// the others (`enabled = false` alone switches it off); any other
    /// table is a schedule of its own, and says `cron` and `job`. The app's
    /// launch calls it; call it yourself for a worker you build.
    ///
    /// ```
    /// use autumn_core::config::AutumnConfig;
    /// use autumn_core::jobs::{CommitHooks, CommitJob, Job, JobError};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct NightlyReport {
    ///     format: String,
    /// }
    ///
    /// impl Job for NightlyReport {
    ///     const NAME: &'static str = "reports.nightly";
    ///     async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let config = AutumnConfig::from_toml_str(
    ///     r#"
    ///     [database]
    ///     url = "postgres://postgres@127.0.0.1/app"
    ///     [jobs.schedule.nightly-report]
    ///     cron = "30 3 * * *"
    ///     job = "reports.nightly"
    ///     payload = { format = "pdf" }
    ///     "#,
    /// )?;
    /// let hooks = CommitHooks::new().job::<NightlyReport>().configured(&config)?;
    /// # let _ = hooks;
    /// // A job no hook is registered for is refused, naming the key.
    /// let error = CommitHooks::new().configured(&config).unwrap_err();
    /// assert_eq!(error.key(), Some("jobs.schedule.nightly-report.job"));
    /// # Ok::<(), autumn_core::config::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidValue`] naming the first key to fix:
    /// `jobs.schedule.NAME.cron` when it does not parse, or is missing for
    /// a schedule not given in code; `jobs.schedule.NAME.job` when it is
    /// missing so, or names no registered hook or job;
    /// `jobs.schedule.NAME.payload` when it does not read back into the
    /// job's type.
    pub fn configured(mut self, config: &AutumnConfig) -> Result<Self, ConfigError> {
        for (name, table) in &config.jobs.schedule {
            let in_code = self
                .schedules
                .iter()
                .position(|scheduled| &scheduled.name == name)
                .map(|at| self.schedules.remove(at));
            // Merged hooks may give one name twice: the table replaces both.
            self.schedules.retain(|scheduled| &scheduled.name != name);
            let scheduled = self.laid_over(name, table, in_code, config)?;
            if table.enabled {
                self.schedules.push(scheduled);
            }
        }
        Ok(self)
    }

    /// The schedule `name` that `table` describes, over `in_code`, the
    /// schedule of that name given in code, if any.
    fn laid_over(
        &self,
        name: &str,
        table: &JobScheduleConfig,
        in_code: Option<Scheduled>,
        config: &AutumnConfig,
    ) -> Result<Scheduled, ConfigError> {
        let invalid = |leaf: &str, message: String| {
            let key = format!("jobs.schedule.{name}.{leaf}");
            // A missing key was set nowhere: point at the table instead.
            let origin = match config.source(&key) {
                Source::Code => config.source_below(&format!("jobs.schedule.{name}")),
                source => source,
            };
            ConfigError::InvalidValue {
                key,
                origin,
                message,
            }
        };
        let not_in_code = |example: &str| {
            format!(
                "is missing: no schedule named `{name}` is given in code, so its table must say it, like {example}"
            )
        };
        let cron = match (&table.cron, &in_code) {
            (Some(text), _) => text
                .parse::<Cron>()
                .map_err(|error| invalid("cron", error.reason))?,
            (None, Some(scheduled)) => scheduled.cron.clone(),
            (None, None) => return Err(invalid("cron", not_in_code("cron = \"30 3 * * *\""))),
        };
        let hook = match (&table.job, &in_code) {
            (Some(job), _) => job.clone(),
            (None, Some(scheduled)) => scheduled.hook.clone(),
            (None, None) => return Err(invalid("job", not_in_code("job = \"reports.nightly\""))),
        };
        if !self.hooks.contains_key(&hook) {
            let known: Vec<&str> = self.hooks.keys().map(String::as_str).collect();
            return Err(invalid(
                "job",
                format!(
                    "no job named `{hook}` is registered: register it in code with CommitHooks::job::<J>() (J::NAME = \"{hook}\"){}",
                    if known.is_empty() {
                        String::new()
                    } else {
                        format!(", or name one of: {}", known.join(", "))
                    }
                ),
            ));
        }
        // The code's payload and priority are its job's: kept only for it.
        let same_job = in_code.filter(|scheduled| scheduled.hook == hook);
        let payload = match table.payload_json() {
            Some(payload) => payload,
            None => same_job
                .as_ref()
                .map_or_else(|| "{}".to_owned(), |scheduled| scheduled.payload.clone()),
        };
        if let Some(check) = self.payload_checks.get(&hook) {
            check(&payload).map_err(|error| {
                invalid(
                    "payload",
                    format!("does not read back into the job `{hook}`: {error}"),
                )
            })?;
        }
        let priority = table
            .priority
            .or(same_job.as_ref().map(|scheduled| scheduled.priority))
            .or_else(|| self.priorities.get(&hook).copied())
            .unwrap_or(0);
        Ok(Scheduled {
            name: name.to_owned(),
            cron,
            hook,
            payload,
            priority,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{CommitJob, Job, JobError};

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Nightly {
        format: String,
    }

    impl Job for Nightly {
        const NAME: &'static str = "reports.nightly";
        const PRIORITY: i32 = 3;
        async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
            Ok(())
        }
    }

    fn config(tables: &str) -> AutumnConfig {
        // Never opened: the hooks are checked before any connection.
        let url = format!(
            "sqlite://{}/never-opened.db",
            std::env::temp_dir().display()
        );
        AutumnConfig::from_toml_str(&format!("[database]\nurl = \"{url}\"\n{tables}"))
            .expect("config")
    }

    fn in_code() -> CommitHooks {
        let nightly: Cron = "30 3 * * *".parse().expect("cron");
        CommitHooks::new().schedule(
            "nightly",
            nightly,
            Nightly {
                format: "pdf".to_owned(),
            },
        )
    }

    /// (name, cron, hook, payload, priority) of each schedule.
    fn schedules(hooks: &CommitHooks) -> Vec<(String, String, String, String, i32)> {
        hooks
            .schedules
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    s.cron.to_string(),
                    s.hook.clone(),
                    s.payload.clone(),
                    s.priority,
                )
            })
            .collect()
    }

    fn refused(hooks: CommitHooks, tables: &str) -> (String, String) {
        let error = hooks
            .configured(&config(tables))
            .expect_err("refused at launch");
        (
            error.key().unwrap_or_default().to_owned(),
            error.to_string(),
        )
    }

    #[test]
    fn a_table_changes_the_code_schedule_of_its_name_key_by_key() {
        let hooks = in_code()
            .configured(&config("[jobs.schedule.nightly]\ncron = \"0 4 * * *\"\n"))
            .expect("configured");
        assert_eq!(
            schedules(&hooks),
            [(
                "nightly".to_owned(),
                "0 4 * * *".to_owned(),
                "reports.nightly".to_owned(),
                "{\"format\":\"pdf\"}".to_owned(),
                3
            )]
        );
        let hooks = in_code()
            .configured(&config("[jobs.schedule.nightly]\nenabled = false\n"))
            .expect("configured");
        assert!(schedules(&hooks).is_empty(), "switched off");
        let hooks = in_code()
            .configured(&config(
                "[jobs.schedule.nightly]\npayload = { format = \"csv\" }\npriority = 9\n",
            ))
            .expect("configured");
        assert_eq!(schedules(&hooks)[0].3, "{\"format\":\"csv\"}");
        assert_eq!(schedules(&hooks)[0].4, 9);
    }

    #[test]
    fn a_table_of_its_own_needs_a_cron_and_a_registered_job() {
        let hooks = CommitHooks::new()
            .job::<Nightly>()
            .configured(&config(
                "[jobs.schedule.weekly]\ncron = \"@weekly\"\njob = \"reports.nightly\"\npayload = { format = \"pdf\" }\n",
            ))
            .expect("configured");
        assert_eq!(schedules(&hooks)[0].0, "weekly");
        assert_eq!(schedules(&hooks)[0].4, 3, "the job type's priority");

        let (key, message) = refused(
            CommitHooks::new().job::<Nightly>(),
            "[jobs.schedule.weekly]\njob = \"reports.nightly\"\n",
        );
        assert_eq!(key, "jobs.schedule.weekly.cron", "{message}");
        assert!(message.contains("no schedule named `weekly`"), "{message}");
        assert!(
            message.contains("inline TOML"),
            "points at the table: {message}"
        );

        let (key, message) = refused(
            CommitHooks::new().job::<Nightly>(),
            "[jobs.schedule.weekly]\ncron = \"@weekly\"\n",
        );
        assert_eq!(key, "jobs.schedule.weekly.job", "{message}");

        let (key, message) = refused(
            CommitHooks::new().job::<Nightly>(),
            "[jobs.schedule.weekly]\ncron = \"@weekly\"\njob = \"reports.nighlty\"\n",
        );
        assert_eq!(key, "jobs.schedule.weekly.job", "{message}");
        assert!(
            message.contains("no job named `reports.nighlty` is registered")
                && message.contains("one of: reports.nightly"),
            "{message}"
        );
        assert!(!message.contains('\n'));
    }

    #[test]
    fn a_payload_that_does_not_fit_its_job_is_refused() {
        let (key, message) = refused(
            CommitHooks::new().job::<Nightly>(),
            "[jobs.schedule.weekly]\ncron = \"@weekly\"\njob = \"reports.nightly\"\n",
        );
        assert_eq!(key, "jobs.schedule.weekly.payload", "{message}");
        assert!(message.contains("missing field `format`"), "{message}");
        // Another job keeps nothing of the code schedule's payload.
        let hooks = in_code().hook("reports.raw", |_job: CommitJob| async { Ok(()) });
        let hooks = hooks
            .configured(&config("[jobs.schedule.nightly]\njob = \"reports.raw\"\n"))
            .expect("an untyped hook takes any payload");
        assert_eq!(schedules(&hooks)[0].3, "{}");
        assert_eq!(schedules(&hooks)[0].4, 0);
    }

    /// The launch refuses a schedule whose job the app does not register,
    /// in one line naming the key.
    #[test]
    fn the_launch_refuses_a_schedule_of_an_unknown_job() {
        let config =
            config("[jobs.schedule.weekly]\ncron = \"@weekly\"\njob = \"reports.nightly\"\n");
        let error = crate::app()
            .with_config(config)
            .into_router()
            .expect_err("no such job")
            .to_string();
        assert!(error.contains("jobs.schedule.weekly.job"), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }
}
