//! `[jobs]`: schedules that queue jobs, and the actuator's dead-job
//! endpoints.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `[jobs]`: jobs queued on a schedule (`[jobs.schedule.NAME]`) and the
/// dead jobs served on the actuator (`[jobs.admin]`). The jobs themselves
/// are code: a schedule names a job registered with
/// `CommitHooks::job::<J>()` (or `CommitHooks::schedule`).
///
/// ```
/// use autumn_core::config::AutumnConfig;
///
/// let config = AutumnConfig::from_toml_str(
///     r#"
///     [database]
///     url = "postgres://postgres@127.0.0.1/app"
///
///     [jobs.schedule.nightly-report]
///     cron = "30 3 * * *"
///     job = "reports.nightly"
///     payload = { format = "pdf" }
///     "#,
/// )
/// .unwrap();
/// let nightly = &config.jobs.schedule["nightly-report"];
/// assert_eq!(nightly.cron.as_deref(), Some("30 3 * * *"));
/// assert!(nightly.enabled);
/// ```
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct JobsConfig {
    /// The schedules, by name (`[jobs.schedule.nightly-report]`). The name
    /// is what each tick's queue row is unique by, so keep it stable; one
    /// given in code under the same name is changed by the table, key by
    /// key (see [`JobScheduleConfig`]).
    pub schedule: BTreeMap<String, JobScheduleConfig>,
    /// `[jobs.admin]`: the dead jobs at `/actuator/jobs/dead`.
    pub admin: JobsAdminConfig,
}

/// One `[jobs.schedule.NAME]` table: when a job is queued, which job, and
/// with what payload.
///
/// For a schedule the app also gives in code
/// (`CommitHooks::schedule(NAME, ..)`), every key set here replaces the
/// code's value and every key left out keeps it: `enabled = false` alone
/// switches it off, `cron` alone moves it. A schedule only in the file
/// needs `cron` and `job`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct JobScheduleConfig {
    /// When: five cron fields read in UTC (`"30 3 * * *"`, `"*/5 * * * *"`,
    /// `"@daily"`); see `jobs::Cron`.
    pub cron: Option<String>,
    /// Which job: the `NAME` of a `Job` registered in code
    /// (`"reports.nightly"`).
    pub job: Option<String>,
    /// The job's payload, as a table turned into JSON (`{ format = "pdf" }`
    /// is `{"format":"pdf"}`), read back into the job's type when it runs.
    /// Unset: the code schedule's payload, or `{}`.
    pub payload: Option<serde_json::Map<String, serde_json::Value>>,
    /// Among one queue's due jobs, the higher runs first. Unset: the code
    /// schedule's, or the job type's `PRIORITY`.
    pub priority: Option<i32>,
    /// `false` switches the schedule off (its code one too): nothing is
    /// queued.
    pub enabled: bool,
}

impl Default for JobScheduleConfig {
    fn default() -> Self {
        Self {
            cron: None,
            job: None,
            payload: None,
            priority: None,
            enabled: true,
        }
    }
}

impl JobScheduleConfig {
    /// [`payload`](Self::payload) as the JSON text a queue row holds,
    /// `None` when unset. A TOML date or time becomes its RFC 3339 text.
    #[must_use]
    pub fn payload_json(&self) -> Option<String> {
        self.payload.as_ref().map(|table| {
            let mut value = serde_json::Value::Object(table.clone());
            dates_as_text(&mut value);
            value.to_string()
        })
    }
}

/// The key under which the TOML deserializer hands a date or time to a
/// type that is not `toml::value::Datetime` (a JSON value here).
const TOML_DATETIME: &str = "$__toml_private_datetime";

/// Replaces each `{"$__toml_private_datetime": "1979-05-27T07:32:00Z"}` in
/// `value` by its text: the JSON a job reads has no such wrapper.
fn dates_as_text(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if map.len() == 1
                && let Some(serde_json::Value::String(text)) = map.get(TOML_DATETIME)
            {
                *value = serde_json::Value::String(text.clone());
                return;
            }
            map.values_mut().for_each(dates_as_text);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(dates_as_text),
        _ => {}
    }
}

/// `[jobs.admin]`: the dead jobs, at `GET /actuator/jobs/dead`, `POST
/// /actuator/jobs/dead/{id}/retry` and `DELETE /actuator/jobs/dead/{id}`,
/// for a request with `Authorization: Bearer TOKEN`. The app binary's
/// `jobs dead|retry|discard` command does the same and needs none of this.
///
/// ```
/// use autumn_core::config::AutumnConfig;
///
/// let config = AutumnConfig::from_toml_str(
///     "[database]\nurl = \"sqlite://app.db\"\n[jobs.admin]\ntoken = \"0123456789abcdef\"\n",
/// )
/// .unwrap();
/// assert!(config.jobs.admin.serves_endpoints());
/// assert!(!AutumnConfig::default().jobs.admin.serves_endpoints());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct JobsAdminConfig {
    /// `false` turns the endpoints off, token or not.
    pub enabled: bool,
    /// The bearer token the endpoints ask for, at least 16 characters.
    /// Without one they are not served (404), in every profile: they run
    /// jobs again and delete them.
    pub token: Option<String>,
    /// Whether the list may show each job's payload (`?payloads=true`):
    /// off by default, since a payload may hold personal data.
    pub allow_payloads: bool,
}

impl Default for JobsAdminConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            token: None,
            allow_payloads: false,
        }
    }
}

impl JobsAdminConfig {
    /// Whether `/actuator/jobs/dead...` is served: only with a token, and
    /// not when `enabled = false`.
    #[must_use]
    pub fn serves_endpoints(&self) -> bool {
        self.enabled && self.token.is_some()
    }
}
