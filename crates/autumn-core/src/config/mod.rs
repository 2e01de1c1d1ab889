//! Application configuration: [`AutumnConfig`] and how it is loaded.
//!
//! Configuration is layered, each layer overriding the previous one key by key (tables merge,
//! other values replace):
//!
//! 1. built-in defaults (see `autumn.toml.example`);
//! 2. `autumn.toml`, if present: in the working directory or the nearest directory above it
//!    that has one, up to the workspace root (see [`AutumnConfig::discover`]), or the file
//!    `AUTUMN_CONFIG` names;
//! 3. `autumn-{profile}.toml` next to it, if present, where the profile comes from
//!    `AUTUMN_PROFILE` (default `dev`);
//! 4. environment variables `AUTUMN_SECTION__KEY`: the name after `AUTUMN_`, lowercased and
//!    split on `__`, is the key path, so `AUTUMN_SERVER__PORT=8080` sets `server.port` and
//!    `AUTUMN_IDEMPOTENCY__REDIS__URL` sets `idempotency.redis.url`. A value is read as TOML when
//!    it parses as TOML (`8080`, `true`, `["/a", "/b"]`, `"quoted"`) and as a plain string
//!    otherwise (`redis://localhost:6379/0`); a TOML value that does not fit a string key
//!    (`AUTUMN_IDEMPOTENCY__REDIS__KEY_PREFIX=123`) is used as the string it was written as.
//!    Empty variables are ignored.
//!
//! Unknown keys and ill-typed values are errors whose message names the key, the file or
//! variable that set it, and what was expected:
//!
//! ```text
//! unknown key `server.prot` in ./autumn.toml (expected one of: host, port, timeouts)
//! ```
//!
//! [`AutumnConfig::effective_settings`] reports every key's final value and source.
//!
//! The sections are `#[non_exhaustive]`, so that a new key is not a breaking change: outside
//! this crate, build one from its default (or from TOML) and assign the fields you need.
//!
//! ```
//! use autumn_core::config::{AutumnConfig, Backend, ServerConfig};
//!
//! let mut server = ServerConfig::default();
//! server.port = 0;
//!
//! let mut config = AutumnConfig::default();
//! config.server = server;
//! config.idempotency.backend = Backend::Memory;
//! # assert_eq!(config.server.port, 0);
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

mod env;
mod error;
mod jobs;
mod load;
mod mail;
mod rate_limit;
mod sections;
mod settings;
mod telemetry;
mod validate;
pub(crate) use sections::{has_cookie_prefix, session_cookie_name};
pub(crate) use settings::redact;
#[cfg(test)]
mod tests;

pub use error::ConfigError;
pub(crate) use error::InvalidSetting;
pub use jobs::{JobScheduleConfig, JobsAdminConfig, JobsConfig};
pub use sections::{
    ActuatorConfig, AnonymousKeysMode, Backend, CompressionConfig, CorsConfig, CrossOriginConfig,
    DEFAULT_CONTENT_SECURITY_POLICY, DatabaseConfig, FingerprintMode, HEALTH_COMPONENTS,
    HeadersConfig, Http2Config, IdempotencyAdminConfig, IdempotencyConfig, LogConfig, LogFormat,
    MIN_HEADER_BYTES, MemoryConfig, OpenApiConfig, QuotaConfig, REFERRER_POLICIES,
    RecordErrorsMode, RedisConfig, SameSite, SecurityConfig, ServerConfig, ServerTlsConfig,
    SessionConfig, StaticConfig, SubmitTokenConfig, TenancyConfig, TenantStrategy, TimeoutsConfig,
};

pub use mail::{FileMailConfig, MailConfig, MailTransportKind, SmtpConfig, SmtpTls};
pub use rate_limit::{OnStoreError, RateLimitBy, RateLimitConfig, RateLimitRule};
pub(crate) use rate_limit::{RoutePattern, is_rule_name};
pub use telemetry::{OtlpConfig, TelemetryConfig};

use load::Layers;

/// The application's whole configuration.
///
/// Two values compare equal when their settings and profiles are equal, regardless of where the
/// settings came from.
#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AutumnConfig {
    /// `[server]`: where and how the HTTP server listens.
    pub server: ServerConfig,
    /// `[log]`: logging.
    pub log: LogConfig,
    /// `[actuator]`: health, liveness, readiness and metrics endpoints.
    pub actuator: ActuatorConfig,
    /// `[database]`: the SQL database connection pool.
    pub database: DatabaseConfig,
    /// `[idempotency]`: replay protection for requests carrying an `Idempotency-Key`.
    pub idempotency: IdempotencyConfig,
    /// `[security]`: request-forgery and double-submit protection.
    pub security: SecurityConfig,
    /// `[session]`: the session cookie.
    pub session: SessionConfig,
    /// `[tenancy]`: multi-tenant request routing.
    pub tenancy: TenancyConfig,
    /// `[static]`: files served from a directory (`static` is a keyword, hence the name).
    #[serde(rename = "static")]
    pub static_files: StaticConfig,
    /// `[compression]`: compressing response bodies.
    pub compression: CompressionConfig,
    /// `[cors]`: cross-origin resource sharing.
    pub cors: CorsConfig,
    /// `[rate_limit]`: how many requests a client may make, by rule.
    pub rate_limit: RateLimitConfig,
    /// `[openapi]`: the OpenAPI document built from the routes.
    pub openapi: OpenApiConfig,
    /// `[jobs]`: jobs queued on a schedule, and the dead jobs on the actuator.
    pub jobs: JobsConfig,
    /// `[mail]`: the mailer's transport and sender.
    pub mail: MailConfig,
    /// `[telemetry]`: traces exported over OTLP.
    pub telemetry: TelemetryConfig,
    /// The profile this configuration was loaded for (`AUTUMN_PROFILE`, default `dev`).
    #[serde(skip)]
    pub profile: Profile,
    /// Which source set each key, for [`AutumnConfig::effective_settings`].
    #[serde(skip)]
    provenance: Provenance,
    /// The files looked for, for [`AutumnConfig::files`].
    #[serde(skip)]
    files: ConfigFiles,
}

impl AutumnConfig {
    /// Loads the configuration found from the current directory (see
    /// [`AutumnConfig::discover`]) and the process environment.
    ///
    /// # Errors
    ///
    /// As [`AutumnConfig::discover`], or [`ConfigError::CurrentDir`] when the current
    /// directory is unavailable.
    pub fn load() -> Result<Self, ConfigError> {
        let dir = std::env::current_dir().map_err(|error| ConfigError::CurrentDir { error })?;
        // `std::env::vars` panics on non-Unicode variables; skip non-Unicode names instead.
        let env = std::env::vars_os()
            .filter_map(|(name, value)| {
                Some((
                    name.into_string().ok()?,
                    value.to_string_lossy().into_owned(),
                ))
            })
            .collect();
        Self::discover(&dir, &env)
    }

    /// Loads the configuration as a program started in `start` would: from the file
    /// `env["AUTUMN_CONFIG"]` names (relative to `start`) when it is set, else from the
    /// nearest directory, `start` or above it, that has an `autumn.toml` or
    /// `autumn-{profile}.toml`. The search stops at the workspace root, the first directory
    /// with a `.git` or a `Cargo.lock`, so a project never reads a file from outside itself;
    /// when it finds nothing, the files are looked for in `start`. The profile file is
    /// looked for next to the file read. [`files`](Self::files) says which were read.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use autumn_core::config::AutumnConfig;
    ///
    /// let project = tempfile::tempdir()?;
    /// std::fs::write(project.path().join("Cargo.lock"), "")?;
    /// std::fs::write(project.path().join("autumn.toml"), "[server]\nport = 8080\n")?;
    /// let nested = project.path().join("src/bin");
    /// std::fs::create_dir_all(&nested)?;
    ///
    /// let config = AutumnConfig::discover(&nested, &HashMap::new())?;
    /// assert_eq!(config.server.port, 8080);
    /// assert_eq!(config.files()[0].path, project.path().join("autumn.toml"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`AutumnConfig::load_from`]; [`ConfigError::Read`] when the file `AUTUMN_CONFIG`
    /// names cannot be read (a missing one included: it was asked for).
    pub fn discover(start: &Path, env: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let profile = profile_of(env)?;
        if let Some(named) = env.get(env::CONFIG_VAR).map(|path| path.trim())
            && !named.is_empty()
        {
            let file = start.join(named);
            if let Err(error) = std::fs::metadata(&file) {
                return Err(ConfigError::Read { path: file, error });
            }
            let dir = file.parent().unwrap_or(start);
            let mut layers = Layers::default();
            layers.add_file(&file)?;
            layers.add_file(&dir.join(format!("autumn-{}.toml", profile.name())))?;
            layers.add_env(env);
            return layers.finish(profile);
        }
        let names = [
            "autumn.toml".to_owned(),
            format!("autumn-{}.toml", profile.name()),
        ];
        let found = start
            .ancestors()
            .scan(false, |past_root, dir| {
                if *past_root {
                    return None;
                }
                *past_root = dir.join(".git").exists() || dir.join("Cargo.lock").is_file();
                Some(dir)
            })
            .find(|dir| names.iter().any(|name| dir.join(name).is_file()));
        Self::load_from(found.unwrap_or(start), env)
    }

    /// The configuration files looked for, in the order they were layered, and whether each
    /// was there; empty for a configuration not loaded from files.
    #[must_use]
    pub fn files(&self) -> &[ConfigFile] {
        &self.files.0
    }

    /// Loads the configuration from the files in `dir` and the variables in `env`.
    ///
    /// The profile is `env["AUTUMN_PROFILE"]` (default `dev`). Layers, later winning key by key:
    /// built-in defaults, `dir/autumn.toml`, `dir/autumn-{profile}.toml` (both optional), and
    /// `AUTUMN_SECTION__KEY` variables; see the [module documentation](self).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when a file cannot be read or parsed, a key is unknown, a value has the
    /// wrong type, or `AUTUMN_PROFILE` is not a valid profile name.
    pub fn load_from(dir: &Path, env: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let profile = profile_of(env)?;
        let mut layers = Layers::default();
        layers.add_file(&dir.join("autumn.toml"))?;
        layers.add_file(&dir.join(format!("autumn-{}.toml", profile.name())))?;
        layers.add_env(env);
        layers.finish(profile)
    }

    /// Parses a configuration from a TOML document over the built-in defaults, ignoring files
    /// and the environment; errors name the source `inline TOML`. Meant for tests and examples.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when `toml` is not valid TOML, a key is unknown or a value has the wrong
    /// type.
    pub fn from_toml_str(toml: &str) -> Result<Self, ConfigError> {
        let mut layers = Layers::default();
        layers.add_toml(toml, Source::Inline)?;
        layers.finish(Profile::default())
    }
}

/// The profile `AUTUMN_PROFILE` names, `dev` when it is unset or empty.
fn profile_of(env: &HashMap<String, String>) -> Result<Profile, ConfigError> {
    match env.get(env::PROFILE_VAR).map(|name| name.trim()) {
        Some(name) if !name.is_empty() => {
            if !Profile::is_valid_name(name) {
                return Err(ConfigError::InvalidProfile {
                    name: name.to_owned(),
                });
            }
            Ok(Profile::new(name))
        }
        _ => Ok(Profile::default()),
    }
}

/// A configuration file looked for while loading; see [`AutumnConfig::files`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigFile {
    /// Where it was looked for.
    pub path: PathBuf,
    /// Whether it was there (and read).
    pub found: bool,
}

/// The files looked for. Always compares equal, like [`Provenance`].
#[derive(Debug, Clone, Default)]
struct ConfigFiles(Vec<ConfigFile>);

impl PartialEq for ConfigFiles {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

/// Which source set each leaf key, by dotted key; absent keys are defaults.
///
/// Always compares equal, so that [`AutumnConfig`]'s equality is about its settings only.
#[derive(Debug, Clone, Default)]
struct Provenance(BTreeMap<String, Source>);

impl PartialEq for Provenance {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

/// A configuration profile, such as `dev`, `test` or `prod`, selected by `AUTUMN_PROFILE`.
///
/// The profile picks the optional `autumn-{profile}.toml` file layered over `autumn.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Profile(String);

impl Profile {
    /// A profile named `name`.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The profile's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.0
    }

    /// Whether this is a production profile: `prod` or `production`, in any letter case.
    #[must_use]
    pub fn is_production(&self) -> bool {
        self.0.eq_ignore_ascii_case("prod") || self.0.eq_ignore_ascii_case("production")
    }

    /// Whether `name` can be used in a file name: ASCII letters, digits, `-`, `_` and `.`.
    fn is_valid_name(name: &str) -> bool {
        name.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    }
}

impl Default for Profile {
    /// The `dev` profile.
    fn default() -> Self {
        Self::new("dev")
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The built-in default.
    Default,
    /// A configuration file.
    File(PathBuf),
    /// An environment variable, by name.
    Env(String),
    /// A TOML string passed to [`AutumnConfig::from_toml_str`].
    Inline,
    /// The program itself: a field set on an [`AutumnConfig`] after it was built or loaded.
    Code,
}

impl fmt::Display for Source {
    /// `built-in default`, the file's path, `environment variable NAME`, `inline TOML`, or
    /// `code`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("built-in default"),
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Env(name) => write!(f, "environment variable {name}"),
            Self::Inline => f.write_str("inline TOML"),
            Self::Code => f.write_str("code"),
        }
    }
}

/// One configuration key's final value and where it came from; see
/// [`AutumnConfig::effective_settings`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Setting {
    /// The dotted key, e.g. `server.port`.
    pub key: String,
    /// The value as a TOML literal (`3000`, `"info"`), `<unset>`, with URL passwords redacted.
    pub value: String,
    /// Where the value came from.
    pub source: Source,
}

impl fmt::Display for Setting {
    /// `server.port = 8080 (environment variable AUTUMN_SERVER__PORT)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {} ({})", self.key, self.value, self.source)
    }
}
