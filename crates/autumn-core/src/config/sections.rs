//! The typed configuration sections and their built-in defaults.

use std::fmt;
use std::time::Duration;

use autumn_idempotency::layer::{
    AnonymousKeys, FingerprintPolicy, IdempotencyPolicy, RecordErrors,
};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// `[server]`: where and how the HTTP server listens.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Address the server binds to.
    pub host: String,
    /// TCP port the server listens on.
    pub port: u16,
    /// Most connections served at once; past it the connection that has waited longest for a
    /// request head is closed to admit a new one.
    pub max_connections: usize,
    /// Most connections one client address may hold; 0: no limit. Trusted proxies are exempt.
    pub max_connections_per_client: usize,
    /// Addresses or networks (`10.0.0.0/8`) of proxies whose `Forwarded` / `X-Forwarded-For`
    /// name the client; every other peer is its own client.
    pub trusted_proxies: Vec<String>,
    /// Whether a connection from `trusted_proxies` may start with a PROXY protocol header (v1
    /// or v2) naming the client, as a TCP load balancer sends; from any other peer one is never
    /// read.
    pub proxy_protocol: bool,
    /// Largest request head (request line and headers), in bytes; a larger one gets 431.
    pub max_header_bytes: usize,
    /// Milliseconds a shutdown waits for open requests and detached first-time runs to finish.
    pub shutdown_grace_ms: u64,
    /// Milliseconds the server keeps accepting after a stop signal, with readiness answering
    /// 503, before the drain starts: for load balancers that still send traffic a moment.
    pub shutdown_delay_ms: u64,
    /// `[server.timeouts]`: connection and request time limits.
    pub timeouts: TimeoutsConfig,
    /// `[server.tls]`: serving HTTPS from a certificate and key.
    pub tls: ServerTlsConfig,
    /// `[server.http2]`: HTTP/2 and its limits.
    pub http2: Http2Config,
}

/// The smallest `server.max_header_bytes` accepted: room for a request line and a few headers.
pub const MIN_HEADER_BYTES: usize = 1024;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".to_owned(),
            port: 3000,
            max_connections: 512,
            max_connections_per_client: 100,
            trusted_proxies: Vec::new(),
            proxy_protocol: false,
            max_header_bytes: 32 * 1024,
            shutdown_grace_ms: 10_000,
            shutdown_delay_ms: 0,
            timeouts: TimeoutsConfig::default(),
            tls: ServerTlsConfig::default(),
            http2: Http2Config::default(),
        }
    }
}

impl ServerConfig {
    /// The request time limit, if one is set; a slower request gets 408.
    /// `request_timeout_ms = 0` turns it off.
    #[must_use]
    pub fn request_timeout(&self) -> Option<Duration> {
        self.timeouts
            .request_timeout_ms
            .filter(|millis| *millis > 0)
            .map(Duration::from_millis)
    }

    /// `trusted_proxies`, parsed; an entry that does not parse is left out
    /// (the configuration check refuses one at startup).
    pub(crate) fn trusted_networks(&self) -> Vec<crate::trusted_proxies::Network> {
        self.trusted_proxies
            .iter()
            .filter_map(|entry| crate::trusted_proxies::Network::parse(entry))
            .collect()
    }

    /// How long a connection may take to send a complete request head.
    #[must_use]
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.timeouts.header_read_timeout_ms)
    }

    /// How long a kept-alive connection may wait for its next request's
    /// head; `None` when keep-alive is off (`keep_alive_timeout_ms = 0`).
    #[must_use]
    pub fn keep_alive_timeout(&self) -> Option<Duration> {
        match self.timeouts.keep_alive_timeout_ms {
            0 => None,
            millis => Some(Duration::from_millis(millis)),
        }
    }

    /// How long a shutdown waits for open requests and detached runs.
    #[must_use]
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }
}

/// `[server.timeouts]`: connection and request time limits.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TimeoutsConfig {
    /// Milliseconds a request may take before it is answered with 408; 0 means no limit.
    pub request_timeout_ms: Option<u64>,
    /// Milliseconds a new connection may take to send its first request head; then it is closed.
    pub header_read_timeout_ms: u64,
    /// Milliseconds an idle kept-alive connection waits for its next request head; 0 turns
    /// keep-alive off.
    pub keep_alive_timeout_ms: u64,
    /// Bytes per second a request body must average once it has taken longer than
    /// `header_read_timeout_ms`; a slower body's read fails. 0: no minimum.
    pub min_body_rate: u64,
}

impl Default for TimeoutsConfig {
    fn default() -> Self {
        Self {
            request_timeout_ms: Some(30_000),
            header_read_timeout_ms: 10_000,
            keep_alive_timeout_ms: 15_000,
            min_body_rate: 500,
        }
    }
}

/// `[server.tls]`: HTTPS served by the app itself, on rustls (TLS 1.2 and
/// 1.3 only, with rustls' default cipher suites).
///
/// With both files set, the app's port speaks TLS only. The files are read
/// at startup (a file that cannot be used stops the app naming its key)
/// and again whenever they change, so a certificate renewed on disk is
/// served without a restart; a renewal caught half-written keeps the
/// certificate in use until the files are whole.
///
/// ```
/// use autumn_core::config::AutumnConfig;
///
/// let config = AutumnConfig::from_toml_str(
///     "[server.tls]\ncert_file = \"/etc/autumn/tls/fullchain.pem\"\nkey_file = \"/etc/autumn/tls/privkey.pem\"\n",
/// )
/// .unwrap();
/// assert!(config.server.tls.is_on());
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerTlsConfig {
    /// PEM file of the server's certificate chain, leaf first.
    pub cert_file: Option<String>,
    /// PEM file of the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<String>,
    /// Milliseconds between checks of the files for a renewal; 0 checks only
    /// on SIGHUP.
    pub reload_interval_ms: u64,
    /// A plain-HTTP port (on `server.host`) that answers every request with
    /// a permanent redirect (308) to the same path over HTTPS; unset: none.
    pub redirect_port: Option<u16>,
}

impl Default for ServerTlsConfig {
    fn default() -> Self {
        Self {
            cert_file: None,
            key_file: None,
            reload_interval_ms: 10_000,
            redirect_port: None,
        }
    }
}

impl ServerTlsConfig {
    /// Whether the app serves HTTPS (both files are set).
    #[must_use]
    pub fn is_on(&self) -> bool {
        self.cert_file.is_some() && self.key_file.is_some()
    }
}

/// `[server.http2]`: HTTP/2 beside HTTP/1.1.
///
/// Over TLS a client asks for HTTP/2 by ALPN. Without TLS only a client
/// that starts with HTTP/2's preface ("prior knowledge", h2c) gets it, and
/// only when `h2c` is on; otherwise that client is told to use HTTP/1.1
/// (a GOAWAY with `HTTP_1_1_REQUIRED`) instead of being cut off.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Http2Config {
    /// Offer HTTP/2 over TLS (by ALPN).
    pub enabled: bool,
    /// Serve HTTP/2 without TLS to clients that start with its preface.
    pub h2c: bool,
    /// Most requests (streams) one HTTP/2 connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Milliseconds between keep-alive PINGs on an HTTP/2 connection; one
    /// left unanswered as long closes it. 0: no PINGs.
    pub keep_alive_interval_ms: u64,
}

impl Default for Http2Config {
    fn default() -> Self {
        Self {
            enabled: true,
            h2c: false,
            max_concurrent_streams: 100,
            keep_alive_interval_ms: 20_000,
        }
    }
}

/// `[log]`: logging.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct LogConfig {
    /// A `tracing` `EnvFilter` directive; `RUST_LOG` wins when it is set.
    pub level: String,
    /// How each line is written: `text` for people, `json` (one object a
    /// line) for log collectors.
    pub format: LogFormat,
    /// One info line per request (method, path, status, latency, request id)
    /// under the `autumn::access` target.
    pub access_log: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info".to_owned(),
            format: LogFormat::Text,
            access_log: true,
        }
    }
}

/// `log.format`: how log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LogFormat {
    /// Plain text, coloured only when the output is a terminal.
    Text,
    /// One JSON object a line.
    Json,
}

impl LogFormat {
    /// The name used in configuration files.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Json => "json",
        }
    }
}

/// `[actuator]`: the health, liveness, readiness and metrics endpoints.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ActuatorConfig {
    /// Serve `/actuator/*` at all.
    pub enabled: bool,
    /// Serve `/actuator/*` on this port (on [`host`](Self::host)) instead of
    /// the app's, so it can be kept off the public listener; unset: the
    /// app's port.
    pub port: Option<u16>,
    /// The address the actuator's own port listens on: `127.0.0.1` unless
    /// set, so a management port is not public by accident (set
    /// `0.0.0.0`, or a management network's address, for a probe from
    /// another host). Only with [`port`](Self::port).
    pub host: String,
    /// Serve `/actuator/metrics` and `/actuator/prometheus` on the app's
    /// port when [`port`](Self::port) is unset: off by default, so the
    /// counters are not public unless asked for (health stays there, for
    /// load balancers).
    pub metrics_on_app_port: bool,
    /// Milliseconds a health check of one store or the database may take
    /// before it counts as down.
    pub health_timeout_ms: u64,
    /// Milliseconds a health report is answered again before the stores
    /// and the database are asked anew; concurrent probes share one check.
    /// `0` asks on every request.
    pub health_cache_ms: u64,
    /// Health components (`idempotency`, `submit_token`, `session`, `db`)
    /// shown but not required: when one is down, health and readiness stay up.
    pub optional: Vec<String>,
}

/// The health components an app can report.
pub const HEALTH_COMPONENTS: [&str; 4] = ["idempotency", "submit_token", "session", "db"];

impl Default for ActuatorConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            port: None,
            host: "127.0.0.1".to_owned(),
            metrics_on_app_port: false,
            health_timeout_ms: 2_000,
            health_cache_ms: 1_000,
            optional: Vec::new(),
        }
    }
}

impl ActuatorConfig {
    /// How long one health check may take.
    #[must_use]
    pub fn health_timeout(&self) -> Duration {
        Duration::from_millis(self.health_timeout_ms)
    }
}

/// `[database]`: the SQL database connection pool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct DatabaseConfig {
    /// Connection URL (`postgres://...` or `sqlite://path`); unset means no database.
    pub url: Option<String>,
    /// Maximum number of pooled connections.
    pub pool_size: u32,
    /// Milliseconds to wait for a connection before giving up.
    pub connect_timeout_ms: u64,
    /// Whether PostgreSQL connections keep the statements they prepare.
    /// `false` behind a pooler in transaction mode (PgBouncer before 1.21):
    /// each framework statement then runs in a transaction of its own.
    pub statement_cache: bool,
    /// Whether startup applies the app's pending migrations
    /// (`AppBuilder::migrations`). Unset: yes, except under a production
    /// profile, where a pending migration stops startup instead (run the
    /// app's `db migrate` command as a deploy step).
    pub migrate_on_start: Option<bool>,
}

impl DatabaseConfig {
    /// Whether startup applies the app's migrations under a profile that
    /// is production or not.
    #[must_use]
    pub fn migrates_on_start(&self, production: bool) -> bool {
        self.migrate_on_start.unwrap_or(!production)
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: None,
            pool_size: 10,
            connect_timeout_ms: 5000,
            statement_cache: true,
            migrate_on_start: None,
        }
    }
}

/// Where idempotency records and submit tokens are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Backend {
    /// In this process's memory; lost on restart and not shared between instances.
    #[default]
    Memory,
    /// In Redis, configured by `[idempotency.redis]`.
    Redis,
    /// In the application's SQL database, configured by `[database]`.
    Database,
}

impl Backend {
    /// The spellings accepted in configuration, in declaration order.
    pub const NAMES: &'static [&'static str] = &["memory", "redis", "database"];

    /// The name of this backend as written in configuration (`"memory"`, `"redis"`, `"database"`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Redis => "redis",
            Self::Database => "database",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        match name {
            "memory" => Some(Self::Memory),
            "redis" => Some(Self::Redis),
            "database" => Some(Self::Database),
            _ => None,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// Hand-written rather than derived so that a non-string value (e.g. `backend = 5`) reports
// "expected one of `memory`, `redis`, `database`" instead of toml's "expected string only".
impl<'de> Deserialize<'de> for Backend {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BackendVisitor;

        impl Visitor<'_> for BackendVisitor {
            type Value = Backend;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("one of `memory`, `redis`, `database`")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Backend, E> {
                Backend::from_name(value).ok_or_else(|| E::unknown_variant(value, Backend::NAMES))
            }
        }

        deserializer.deserialize_str(BackendVisitor)
    }
}

/// `[idempotency]`: replay protection for requests carrying an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct IdempotencyConfig {
    /// Whether idempotency keys are honoured at all.
    pub enabled: bool,
    /// Where idempotency records are stored.
    pub backend: Backend,
    /// Seconds a completed response is kept for replay.
    pub ttl_secs: u64,
    /// Seconds a lock is kept before the request holding it is presumed dead.
    pub in_flight_ttl_secs: u64,
    /// Whether the memory backend may be used under a production profile.
    pub allow_memory_in_production: bool,
    /// Largest request body, in bytes, that is fingerprinted; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Largest response body, in bytes, that is recorded; a larger one is sent whole, and a
    /// marker is recorded in its place, so a retry gets 409 rather than a second run.
    pub max_record_bytes: usize,
    /// Which error responses are recorded and replayed like a success: `"none"` (the
    /// default) or `"server"` (a 5xx the route answered); a route may say otherwise.
    pub record_errors: RecordErrorsMode,
    /// Whether a keyed request from a caller with no session, tenant, principal or
    /// `Authorization` is served: `"allow"` (the default) or `"refuse"` (403
    /// `idempotency_key_needs_caller`); a route may say otherwise.
    pub anonymous_keys: AnonymousKeysMode,
    /// Whether every mutating request on an idempotent route must carry an
    /// `Idempotency-Key` (400 without one); a route may say otherwise.
    pub require_key: bool,
    /// What a request's fingerprint covers: `"bytes"` (the body's bytes) or
    /// `"json"` (a JSON body by content, in canonical form).
    pub fingerprint: FingerprintMode,
    /// JSON Pointers left out of a JSON fingerprint (implies `"json"`).
    pub fingerprint_ignore: Vec<String>,
    /// When not empty, the only JSON Pointers a JSON fingerprint covers
    /// (implies `"json"`).
    pub fingerprint_only: Vec<String>,
    /// Milliseconds a duplicate of an in-flight key may wait for the first
    /// run's response (0: 409 at once).
    pub in_flight_wait_ms: u64,
    /// A page explaining the app's keys: linked from the 400 a request
    /// without a required key gets.
    pub docs_url: Option<String>,
    /// Whether a first run's response says until when it is replayed
    /// (`X-Idempotent-Expires`).
    pub expiry_header: bool,
    /// `[idempotency.memory]`: the memory backend's limits.
    pub memory: MemoryConfig,
    /// `[idempotency.redis]`: the Redis backend's connection.
    pub redis: RedisConfig,
    /// `[idempotency.admin]`: inspecting and evicting keys.
    pub admin: IdempotencyAdminConfig,
    /// `[idempotency.quota]`: what one caller may hold.
    pub quota: QuotaConfig,
}

/// `[idempotency.quota]`: how many live records (with submitted tokens and
/// keys in flight) and how many bytes of recorded responses one caller may
/// hold, so a caller minting keys as fast as it can fills its own quota,
/// not the store everyone shares. A caller is its principal when a layer
/// named one, else its session when the store knows it, else its client
/// address (an IPv6 client by its /64), each within its tenant.
///
/// ```
/// use autumn_core::config::AutumnConfig;
///
/// let config = AutumnConfig::from_toml_str(
///     "[idempotency.quota]\nmax_records = 500\n",
/// )
/// .unwrap();
/// assert!(config.idempotency.quota.enabled);
/// assert_eq!(config.idempotency.quota.max_records, 500);
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct QuotaConfig {
    /// Whether callers are held to a quota (on by default, in every
    /// profile).
    pub enabled: bool,
    /// Live records, submitted tokens and keys in flight one caller may
    /// hold; a new key past it gets 429 `idempotency_quota_exceeded`.
    pub max_records: u64,
    /// Bytes of recorded responses one caller may hold; a new key once they
    /// are reached gets 429.
    pub max_bytes: u64,
    /// Where the counts are kept: `"memory"` (this process) or `"redis"`
    /// (on `[idempotency.redis]`, shared by every replica). Unset: Redis
    /// when `idempotency.backend` is Redis, else memory.
    pub backend: Option<Backend>,
    /// Most callers the memory backend counts at once; callers whose
    /// records all expired are forgotten first. Past it, a new caller's
    /// key gets 503, as from a full store.
    pub max_callers: usize,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_records: 10_000,
            max_bytes: 64 * 1024 * 1024,
            backend: None,
            max_callers: 100_000,
        }
    }
}

impl QuotaConfig {
    /// Where counts are kept: `backend` if set, else Redis when
    /// `idempotency` is on Redis, else this process's memory.
    #[must_use]
    pub fn effective_backend(&self, idempotency: Backend) -> Backend {
        self.backend.unwrap_or(match idempotency {
            Backend::Redis => Backend::Redis,
            _ => Backend::Memory,
        })
    }
}

/// `[idempotency.admin]`: key administration, at
/// `/actuator/idempotency/keys/{storage_key}` and through the app binary's
/// `idempotency inspect|evict` command.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct IdempotencyAdminConfig {
    /// Whether keys can be inspected and evicted. Unset: the actuator
    /// endpoint is on exactly when a [`token`](Self::token) is set, and the
    /// `idempotency` command is on except under a production profile.
    pub enabled: Option<bool>,
    /// The bearer token the actuator endpoint asks for, at least 16
    /// characters. Without one the endpoint is not served (404), in every
    /// profile: it reads recorded responses and evicts keys, so a retry
    /// after an eviction runs its handler again.
    pub token: Option<String>,
    /// Whether a recorded body may be read (`?body=true`, `--body`): off
    /// by default, since a body may hold personal data or credentials.
    pub allow_bodies: bool,
}

impl IdempotencyAdminConfig {
    /// Whether the `idempotency inspect|evict` command is on under a
    /// profile that is production or not: off in production unless
    /// `enabled = true`. (The command runs on the app's host, with its
    /// configuration: whoever runs it can reach the store already.)
    ///
    /// ```
    /// use autumn_core::config::AutumnConfig;
    ///
    /// let config = AutumnConfig::default();
    /// assert!(config.idempotency.admin.is_enabled(false));
    /// assert!(!config.idempotency.admin.is_enabled(true));
    /// ```
    #[must_use]
    pub fn is_enabled(&self, production: bool) -> bool {
        self.enabled.unwrap_or(!production)
    }

    /// Whether `/actuator/idempotency/keys/...` is served: only with a
    /// token, in every profile, and not when `enabled = false`.
    ///
    /// ```
    /// use autumn_core::config::AutumnConfig;
    ///
    /// let mut config = AutumnConfig::default();
    /// assert!(!config.idempotency.admin.serves_endpoint());
    /// config.idempotency.admin.token = Some("0123456789abcdef".into());
    /// assert!(config.idempotency.admin.serves_endpoint());
    /// ```
    #[must_use]
    pub fn serves_endpoint(&self) -> bool {
        self.enabled != Some(false) && self.token.is_some()
    }
}

/// What an idempotency fingerprint covers (`idempotency.fingerprint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum FingerprintMode {
    /// Method, path, content type and the body's bytes.
    #[default]
    Bytes,
    /// A JSON body by content: key order and whitespace do not count.
    Json,
}

impl FingerprintMode {
    /// The name used in `autumn.toml`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bytes => "bytes",
            Self::Json => "json",
        }
    }
}

/// Which error responses are recorded (`idempotency.record_errors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RecordErrorsMode {
    /// None: a 4xx or 5xx releases the key, and a retry runs the handler again.
    #[default]
    None,
    /// A 5xx the route answered is recorded and replayed like a success.
    Server,
}

impl RecordErrorsMode {
    /// The name used in `autumn.toml`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Server => "server",
        }
    }
}

/// Whether a keyed request with no caller identity is served
/// (`idempotency.anonymous_keys`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum AnonymousKeysMode {
    /// Served like any other keyed request.
    #[default]
    Allow,
    /// Refused with 403 `idempotency_key_needs_caller`; the handler does not run.
    Refuse,
}

impl AnonymousKeysMode {
    /// The name used in `autumn.toml`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Refuse => "refuse",
        }
    }
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            backend: Backend::Memory,
            ttl_secs: 86_400,
            in_flight_ttl_secs: 60,
            allow_memory_in_production: false,
            max_body_bytes: 2 * 1024 * 1024,
            max_record_bytes: 1024 * 1024,
            record_errors: RecordErrorsMode::None,
            anonymous_keys: AnonymousKeysMode::Allow,
            require_key: false,
            fingerprint: FingerprintMode::Bytes,
            fingerprint_ignore: Vec::new(),
            fingerprint_only: Vec::new(),
            in_flight_wait_ms: 0,
            docs_url: None,
            expiry_header: false,
            memory: MemoryConfig::default(),
            redis: RedisConfig::default(),
            admin: IdempotencyAdminConfig::default(),
            quota: QuotaConfig::default(),
        }
    }
}

impl IdempotencyConfig {
    /// How long a completed response is kept for replay (`ttl_secs`).
    #[must_use]
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_secs)
    }

    /// How long a lock is kept (`in_flight_ttl_secs`).
    #[must_use]
    pub fn in_flight_ttl(&self) -> Duration {
        Duration::from_secs(self.in_flight_ttl_secs)
    }

    /// The app-wide policy these keys describe, which each route's own
    /// policy falls back to.
    ///
    /// ```
    /// use autumn_core::config::AutumnConfig;
    /// use autumn_idempotency::{AnonymousKeys, KeyRequirement, RecordErrors};
    ///
    /// let config = AutumnConfig::from_toml_str(
    ///     "[idempotency]\nrequire_key = true\nfingerprint_ignore = [\"/client_ts\"]\nrecord_errors = \"server\"\nanonymous_keys = \"refuse\"\n",
    /// )?;
    /// let policy = config.idempotency.policy();
    /// assert_eq!(policy.key, Some(KeyRequirement::Required));
    /// assert_eq!(policy.record_errors, Some(RecordErrors::Server));
    /// assert_eq!(policy.anonymous_keys, Some(AnonymousKeys::Refuse));
    /// # Ok::<(), autumn_core::config::ConfigError>(())
    /// ```
    #[must_use]
    pub fn policy(&self) -> IdempotencyPolicy {
        let mut policy = IdempotencyPolicy::new()
            .with_ttl(self.ttl())
            .with_in_flight_ttl(self.in_flight_ttl())
            .with_expiry_header(self.expiry_header)
            .with_record_errors(match self.record_errors {
                RecordErrorsMode::None => RecordErrors::None,
                RecordErrorsMode::Server => RecordErrors::Server,
            })
            .with_anonymous_keys(match self.anonymous_keys {
                AnonymousKeysMode::Allow => AnonymousKeys::Allow,
                AnonymousKeysMode::Refuse => AnonymousKeys::Refuse,
            });
        if self.require_key {
            policy = policy.required();
        }
        if self.in_flight_wait_ms > 0 {
            policy = policy.with_in_flight_wait(Duration::from_millis(self.in_flight_wait_ms));
        }
        if let Some(url) = &self.docs_url {
            policy = policy.with_docs_url(url.clone());
        }
        let json = self.fingerprint == FingerprintMode::Json
            || !self.fingerprint_ignore.is_empty()
            || !self.fingerprint_only.is_empty();
        if json {
            policy = policy.with_fingerprint(FingerprintPolicy::Json {
                ignore: self.fingerprint_ignore.clone(),
                only: self.fingerprint_only.clone(),
            });
        }
        policy
    }

    /// How long a duplicate waits for the first run (`in_flight_wait_ms`).
    #[must_use]
    pub fn in_flight_wait(&self) -> Duration {
        Duration::from_millis(self.in_flight_wait_ms)
    }
}

/// `[idempotency.memory]`: how much the memory backend holds, for
/// idempotency keys and for submit tokens kept in memory (each store has
/// these limits of its own).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct MemoryConfig {
    /// Most storage keys held; a new key past it gets 503 with `Retry-After`.
    pub max_entries: usize,
    /// Bytes of recorded responses past which no new key is taken (503).
    pub max_bytes: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            max_entries: 500_000,
            max_bytes: 128 * 1024 * 1024,
        }
    }
}

/// `[idempotency.redis]`: the Redis backend's connection.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct RedisConfig {
    /// Redis URL (`redis://host:6379/0`, `rediss://` for TLS); required
    /// when the backend is `redis`.
    pub url: Option<String>,
    /// Prefix of every key Autumn writes to Redis.
    pub key_prefix: String,
    /// PEM file of the CA certificate(s) a `rediss://` server's certificate
    /// must chain to, instead of the built-in webpki roots.
    pub tls_ca_file: Option<String>,
    /// PEM file of the client certificate presented to a `rediss://` server
    /// that asks for one; needs [`tls_key_file`](Self::tls_key_file).
    pub tls_cert_file: Option<String>,
    /// PEM file of the private key of [`tls_cert_file`](Self::tls_cert_file).
    pub tls_key_file: Option<String>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: None,
            key_prefix: "autumn:idempotency".to_owned(),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

impl RedisConfig {
    /// The TLS files of a `rediss://` connection, as the Redis connection
    /// takes them.
    ///
    /// ```
    /// use autumn_core::config::AutumnConfig;
    ///
    /// let mut config = AutumnConfig::default();
    /// assert!(config.idempotency.redis.tls().is_empty());
    /// config.idempotency.redis.tls_ca_file = Some("/etc/redis/ca.pem".into());
    /// assert!(!config.idempotency.redis.tls().is_empty());
    /// ```
    #[cfg(feature = "redis")]
    #[must_use]
    pub fn tls(&self) -> autumn_base::redis::RedisTls {
        let mut tls = autumn_base::redis::RedisTls::new();
        tls.ca_file = self.tls_ca_file.as_ref().map(Into::into);
        tls.cert_file = self.tls_cert_file.as_ref().map(Into::into);
        tls.key_file = self.tls_key_file.as_ref().map(Into::into);
        tls
    }

    /// Whether any TLS file is set.
    pub(crate) fn has_tls_files(&self) -> bool {
        self.tls_ca_file.is_some() || self.tls_cert_file.is_some() || self.tls_key_file.is_some()
    }
}

/// `[security]`: the app's secret key, request-forgery and double-submit protection.
#[derive(Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SecurityConfig {
    /// The app's secret, at least 32 random bytes: it seals the session
    /// cookies (and, with `encrypt_recorded_bodies`, the bodies) of the
    /// responses the guards record, so a dump of the store holds nothing
    /// usable. Required in production profiles; elsewhere, unset means a key
    /// made at random for each process (records are then replayed only by
    /// the process that made them). Best given as
    /// `AUTUMN_SECURITY__SECRET_KEY`.
    pub secret_key: Option<String>,
    /// Secrets a rotation retired: what they sealed still opens. Remove one
    /// once the records it sealed have expired (`idempotency.ttl_secs`).
    pub old_secret_keys: Vec<String>,
    /// Whether recorded bodies are sealed too, not only their cookies: for
    /// responses that carry personal data or tokens.
    pub encrypt_recorded_bodies: bool,
    /// `[security.cross_origin]`: refusing mutating requests sent by other sites' pages.
    pub cross_origin: CrossOriginConfig,
    /// `[security.submit_token]`: one-time tokens embedded in HTML forms.
    pub submit_token: SubmitTokenConfig,
    /// `[security.headers]`: the security headers added to every response.
    pub headers: HeadersConfig,
}

impl std::fmt::Debug for SecurityConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secrets are credentials: only whether they are set is shown.
        f.debug_struct("SecurityConfig")
            .field("secret_key", &self.secret_key.as_ref().map(|_| "(set)"))
            .field("old_secret_keys", &self.old_secret_keys.len())
            .field("encrypt_recorded_bodies", &self.encrypt_recorded_bodies)
            .field("cross_origin", &self.cross_origin)
            .field("submit_token", &self.submit_token)
            .field("headers", &self.headers)
            .finish()
    }
}

/// The `Content-Security-Policy` sent by default.
///
/// Scripts only from the app's own origin, plus the inline
/// `double_submit_guard` script, allowed by its SHA-256 hash (so no inline
/// script an attacker injects runs); inline styles allowed, as Autumn's error
/// pages carry one; no plugins, no `<base>` elsewhere, no framing by other
/// sites.
pub const DEFAULT_CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self' 'sha256-B3VrGZpjtzbYDUjDg7QuarTEeZmnVKwCjAAvM9mArnc='; style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; base-uri 'self'; frame-ancestors 'self'";

/// The `Referrer-Policy` values a browser understands.
pub const REFERRER_POLICIES: [&str; 8] = [
    "no-referrer",
    "no-referrer-when-downgrade",
    "origin",
    "origin-when-cross-origin",
    "same-origin",
    "strict-origin",
    "strict-origin-when-cross-origin",
    "unsafe-url",
];

/// `[security.headers]`: headers that tell the browser to be stricter with the app's pages.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct HeadersConfig {
    /// Whether the headers are added (`X-Content-Type-Options: nosniff` always, the others as
    /// set below). A response that already has one of them keeps its own.
    pub enabled: bool,
    /// Whether `Strict-Transport-Security` is sent; unset means yes in production profiles.
    pub hsts: Option<bool>,
    /// The `Content-Security-Policy`; empty sends none.
    pub content_security_policy: String,
    /// The `Referrer-Policy`, one of [`REFERRER_POLICIES`]; empty sends none.
    pub referrer_policy: String,
}

impl Default for HeadersConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            hsts: None,
            content_security_policy: DEFAULT_CONTENT_SECURITY_POLICY.to_owned(),
            referrer_policy: "strict-origin-when-cross-origin".to_owned(),
        }
    }
}

/// `[static]`: files served from a directory.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct StaticConfig {
    /// The directory served, relative to the working directory; unset serves none.
    pub dir: Option<String>,
    /// The path the directory is served under.
    pub mount: String,
}

impl Default for StaticConfig {
    fn default() -> Self {
        Self {
            dir: None,
            mount: "/static".to_owned(),
        }
    }
}

/// `[compression]`: compressing response bodies.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CompressionConfig {
    /// Whether a response is compressed (gzip or brotli) when the request's `Accept-Encoding`
    /// asks for it and the body is larger than 32 bytes; images, gRPC and event streams never
    /// are.
    pub enabled: bool,
}

impl Default for CompressionConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// `[openapi]`: the OpenAPI 3.1 document Autumn builds from the app's routes.
///
/// ```
/// use autumn_core::config::AutumnConfig;
///
/// use autumn_core::config::Profile;
///
/// let config = AutumnConfig::default();
/// assert!(config.openapi.is_served(&Profile::new("dev")));
/// assert!(!config.openapi.is_served(&Profile::new("prod")));
/// assert!(!config.openapi.is_served(&Profile::new("staging")), "only local profiles by default");
/// assert_eq!(config.openapi.path, "/openapi.json");
/// assert_eq!(config.openapi.ui_path, "/openapi", "the interactive page");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct OpenApiConfig {
    /// Whether `GET {path}` serves the document. Unset: served under the
    /// `dev` and `test` profiles only; anywhere else (production, staging,
    /// a profile of the app's own) it would tell anyone every route the app
    /// has.
    pub enabled: Option<bool>,
    /// Where the document is served.
    pub path: String,
    /// The document's `info.title`.
    pub title: String,
    /// The document's `info.version`: the version of the API, not of Autumn.
    pub version: String,
    /// Whether an interactive page (Swagger UI, shipped inside Autumn: no
    /// CDN, no inline script) is served at `ui_path` wherever the document
    /// is served.
    pub ui: bool,
    /// Where the interactive page is served; its script and stylesheet
    /// are served below it.
    pub ui_path: String,
}

impl Default for OpenApiConfig {
    fn default() -> Self {
        Self {
            enabled: None,
            path: "/openapi.json".to_owned(),
            title: "API".to_owned(),
            version: "0.1.0".to_owned(),
            ui: true,
            ui_path: "/openapi".to_owned(),
        }
    }
}

impl OpenApiConfig {
    /// Whether the document is served under `profile`: as `enabled` says,
    /// else only under `dev` and `test`.
    #[must_use]
    pub fn is_served(&self, profile: &super::Profile) -> bool {
        self.enabled
            .unwrap_or(matches!(profile.name(), "dev" | "test"))
    }
}

/// `[cors]`: which other origins' scripts may call the app and read its answers.
///
/// Off while `allowed_origins` is empty. It does not let other sites' pages send mutating
/// requests past the cross-origin check: that is `[security.cross_origin] trusted_origins`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CorsConfig {
    /// Origins allowed, as a browser writes them in `Origin` (`scheme://host[:port]`), or
    /// `["*"]` for any.
    pub allowed_origins: Vec<String>,
    /// Methods a cross-origin request may use.
    pub allowed_methods: Vec<String>,
    /// Request headers a cross-origin request may send.
    pub allowed_headers: Vec<String>,
    /// Seconds a browser may cache a preflight's answer.
    pub max_age_secs: u64,
}

impl Default for CorsConfig {
    fn default() -> Self {
        Self {
            allowed_origins: Vec::new(),
            allowed_methods: ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
                .map(str::to_owned)
                .to_vec(),
            allowed_headers: ["authorization", "content-type", "idempotency-key"]
                .map(str::to_owned)
                .to_vec(),
            max_age_secs: 600,
        }
    }
}

/// `[security.cross_origin]`: refusing mutating requests that a browser sends on behalf of
/// another site (`Sec-Fetch-Site`, else `Origin` against `Host`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CrossOriginConfig {
    /// Whether the cross-origin check is installed.
    pub enabled: bool,
    /// Other origins whose pages may send mutating requests, exactly as a browser writes them
    /// in `Origin`: `scheme://host[:port]`, e.g. `https://admin.example.com`.
    pub trusted_origins: Vec<String>,
    /// Path prefixes that are not checked, by whole segments (`/api` covers `/api/x`, not
    /// `/apiary`).
    pub exempt_paths: Vec<String>,
}

impl Default for CrossOriginConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            trusted_origins: Vec::new(),
            exempt_paths: Vec::new(),
        }
    }
}

/// `[security.submit_token]`: one-time tokens embedded in HTML forms.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SubmitTokenConfig {
    /// Whether the submit-token layer is installed (it guards only forms that embed the field).
    pub enabled: bool,
    /// Name of the hidden form field holding the token.
    pub field_name: String,
    /// Seconds a consumed token's first response is replayed.
    pub ttl_secs: u64,
    /// Seconds an in-flight lock lasts if its submission never finishes.
    pub in_flight_ttl_secs: u64,
    /// Where tokens are stored; unset inherits `[idempotency].backend`.
    pub backend: Option<Backend>,
    /// Path prefixes the guard skips, by whole segments (`/api` covers
    /// `/api/x`, not `/apiary`); tokens are still minted there.
    pub exempt_paths: Vec<String>,
    /// Bytes of a form body scanned for the token: a larger urlencoded body that names the
    /// token field within them gets 413; any other larger form streams on to the route, and
    /// its body fails there if the field is named later.
    pub max_form_bytes: usize,
    /// Largest response body, in bytes, that is recorded; a larger one is sent whole, and a
    /// marker is recorded in its place, so submitting the form again gets 409, not a second run.
    pub max_record_bytes: usize,
    /// Milliseconds a concurrent duplicate waits for the first to finish and replay it (0: 409 at once).
    pub in_flight_wait_ms: u64,
}

impl Default for SubmitTokenConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            field_name: "_submit_token".to_owned(),
            ttl_secs: 600,
            in_flight_ttl_secs: 86_400,
            backend: None,
            exempt_paths: Vec::new(),
            max_form_bytes: 1024 * 1024,
            max_record_bytes: 1024 * 1024,
            in_flight_wait_ms: 0,
        }
    }
}

impl SubmitTokenConfig {
    /// The backend tokens are stored in: `backend` if set, else `idempotency.backend`.
    #[must_use]
    pub fn effective_backend(&self, idempotency: &IdempotencyConfig) -> Backend {
        self.backend.unwrap_or(idempotency.backend)
    }
}

/// `[session]`: server-side sessions and their cookie.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionConfig {
    /// Whether the session layer is installed (a `Session` extractor works only then).
    pub enabled: bool,
    /// Name of the session cookie, before the `__Host-` prefix: while the
    /// cookie is `Secure`, a name without a `__Host-` or `__Secure-` prefix
    /// is sent as `__Host-{cookie_name}` (see
    /// [`effective_cookie_name`](Self::effective_cookie_name)).
    pub cookie_name: String,
    /// Where sessions are kept; unset means the same as `idempotency.backend`.
    pub backend: Option<Backend>,
    /// Seconds a session lives after the visitor was last seen.
    pub ttl_secs: u64,
    /// Seconds a session lives at most from its creation or last sign-in,
    /// however active the visitor; 0 for no limit.
    pub absolute_ttl_secs: u64,
    /// The cookie's `SameSite` attribute: `"lax"`, `"strict"` or `"none"`.
    pub same_site: SameSite,
    /// Whether the cookie is `Secure` (HTTPS only); unset means yes, in every profile.
    /// Browsers keep and send a `Secure` cookie on `http://localhost` and
    /// `http://127.0.0.1`, so development needs nothing; `false` is for an app
    /// reached over plain HTTP at another address (a LAN address, say).
    pub secure: Option<bool>,
    /// Allow the memory backend in a production profile (one instance only).
    pub allow_memory_in_production: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            cookie_name: "autumn_session".to_owned(),
            backend: None,
            ttl_secs: 1_209_600,
            absolute_ttl_secs: 2_592_000,
            same_site: SameSite::Lax,
            secure: None,
            allow_memory_in_production: false,
        }
    }
}

impl SessionConfig {
    /// The backend sessions are kept in: `backend` if set, else `idempotency.backend`.
    #[must_use]
    pub fn effective_backend(&self, idempotency: &IdempotencyConfig) -> Backend {
        self.backend.unwrap_or(idempotency.backend)
    }

    /// How long a session lives after the visitor was last seen.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_secs)
    }

    /// How long a session lives at most from its creation or last sign-in;
    /// `None` when `absolute_ttl_secs` is 0.
    ///
    /// ```
    /// use std::time::Duration;
    /// use autumn_core::config::SessionConfig;
    ///
    /// let mut session = SessionConfig::default();
    /// assert_eq!(session.absolute_ttl(), Some(Duration::from_secs(30 * 24 * 60 * 60)));
    /// session.absolute_ttl_secs = 0;
    /// assert_eq!(session.absolute_ttl(), None);
    /// ```
    #[must_use]
    pub fn absolute_ttl(&self) -> Option<Duration> {
        (self.absolute_ttl_secs > 0).then(|| Duration::from_secs(self.absolute_ttl_secs))
    }

    /// Whether the session cookie is `Secure`: [`secure`](Self::secure) if
    /// set, else `true` (in every profile).
    ///
    /// ```
    /// use autumn_core::config::SessionConfig;
    ///
    /// assert!(SessionConfig::default().is_secure());
    /// ```
    #[must_use]
    pub fn is_secure(&self) -> bool {
        self.secure.unwrap_or(true)
    }

    /// The name the session cookie is written and read under: while the
    /// cookie is [`Secure`](Self::is_secure), [`cookie_name`](Self::cookie_name)
    /// with the `__Host-` prefix, unless it already starts with `__Host-` or
    /// `__Secure-` (kept as is); without `Secure`, `cookie_name` as is.
    ///
    /// ```
    /// use autumn_core::config::SessionConfig;
    ///
    /// let mut session = SessionConfig::default();
    /// assert_eq!(session.effective_cookie_name(), "__Host-autumn_session");
    /// session.secure = Some(false);
    /// assert_eq!(session.effective_cookie_name(), "autumn_session");
    /// ```
    #[must_use]
    pub fn effective_cookie_name(&self) -> String {
        session_cookie_name(&self.cookie_name, self.is_secure())
    }
}

/// The prefix a browser keeps a cookie under only when it came over HTTPS
/// from this very host, `Secure`, with `Path=/` and no `Domain`: a sibling
/// subdomain or a plain-HTTP page cannot plant one.
const HOST_PREFIX: &str = "__Host-";

/// The weaker prefix (`Secure` only), which an app may choose itself.
const SECURE_PREFIX: &str = "__Secure-";

/// Whether `name` starts with `__Host-` or `__Secure-`. Compared without
/// regard to case, as current browsers do, so `__host-sid` is not given a
/// second prefix.
pub(crate) fn has_cookie_prefix(name: &str) -> bool {
    [HOST_PREFIX, SECURE_PREFIX].iter().any(|prefix| {
        name.get(..prefix.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(prefix))
    })
}

/// The session cookie's name on the wire for the configured `name`: the one
/// rule behind [`SessionConfig::effective_cookie_name`] and the
/// `SessionLayer` builder, so what is written and what is read never
/// differ.
pub(crate) fn session_cookie_name(name: &str, secure: bool) -> String {
    if secure && !has_cookie_prefix(name) {
        [HOST_PREFIX, name].concat()
    } else {
        name.to_owned()
    }
}

/// `[tenancy]`: multi-tenant request routing.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TenancyConfig {
    /// Whether every request (but exempt paths) is resolved to a tenant, which then scopes
    /// idempotency records (and submit tokens, when sessions are off).
    pub enabled: bool,
    /// Where the tenant id comes from: `"header"`, `"subdomain"`, `"path"` or `"session"`.
    pub strategy: TenantStrategy,
    /// Request header carrying the tenant id (strategy `"header"`).
    pub header: String,
    /// The domain tenants are subdomains of, e.g. `"example.com"` (strategy `"subdomain"`).
    pub base_domain: Option<String>,
    /// Path prefixes served without a tenant, by whole segments; `/actuator` always is.
    pub exempt_paths: Vec<String>,
}

impl Default for TenancyConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            strategy: TenantStrategy::Header,
            header: "X-Tenant-Id".to_owned(),
            base_domain: None,
            exempt_paths: Vec::new(),
        }
    }
}

/// Where a request's tenant id comes from (`[tenancy] strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TenantStrategy {
    /// The `[tenancy] header` request header.
    #[default]
    Header,
    /// The label of the `Host` right below `[tenancy] base_domain`.
    Subdomain,
    /// The first path segment, removed before routing.
    Path,
    /// The id the app stored in the session with `Tenant::switch`.
    Session,
}

impl TenantStrategy {
    /// The name as written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Header => "header",
            Self::Subdomain => "subdomain",
            Self::Path => "path",
            Self::Session => "session",
        }
    }
}

/// The `SameSite` attribute of the session cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SameSite {
    /// Sent on same-site requests and top-level cross-site navigations
    /// (following a link): the default, and what sign-in flows expect.
    #[default]
    Lax,
    /// Sent on same-site requests only.
    Strict,
    /// Sent on every request; browsers require `Secure` with it.
    None,
}

impl SameSite {
    /// The attribute's value, as written in the cookie.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lax => "Lax",
            Self::Strict => "Strict",
            Self::None => "None",
        }
    }
}
