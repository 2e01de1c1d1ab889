//! Layering the configuration sources into one TOML table and deserializing it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::Path;

use serde_path_to_error::Segment;
use toml::{Table, Value};

use super::env::{self, EnvEntry};
use super::settings::redact;
use super::{AutumnConfig, ConfigError, ConfigFile, ConfigFiles, Profile, Provenance, Source};

/// The merged configuration table, plus which source set each leaf key last.
#[derive(Debug, Default)]
pub(super) struct Layers {
    table: Table,
    sources: BTreeMap<String, Source>,
    env: Vec<EnvEntry>,
    /// The files looked for, in order, and whether each was there.
    files: Vec<ConfigFile>,
}

impl Layers {
    /// Merges the TOML file at `path` over the current layers; a missing file is skipped.
    pub(super) fn add_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let found = |found| ConfigFile {
            path: path.to_path_buf(),
            found,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                tracing::debug!(path = %path.display(), "reading configuration file");
                self.files.push(found(true));
                self.add_toml(&text, Source::File(path.to_path_buf()))
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                tracing::debug!(path = %path.display(), "no configuration file");
                self.files.push(found(false));
                Ok(())
            }
            Err(error) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                error,
            }),
        }
    }

    /// Merges the TOML document `text`, which came from `origin`, over the current layers.
    pub(super) fn add_toml(&mut self, text: &str, origin: Source) -> Result<(), ConfigError> {
        let table = text.parse::<Table>().map_err(|error| ConfigError::Parse {
            message: parse_message(text, &error),
            origin: origin.clone(),
        })?;
        merge(&mut self.table, table, "", &origin, &mut self.sources);
        Ok(())
    }

    /// Merges the `AUTUMN_SECTION__KEY` variables in `env` over the current layers.
    pub(super) fn add_env(&mut self, env: &HashMap<String, String>) {
        for entry in env::entries(env) {
            let origin = Source::Env(entry.name.clone());
            let mut value = entry.value.clone();
            for key in entry.path.iter().rev() {
                let mut table = Table::new();
                table.insert(key.clone(), value);
                value = Value::Table(table);
            }
            if let Value::Table(table) = value {
                merge(&mut self.table, table, "", &origin, &mut self.sources);
            }
            self.env.push(entry);
        }
    }

    /// Deserializes the merged table into an [`AutumnConfig`] for `profile`.
    ///
    /// When a value that came from an environment variable as a non-string TOML value (`123`,
    /// `true`) fails to deserialize, it is retried as the variable's raw text; the retry is kept
    /// if that key then deserializes, otherwise the original error is reported.
    pub(super) fn finish(mut self, profile: Profile) -> Result<AutumnConfig, ConfigError> {
        let mut retried: HashSet<usize> = HashSet::new();
        // The variable currently being retried as a string: (index, typed value, first error).
        let mut retry: Option<(usize, Value, DeError)> = None;
        loop {
            let error = match deserialize(&self.table) {
                Ok(mut config) => {
                    config.profile = profile;
                    config.provenance = Provenance(self.sources);
                    config.files = ConfigFiles(self.files);
                    // Warnings wait for launch, which validates again.
                    config.check()?;
                    return Ok(config);
                }
                Err(error) => error,
            };
            let origin = self.origin_of(&error);
            if let Some((index, typed, first)) = retry.take() {
                let entry = &self.env[index];
                if origin == Source::Env(entry.name.clone()) {
                    // Not valid as a string either: report the value as it was read.
                    set(&mut self.table, &entry.path, typed);
                    return Err(self.config_error(&first));
                }
                tracing::debug!(
                    variable = %entry.name,
                    "configuration variable used as a string"
                );
            }
            if let Source::Env(name) = &origin
                && let Some(index) = self.env.iter().rposition(|entry| &entry.name == name)
                && retried.insert(index)
            {
                let entry = &self.env[index];
                // Only when the value is still the one this variable set.
                if entry.is_typed() && get(&self.table, &entry.path) == Some(&entry.value) {
                    let path = entry.path.clone();
                    let raw = Value::String(entry.raw.clone());
                    let typed = entry.value.clone();
                    set(&mut self.table, &path, raw);
                    retry = Some((index, typed, error));
                    continue;
                }
            }
            return Err(self.config_error(&error));
        }
    }

    /// Which source the error's key came from.
    fn origin_of(&self, error: &DeError) -> Source {
        self.source_of(&ErrorKey::new(error).lookup)
    }

    /// The source that set `path`: the key itself or its nearest ancestor, or failing that a
    /// key below it (for a table that was set leaf by leaf); [`Source::Default`] if none.
    fn source_of(&self, path: &[String]) -> Source {
        for len in (1..=path.len()).rev() {
            if let Some(source) = self.sources.get(&path[..len].join(".")) {
                return source.clone();
            }
        }
        if !path.is_empty() {
            let prefix = format!("{}.", path.join("."));
            if let Some((_, source)) = self
                .sources
                .range(prefix.clone()..)
                .next()
                .filter(|(key, _)| key.starts_with(&prefix))
            {
                return source.clone();
            }
        }
        Source::Default
    }

    fn config_error(&self, error: &DeError) -> ConfigError {
        let mut key = ErrorKey::new(error);
        let message = one_line(error.inner().message());
        if let Some((field, expected)) = unknown_field(&message) {
            // serde_path_to_error's path already ends at the unknown key (the tests check
            // this); should a future version stop at the parent table, append the key.
            if key.lookup.last() != Some(&field) {
                key.push(&field);
            }
            return ConfigError::UnknownKey {
                origin: self.source_of(&key.lookup),
                key: key.display,
                expected,
            };
        }
        ConfigError::InvalidValue {
            origin: self.source_of(&key.lookup),
            key: key.display,
            message: redact(&message),
        }
    }
}

type DeError = serde_path_to_error::Error<toml::de::Error>;

fn deserialize(table: &Table) -> Result<AutumnConfig, DeError> {
    serde_path_to_error::deserialize(Value::Table(table.clone()))
}

/// A deserialization error's key, for display and for looking up its source.
struct ErrorKey {
    /// `server.port`, `security.submit_token.exempt_paths[0]`.
    display: String,
    /// The table keys leading to the error, up to the first array index.
    lookup: Vec<String>,
}

impl ErrorKey {
    fn new(error: &DeError) -> Self {
        let mut key = Self {
            display: String::new(),
            lookup: Vec::new(),
        };
        let mut in_array = false;
        for segment in error.path() {
            match segment {
                Segment::Map { key: name } => {
                    if !key.display.is_empty() {
                        key.display.push('.');
                    }
                    key.display.push_str(name);
                    if !in_array {
                        key.lookup.push(name.clone());
                    }
                }
                Segment::Seq { index } => {
                    key.display.push_str(&format!("[{index}]"));
                    in_array = true;
                }
                Segment::Enum { .. } => {}
                Segment::Unknown => {
                    key.display.push_str(".?");
                    in_array = true;
                }
            }
        }
        key
    }

    fn push(&mut self, name: &str) {
        if !self.display.is_empty() {
            self.display.push('.');
        }
        self.display.push_str(name);
        self.lookup.push(name.to_owned());
    }
}

/// Merges `incoming` into `target` key by key: tables merge recursively, anything else replaces
/// what was there. Records `origin` for every leaf written, under its dotted key.
fn merge(
    target: &mut Table,
    incoming: Table,
    prefix: &str,
    origin: &Source,
    sources: &mut BTreeMap<String, Source>,
) {
    for (name, value) in incoming {
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        match (target.get_mut(&name), value) {
            (Some(Value::Table(existing)), Value::Table(table)) => {
                merge(existing, table, &key, origin, sources);
            }
            (_, value) => {
                forget(sources, &key);
                record(&value, &key, origin, sources);
                target.insert(name, value);
            }
        }
    }
}

/// Records `origin` for every leaf of `value`, which sits at `key`.
fn record(value: &Value, key: &str, origin: &Source, sources: &mut BTreeMap<String, Source>) {
    match value {
        Value::Table(table) if !table.is_empty() => {
            for (name, value) in table {
                record(value, &format!("{key}.{name}"), origin, sources);
            }
        }
        _ => {
            sources.insert(key.to_owned(), origin.clone());
        }
    }
}

/// Forgets the sources of `key` and of everything below it.
fn forget(sources: &mut BTreeMap<String, Source>, key: &str) {
    let below = format!("{key}.");
    sources.retain(|existing, _| existing != key && !existing.starts_with(&below));
}

fn get<'a>(table: &'a Table, path: &[String]) -> Option<&'a Value> {
    let (last, parents) = path.split_last()?;
    let mut table = table;
    for name in parents {
        table = table.get(name)?.as_table()?;
    }
    table.get(last)
}

fn set(table: &mut Table, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut table = table;
    for name in parents {
        match table.get_mut(name) {
            Some(Value::Table(inner)) => table = inner,
            _ => return,
        }
    }
    table.insert(last.clone(), value);
}

/// `unknown field `prot`, expected one of `host`, `port`` -> (`prot`, [`host`, `port`]).
fn unknown_field(message: &str) -> Option<(String, Vec<String>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    // serde lists the allowed fields in backticks: "`a`", "`a` or `b`", "one of `a`, `b`, ...",
    // or says "there are no fields".
    let expected = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    Some((field.to_owned(), expected))
}

/// A TOML syntax error as one line: `line 3, column 7: <what went wrong>`.
fn parse_message(text: &str, error: &toml::de::Error) -> String {
    let message = one_line(error.message());
    match error.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before
                .rsplit('\n')
                .next()
                .unwrap_or_default()
                .chars()
                .count()
                + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

/// Joins the non-blank lines of `message` with `; `.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
