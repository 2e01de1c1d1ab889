//! Reading configuration keys from `AUTUMN_SECTION__KEY` environment variables.

use std::collections::HashMap;

use toml::Value;

/// Prefix of every Autumn environment variable.
pub(super) const PREFIX: &str = "AUTUMN_";

/// The variable selecting the profile; not a configuration key.
pub(super) const PROFILE_VAR: &str = "AUTUMN_PROFILE";

/// The variable naming the configuration file to read instead of looking
/// for `autumn.toml`; not a configuration key.
pub(super) const CONFIG_VAR: &str = "AUTUMN_CONFIG";

/// Top-level sections, used only to warn about near-miss variable names.
const SECTIONS: &[&str] = &[
    "server",
    "log",
    "actuator",
    "database",
    "idempotency",
    "security",
    "session",
    "tenancy",
    "static",
    "compression",
    "cors",
    "rate_limit",
    "openapi",
    "jobs",
    "mail",
    "telemetry",
];

/// One environment variable that sets a configuration key.
#[derive(Debug, Clone)]
pub(super) struct EnvEntry {
    /// The variable's name, e.g. `AUTUMN_SERVER__PORT`.
    pub(super) name: String,
    /// The key path, e.g. `["server", "port"]`.
    pub(super) path: Vec<String>,
    /// The variable's value as given.
    pub(super) raw: String,
    /// The value as read: a TOML value when `raw` parses as one, else a string.
    pub(super) value: Value,
}

impl EnvEntry {
    /// Whether the value was read as something other than a string (a number, bool, array,
    /// ...), so that the raw text is a different value to fall back to.
    pub(super) fn is_typed(&self) -> bool {
        !matches!(self.value, Value::String(_))
    }
}

/// The configuration keys set by `env`, sorted by variable name so that the result does not
/// depend on map order and a more specific variable (`AUTUMN_A__B__C`) is applied after a less
/// specific one (`AUTUMN_A__B`).
///
/// Variables with the prefix but without `__` (`AUTUMN_PROFILE`, `AUTUMN_FOO`) are not keys and
/// are skipped, as are variables with an empty value (so `AUTUMN_DATABASE__URL=` leaves the
/// key unset instead of setting it to `""`).
pub(super) fn entries(env: &HashMap<String, String>) -> Vec<EnvEntry> {
    let mut entries: Vec<EnvEntry> = env
        .iter()
        .filter_map(|(name, raw)| entry(name, raw))
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

fn entry(name: &str, raw: &str) -> Option<EnvEntry> {
    let rest = name.strip_prefix(PREFIX)?;
    if !rest.contains("__") {
        warn_near_miss(name, rest);
        return None;
    }
    if raw.is_empty() {
        tracing::debug!(variable = name, "ignoring empty configuration variable");
        return None;
    }
    let path = rest.to_lowercase().split("__").map(str::to_owned).collect();
    Some(EnvEntry {
        name: name.to_owned(),
        path,
        raw: raw.to_owned(),
        value: parse_value(raw),
    })
}

/// Reads `raw` as a TOML value (`8080`, `true`, `["/a"]`, `"quoted"`), or as a plain string when
/// it is not valid TOML (`redis://localhost:6379/0`, `debug,hyper=warn`).
pub(super) fn parse_value(raw: &str) -> Value {
    raw.parse::<Value>()
        .unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// Warns about `AUTUMN_SERVER_PORT`-style names, which look like keys but lack the `__`.
fn warn_near_miss(name: &str, rest: &str) {
    if name == PROFILE_VAR {
        return;
    }
    let lower = rest.to_lowercase();
    if let Some(section) = SECTIONS.iter().find(|section| {
        lower
            .strip_prefix(**section)
            .is_some_and(|r| r.starts_with('_'))
    }) {
        let tail = rest.get(section.len() + 1..).unwrap_or_default();
        let suggestion = format!("{PREFIX}{}__{tail}", section.to_uppercase());
        tracing::warn!(
            variable = name,
            "{name} is not a configuration key (keys are separated by `__`); did you mean {suggestion}?"
        );
    }
}
