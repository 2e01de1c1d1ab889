//! [`LaunchError`]: why an app could not start; [`CommandError`]: why a
//! command line an app binary was given failed.

use crate::config::{ConfigError, InvalidSetting};

/// Why an app could not start. Each message is one line naming what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The configuration could not be loaded.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The memory store was chosen for a production profile.
    #[error(
        "idempotency.backend = \"memory\" is refused in production profile `{profile}`: a memory store cannot protect several replicas; set idempotency.backend = \"redis\" or \"database\" (AUTUMN_IDEMPOTENCY__BACKEND), or idempotency.allow_memory_in_production = true for a single instance"
    )]
    MemoryInProduction {
        /// The active profile.
        profile: String,
    },
    /// No secret key in a production profile: recorded session cookies
    /// could not be sealed in a way every replica opens.
    #[error(
        "security.secret_key is not set in production profile `{profile}`: recorded responses carry session cookies, sealed with it before any store keeps them; set it to at least 32 random bytes (AUTUMN_SECURITY__SECRET_KEY, e.g. from `openssl rand -base64 48`), the same on every replica"
    )]
    SecretKeyMissing {
        /// The active profile.
        profile: String,
    },
    /// The memory store was chosen explicitly for submit tokens in a
    /// production profile.
    #[error(
        "security.submit_token.backend = \"memory\" is refused in production profile `{profile}`: a memory store cannot protect several replicas; remove the key to inherit idempotency.backend, or set it to \"redis\" or \"database\""
    )]
    SubmitTokenMemoryInProduction {
        /// The active profile.
        profile: String,
    },
    /// The memory backend was chosen for sessions in a production profile.
    #[error(
        "session.backend = \"memory\" is refused in production profile `{profile}`: every replica would have its own sessions; set session.backend (or idempotency.backend) to \"redis\" or \"database\" (AUTUMN_SESSION__BACKEND), or session.allow_memory_in_production = true for a single instance"
    )]
    SessionMemoryInProduction {
        /// The active profile.
        profile: String,
    },
    /// The session backend is not part of this build.
    #[error(
        "session.backend = \"{backend}\" is not available in this build of autumn-web; enable the autumn-web feature {feature}, or set session.backend = \"memory\"",
        feature = backend_features(.backend)
    )]
    SessionBackendUnavailable {
        /// The backend that was asked for.
        backend: String,
    },
    /// The Redis backend was chosen without a URL.
    #[error(
        "idempotency.backend = \"redis\" needs idempotency.redis.url (or AUTUMN_IDEMPOTENCY__REDIS__URL)"
    )]
    RedisUrlMissing,
    /// The database backend was chosen without a database.
    #[error("idempotency.backend = \"database\" needs database.url (or AUTUMN_DATABASE__URL)")]
    DatabaseMissing,
    /// The chosen backend is not part of this build.
    #[error(
        "idempotency.backend = \"{backend}\" is not available in this build of autumn-web; enable the autumn-web feature {feature}, or use idempotency.backend = \"memory\"",
        feature = backend_features(.backend)
    )]
    BackendUnavailable {
        /// The backend that was asked for.
        backend: String,
    },
    /// `idempotency.redis.url` is not a Redis URL.
    #[error(
        "idempotency.redis.url is an invalid URL ({url}): {reason}; expected redis://[user:password@]host[:port][/db] (rediss:// over TLS), redis+unix:///path/to/socket, or redis+cluster://[user:password@]host1:port1,host2:port2 for a Redis Cluster (rediss+cluster:// over TLS)"
    )]
    RedisUrlInvalid {
        /// The URL, password redacted.
        url: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A TLS file of `[idempotency.redis]` cannot be read, or does not
    /// hold a certificate (or key) that can be used.
    #[error("{key} ({path}) cannot be used: {reason}")]
    RedisTlsFile {
        /// The config key, e.g. `idempotency.redis.tls_ca_file`.
        key: &'static str,
        /// The file it names.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Redis could not be reached at startup.
    #[error("cannot reach Redis for idempotency.redis.url ({url}): {message}")]
    Redis {
        /// The URL, password redacted.
        url: String,
        /// What failed.
        message: String,
    },
    /// The app's migrations are not all applied and startup was not to
    /// apply them (`[database] migrate_on_start = false`, the default under
    /// a production profile).
    #[error(
        "{count} app migration(s) pending ({names}): run the app's `db migrate` command, or set database.migrate_on_start = true"
    )]
    MigrationsPending {
        /// How many.
        count: usize,
        /// Their folder names, comma-separated.
        names: String,
    },
    /// The database could not be used at startup.
    #[error("cannot use the database at database.url ({url}): {message}")]
    Database {
        /// The URL, password redacted.
        url: String,
        /// What failed.
        message: String,
    },
    /// The startup checks of the services the configuration names (Redis,
    /// the database) could not run at all: their runtime could not be built,
    /// or a check panicked. A check that ran and failed is
    /// [`Redis`](Self::Redis) or [`Database`](Self::Database).
    #[error("cannot run the startup check of {keys}: {source}")]
    StartupCheck {
        /// The config keys naming the services to check, e.g.
        /// `idempotency.redis.url, database.url`.
        keys: String,
        /// What failed.
        source: std::io::Error,
    },
    /// A setting has a value that parses but cannot work.
    #[error("invalid {key}: {message}")]
    InvalidSetting {
        /// The config key.
        key: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A `[rate_limit.rules]` rule that cannot be built: its `by` names a
    /// function the app did not register, say.
    #[error("invalid {key}: {message}")]
    RateLimitRule {
        /// The config key, e.g. `rate_limit.rules.login.by`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// Two routes answer the same method and path.
    #[error("two routes answer {method} {path} (`{first}` and `{second}`); remove or rename one")]
    DuplicateRoute {
        /// The method.
        method: String,
        /// The path.
        path: String,
        /// The first route's name.
        first: String,
        /// The second route's name.
        second: String,
    },
    /// A route's idempotency policy (or `[idempotency]`'s) cannot work.
    #[error("{name} has an invalid idempotency policy: {error}")]
    InvalidIdempotencyPolicy {
        /// The route (name, method and path), or `[idempotency]`.
        name: String,
        /// What is wrong.
        error: autumn_idempotency::layer::PolicyError,
    },
    /// A route requires an `Idempotency-Key`, but no idempotency layer
    /// guards it: the requirement would be silently skipped.
    #[error(
        "route `{name}` ({method} {path}) requires an Idempotency-Key, but no idempotency layer guards it; set idempotency.enabled = true and call .idempotent() on the app, or drop the requirement"
    )]
    KeyRequiredWithoutLayer {
        /// The route's name.
        name: String,
        /// Its method.
        method: String,
        /// Its path.
        path: String,
    },
    /// A route's path cannot be served.
    #[error("route `{name}` has an invalid path {path:?}: {reason}")]
    InvalidRoutePath {
        /// The route's name.
        name: String,
        /// The path.
        path: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// The server could not listen on its address.
    #[error("cannot listen on {address} (server.host / server.port): {source}")]
    Bind {
        /// The address.
        address: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The HTTPS redirect could not listen on its port.
    #[error(
        "cannot listen on {address} for the redirect to HTTPS (server.host / server.tls.redirect_port): {source}"
    )]
    RedirectBind {
        /// The address.
        address: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A `[server.tls]` file cannot be read, or does not hold a
    /// certificate (or key) that can be used.
    #[error("{key} ({path}) cannot be used: {reason}")]
    ServerTlsFile {
        /// The config key, e.g. `server.tls.cert_file`.
        key: &'static str,
        /// The file it names.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The actuator could not listen on its own port.
    #[error(
        "cannot listen on {address} for the actuator (actuator.host / actuator.port): {source}"
    )]
    ActuatorBind {
        /// The address.
        address: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// No longer returned: a listener whose address cannot be read is
    /// [`Bind`](Self::Bind), and the server itself does not fail once it
    /// serves.
    #[deprecated(note = "no longer returned; a listener that fails is `LaunchError::Bind`")]
    #[error("server error: {0}")]
    Serve(std::io::Error),
    /// No longer returned: the `idempotency inspect|evict` command's errors
    /// are [`CommandError`]s.
    #[deprecated(note = "no longer returned; see `CommandError::KeyAdmin`")]
    #[error("idempotency command: {0}")]
    KeyAdmin(String),
}

/// Why a command line given to
/// [`AppBuilder::run_command`](super::AppBuilder::run_command) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The app could not start (to serve, or to reach its store).
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// An `idempotency inspect|evict` command could not run: its arguments,
    /// key administration being off, or the store's answer.
    #[error("idempotency command: {0}")]
    KeyAdmin(String),
    /// A `jobs dead|retry|discard` command could not run: its arguments, no
    /// database, or the database's answer.
    #[error("jobs command: {0}")]
    Jobs(String),
    /// A `db migrate|rollback|status` command could not run: its
    /// arguments, no database or migrations, or the migration that failed.
    #[error("db command: {0}")]
    Migrations(String),
    /// `openapi FILE` could not write the document to `FILE`.
    #[error("openapi command: could not write {path}: {source}")]
    Export {
        /// The file named on the command line.
        path: std::path::PathBuf,
        /// Why it could not be written.
        source: std::io::Error,
    },
    /// `openapi` was given more than one argument.
    #[error("openapi command: {0}")]
    ExportUsage(String),
}

/// A layer's refusal of its setting, as the launch reports it.
impl From<InvalidSetting> for LaunchError {
    fn from(setting: InvalidSetting) -> Self {
        Self::InvalidSetting {
            key: setting.key,
            message: setting.message,
        }
    }
}

/// The autumn-web feature(s) that bring `backend`, as the messages name them.
fn backend_features(backend: &str) -> &'static str {
    match backend {
        "redis" => "`redis`",
        "database" => "`postgres` or `sqlite`",
        _ => "that provides it",
    }
}
