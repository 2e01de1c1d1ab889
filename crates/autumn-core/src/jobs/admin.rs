//! The `jobs` command every app binary understands: list the dead jobs,
//! run one again, or discard it. Each prints one JSON line per job or
//! outcome on standard output.
//!
//! Not gated by a setting: whoever can run the app's binary with its
//! configuration holds the database's credentials, and with them the same
//! power over the queue. The actuator serves the same over HTTP, behind a
//! token (`actuator.rs`).

use autumn_base::database::DbPool;

use super::queue;

/// The word that, first on an app binary's command line, runs a jobs
/// command instead of the server.
pub(crate) const COMMAND: &str = "jobs";

const USAGE: &str = "usage: jobs dead [--limit N] | jobs retry ID | jobs discard ID";

/// One parsed command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    /// List up to this many dead jobs.
    Dead(i64),
    /// Run the dead job again.
    Retry(i64),
    /// Delete the dead job.
    Discard(i64),
}

impl Command {
    /// Reads the arguments after [`COMMAND`].
    pub(crate) fn parse(args: &[String]) -> Result<Self, String> {
        let id = |value: Option<&String>| -> Result<i64, String> {
            let value = value.ok_or_else(|| format!("a job id is needed; {USAGE}"))?;
            value
                .parse()
                .map_err(|_| format!("`{value}` is not a job id; {USAGE}"))
        };
        match args {
            [dead] if dead == "dead" => Ok(Self::Dead(100)),
            [dead, flag, limit] if dead == "dead" && flag == "--limit" => limit
                .parse()
                .ok()
                .filter(|limit| *limit > 0)
                .map(Self::Dead)
                .ok_or_else(|| format!("--limit takes a number above 0, got `{limit}`")),
            [retry, rest @ ..] if retry == "retry" && rest.len() <= 1 => {
                Ok(Self::Retry(id(rest.first())?))
            }
            [discard, rest @ ..] if discard == "discard" && rest.len() <= 1 => {
                Ok(Self::Discard(id(rest.first())?))
            }
            _ => Err(USAGE.to_owned()),
        }
    }

    /// Runs the command on `pool`: the lines to print.
    pub(crate) async fn run(self, pool: &DbPool) -> Result<Vec<String>, String> {
        match self {
            Self::Dead(limit) => {
                let dead = queue::dead(pool, limit, false)
                    .await
                    .map_err(|error| format!("cannot read the queue: {error}"))?;
                Ok(dead
                    .iter()
                    .map(|job| serde_json::to_string(job).unwrap_or_default())
                    .collect())
            }
            Self::Retry(id) | Self::Discard(id) => {
                let retry = matches!(self, Self::Retry(_));
                let changed = queue::settle_dead(pool, id, retry)
                    .await
                    .map_err(|error| format!("cannot change job {id}: {error}"))?;
                if !changed {
                    return Err(format!("no dead job has the id {id}"));
                }
                Ok(vec![settled(id, retry).to_string()])
            }
        }
    }
}

/// What retrying (`retried`) or discarding a dead job answers, on the
/// command line and on the actuator: `{"id":42,"retried":true}`.
pub(crate) fn settled(id: i64, retried: bool) -> serde_json::Value {
    let done = if retried { "retried" } else { "discarded" };
    serde_json::json!({ "id": id, done: true })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Command, String> {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        Command::parse(&args)
    }

    #[test]
    fn command_lines() {
        assert_eq!(parse("dead"), Ok(Command::Dead(100)));
        assert_eq!(parse("dead --limit 5"), Ok(Command::Dead(5)));
        assert_eq!(parse("retry 42"), Ok(Command::Retry(42)));
        assert_eq!(parse("discard 7"), Ok(Command::Discard(7)));
        assert!(
            parse("retry")
                .expect_err("refused")
                .contains("a job id is needed")
        );
        assert!(
            parse("retry x")
                .expect_err("refused")
                .contains("`x` is not a job id")
        );
        assert!(
            parse("dead --limit 0")
                .expect_err("refused")
                .contains("--limit")
        );
        assert!(parse("list").expect_err("refused").starts_with("usage:"));
    }

    /// On a real SQLite queue: the dead job is listed without its payload,
    /// run again, and a second retry finds no dead job.
    #[tokio::test]
    async fn dead_jobs_are_listed_and_run_again() {
        use std::sync::Arc;

        use crate::jobs::{CommitHooks, CommitJobWorker, JobError};

        let url = autumn_testkit::framework::fresh_sqlite_file();
        let pool = DbPool::new(&url, 2, std::time::Duration::from_secs(5)).expect("pool");
        let row = queue::NewRow {
            hook: "mail.welcome",
            record_id: "7".to_owned(),
            idempotency_key: None,
            payload: "{\"email\":\"ada@example.com\"}".to_owned(),
            run_at: 0,
            now: 1_000,
            priority: 0,
            request_id: None,
            trace_context: None,
        };
        assert!(queue::insert_on(&pool, &row).await.expect("queued"));
        let refuse =
            |_job: crate::jobs::CommitJob| async { Err(JobError::permanent("no such user")) };
        let worker = CommitJobWorker::new(
            pool.clone(),
            CommitHooks::new().hook("mail.welcome", refuse),
            Arc::new(autumn_base::clock::ManualClock::starting_at(1_000_000)),
        );
        assert_eq!(worker.run_due().await.expect("run").dead, 1);

        let listed = Command::Dead(10).run(&pool).await.expect("listed");
        assert_eq!(listed.len(), 1);
        let job: serde_json::Value = serde_json::from_str(&listed[0]).expect("JSON");
        assert_eq!(job["hook"], "mail.welcome");
        assert_eq!(job["last_error"], "no such user");
        assert!(
            !listed[0].contains("ada@example.com"),
            "no payload: {}",
            listed[0]
        );
        let id = job["id"].as_i64().expect("an id");

        assert_eq!(
            Command::Retry(id).run(&pool).await.expect("retried"),
            [format!("{{\"id\":{id},\"retried\":true}}")]
        );
        assert!(
            Command::Dead(10)
                .run(&pool)
                .await
                .expect("listed")
                .is_empty()
        );
        let again = Command::Retry(id)
            .run(&pool)
            .await
            .expect_err("not dead now");
        assert!(again.contains("no dead job has the id"), "{again}");
        // Run again (and dead again), then discarded.
        assert_eq!(worker.run_due().await.expect("run").dead, 1);
        Command::Discard(id).run(&pool).await.expect("discarded");
        assert!(
            Command::Dead(10)
                .run(&pool)
                .await
                .expect("listed")
                .is_empty()
        );
    }
}
