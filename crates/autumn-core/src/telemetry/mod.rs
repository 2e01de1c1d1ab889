//! Logging: the subscriber `[log]` describes (or `RUST_LOG`), the request
//! id and access log of every request, and the startup report.

mod request_log;
mod text;

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::config::{AutumnConfig, LogConfig, LogFormat};

pub(crate) use request_log::RequestLogLayer;
pub use request_log::{REQUEST_ID_HEADER, RequestId};

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
        // A terminal gets the default format's colours; anything else the
        // same layout written without styling (one line per request).
        _ if ansi => Box::new(builder.with_ansi(true).finish()),
        _ => Box::new(
            builder
                .with_ansi(false)
                .event_format(text::PlainText)
                .fmt_fields(text::PlainText)
                .finish(),
        ),
    }
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
