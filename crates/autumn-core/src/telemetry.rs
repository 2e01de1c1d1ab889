//! Logging: the subscriber `[log]` describes (or `RUST_LOG`), the request
//! id and access log of every request, and the startup report.

use std::io::IsTerminal as _;
use std::time::Instant;

use axum::extract::{FromRequestParts, Request};
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;
use http::request::Parts;
use tracing::Instrument as _;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::config::{AutumnConfig, LogConfig, LogFormat};

/// Installs the global `tracing` subscriber: `RUST_LOG` when set, else
/// `level` (an `EnvFilter` directive such as `info` or `autumn_core=debug`).
/// Does nothing if a subscriber is already installed.
pub fn init_tracing(level: &str) {
    let mut config = LogConfig::default();
    level.clone_into(&mut config.level);
    init_logging(&config);
}

/// Installs the global `tracing` subscriber `[log]` describes, writing to
/// standard output: `RUST_LOG` when set, else `log.level`; text (coloured
/// only when standard output is a terminal and `NO_COLOR` is unset) or JSON
/// lines by `log.format`. Does nothing if a subscriber is already installed.
pub fn init_logging(config: &LogConfig) {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    let ansi = std::io::stdout().is_terminal() && !no_color;
    let _already_installed =
        tracing::subscriber::set_global_default(subscriber(config, std::io::stdout, ansi)).is_err();
}

/// The subscriber [`init_logging`] installs, writing to `writer`, with
/// colours when `ansi`: for a program that installs it itself, or scopes it
/// (`tracing::subscriber::with_default`) in a test.
///
/// ```
/// use autumn_core::config::{LogConfig, LogFormat};
///
/// let mut config = LogConfig::default();
/// config.format = LogFormat::Json;
/// let subscriber = autumn_core::telemetry::subscriber(&config, std::io::sink, false);
/// tracing::subscriber::with_default(subscriber, || tracing::info!("one JSON line"));
/// ```
pub fn subscriber<W>(
    config: &LogConfig,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match config.format {
        LogFormat::Json => Box::new(builder.json().with_current_span(true).finish()),
        _ => Box::new(builder.with_ansi(ansi).finish()),
    }
}

/// The header carrying a request's id, read from the client or a proxy and
/// sent back on the response.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The id of the request being served: the `x-request-id` it came with, or
/// one made for it. It is on the request's span (so every line logged while
/// serving it names it), on the access log line, and sent back in the
/// response's `x-request-id`.
///
/// ```
/// use autumn_core::telemetry::RequestId;
///
/// async fn handler(id: RequestId) -> String {
///     format!("request {id}")
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id the request came with, when it is one worth keeping: 1 to 128
    /// visible ASCII characters (anything else could forge log lines).
    fn from_header(value: &HeaderValue) -> Option<Self> {
        let bytes = value.as_bytes();
        ((1..=128).contains(&bytes.len()) && bytes.iter().all(|b| (0x21..=0x7e).contains(b)))
            .then(|| Self(String::from_utf8_lossy(bytes).into_owned()))
    }

    /// A new random id: 32 hex digits.
    fn generate() -> Self {
        let mut bytes = [0u8; 16];
        if getrandom::fill(&mut bytes).is_err() {
            // No randomness: still an id unique within this process.
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            bytes[..8].copy_from_slice(&n.to_be_bytes());
        }
        Self(hex::encode(bytes))
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Outside Autumn's pipeline (a bare router in a test) there is no
        // id yet: make one.
        Ok(parts
            .extensions
            .get::<Self>()
            .cloned()
            .unwrap_or_else(Self::generate))
    }
}

/// Gives each request its id and span, and writes its access log line
/// (when `access_log`) once the response head is ready.
pub(crate) async fn request_log(
    axum::extract::State(access_log): axum::extract::State<bool>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(RequestId::from_header)
        .unwrap_or_else(RequestId::generate);
    let header = HeaderValue::from_str(id.as_str()).ok();
    if let Some(header) = &header {
        // Handlers and proxied calls see the id the response will carry.
        request
            .headers_mut()
            .insert(REQUEST_ID_HEADER, header.clone());
    }
    request.extensions_mut().insert(id.clone());
    let method = request.method().clone();
    // The path only: a query string may carry what must not be logged.
    let path = request.uri().path().to_owned();
    let span = tracing::info_span!("request", method = %method, path = %path, request_id = %id);
    let mut response = next.run(request).instrument(span).await;
    if let Some(header) = header {
        response.headers_mut().insert(REQUEST_ID_HEADER, header);
    }
    if access_log {
        let status = response.status().as_u16();
        let latency = format!("{:.3}", started.elapsed().as_secs_f64() * 1000.0);
        tracing::info!(
            target: "autumn::access",
            method = %method,
            path = %path,
            status,
            latency_ms = %latency,
            request_id = %id,
            "{method} {path} {status} {latency}ms"
        );
    }
    response
}

/// The request id, span and access log layer `[log]` describes.
pub(crate) fn request_log_layer<S>(config: &LogConfig, router: axum::Router<S>) -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router.layer(axum::middleware::from_fn_with_state(
        config.access_log,
        request_log,
    ))
}

/// One info line each: the profile, the configuration files read and the
/// ones looked for but absent, the stores and the database in use
/// (passwords redacted).
pub(crate) fn log_startup(config: &AutumnConfig, health: &crate::actuator::Health) {
    use crate::config::redact;
    tracing::info!(profile = %config.profile, "profile: {}", config.profile);
    let paths = |found: bool| {
        config
            .files()
            .iter()
            .filter(|file| file.found == found)
            .map(|file| file.path.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (read, absent) = (paths(true), paths(false));
    match (read.is_empty(), absent.is_empty()) {
        (true, true) => tracing::info!("configuration: given in code, no file read"),
        (true, false) => {
            tracing::info!(
                "configuration: no file read (looked for {absent}); defaults and environment"
            );
        }
        (false, true) => tracing::info!("configuration read from {read}"),
        (false, false) => tracing::info!("configuration read from {read} (not found: {absent})"),
    }
    let redis = config
        .idempotency
        .redis
        .url
        .as_deref()
        .map_or_else(String::new, |url| format!(" at {}", redact(url)));
    let stores: Vec<String> = health
        .components
        .iter()
        .filter(|component| component.name != "db")
        .map(|component| match component.backend {
            "redis" => format!("{}: redis{redis}", component.name),
            backend => format!("{}: {backend}", component.name),
        })
        .collect();
    if !stores.is_empty() {
        tracing::info!("stores: {}", stores.join("; "));
    }
    match &config.database.url {
        Some(url) => tracing::info!("database: {}", redact(url)),
        None => tracing::info!("database: none (database.url unset)"),
    }
}
