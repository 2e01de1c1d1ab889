//! [`ConfigError`]: why configuration could not be loaded.

use std::io;
use std::path::PathBuf;

use super::Source;

/// Why configuration could not be loaded.
///
/// Every variant displays as a single line naming the offending key, where its value came from
/// (a file path or an environment variable) and what was expected, so it can be shown to an
/// operator as is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A configuration file exists but could not be read.
    #[error("cannot read {}: {error}", path.display())]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        error: io::Error,
    },

    /// A configuration file (or inline TOML) is not valid TOML.
    #[error("cannot parse {origin}: {message}")]
    Parse {
        /// Where the malformed TOML came from.
        origin: Source,
        /// The parser's message with its line and column, on one line.
        message: String,
    },

    /// A key that Autumn does not know, usually a typo.
    #[error("unknown key `{key}` in {origin} ({})", expected_keys(expected))]
    UnknownKey {
        /// The full dotted key, e.g. `server.prot`.
        key: String,
        /// Where the key was set.
        origin: Source,
        /// The keys allowed next to it, e.g. `["host", "port", "timeouts"]`.
        expected: Vec<String>,
    },

    /// A known key whose value has the wrong type or is out of range.
    #[error("invalid value for `{key}` in {origin}: {message}")]
    InvalidValue {
        /// The full dotted key, e.g. `server.port`; array elements appear as `key[index]`.
        key: String,
        /// Where the value was set.
        origin: Source,
        /// What was wrong and what was expected, e.g. `invalid type: string "abc", expected u16`.
        message: String,
    },

    /// `AUTUMN_PROFILE` names a profile that cannot be a file name.
    #[error(
        "invalid profile `{name}` in environment variable AUTUMN_PROFILE \
         (expected ASCII letters, digits, `-`, `_` or `.`)"
    )]
    InvalidProfile {
        /// The rejected profile name.
        name: String,
    },

    /// The current directory, where configuration files are looked up, is unavailable.
    #[error("cannot determine the current directory to look for autumn.toml: {error}")]
    CurrentDir {
        /// The underlying I/O error.
        error: io::Error,
    },
}

impl ConfigError {
    /// The dotted key this error is about, if it is about one.
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::UnknownKey { key, .. } | Self::InvalidValue { key, .. } => Some(key),
            Self::Read { .. }
            | Self::Parse { .. }
            | Self::InvalidProfile { .. }
            | Self::CurrentDir { .. } => None,
        }
    }

    /// Where the offending value came from, if the error is about one source.
    #[must_use]
    pub fn origin(&self) -> Option<Source> {
        match self {
            Self::Read { path, .. } => Some(Source::File(path.clone())),
            Self::Parse { origin, .. }
            | Self::UnknownKey { origin, .. }
            | Self::InvalidValue { origin, .. } => Some(origin.clone()),
            Self::InvalidProfile { .. } => Some(Source::Env("AUTUMN_PROFILE".to_owned())),
            Self::CurrentDir { .. } => None,
        }
    }
}

fn expected_keys(expected: &[String]) -> String {
    if expected.is_empty() {
        "no keys are allowed here".to_owned()
    } else {
        format!("expected one of: {}", expected.join(", "))
    }
}

/// A setting whose value parses but cannot work, found where it is put to
/// use: a layer built from the configuration (a header name that is not
/// one, a directory that does not exist). The app turns it into
/// `LaunchError::InvalidSetting`, with the same line.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid {key}: {message}")]
pub(crate) struct InvalidSetting {
    /// The config key.
    pub(crate) key: &'static str,
    /// What is wrong with it.
    pub(crate) message: String,
}
