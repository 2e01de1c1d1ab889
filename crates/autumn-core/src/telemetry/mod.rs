//! Logging: the subscriber `[log]` describes (or `RUST_LOG`), the request
//! id and access log of every request, and the startup report; the
//! request metrics the actuator reports (`metrics/`); and traces, joined to
//! the caller's and exported over OTLP with the `otlp` feature (`trace/`).

mod buffered;
#[cfg(test)]
mod captured;
pub(crate) mod metrics;
mod request_log;
mod text;
pub(crate) mod trace;

use std::io::{IsTerminal, Write as _};
use std::sync::{Arc, OnceLock};

use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, registry};

use crate::config::{AutumnConfig, LogConfig, LogFormat};

use buffered::{Buffered, BufferedWriter};
pub use request_log::{REQUEST_ID_HEADER, RequestId};
pub(crate) use request_log::{RequestLogLayer, ResponseHeaders};
#[cfg(feature = "otlp")]
pub use trace::otlp_layer;
pub use trace::{flush_traces, outgoing_headers};

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
/// only when the stream is a terminal and `NO_COLOR` is unset) or JSON
/// lines by `log.format`. Does nothing if a subscriber is already installed.
///
/// When the binary was started for a command of its own
/// (`my-app idempotency inspect ...`), the log goes to standard error
/// instead, so that standard output carries only the command's answer and
/// can be piped (`| jq`).
///
/// Lines are written in batches, up to ten milliseconds apart (a warning or an
/// error at once, with the lines before it); a program that ends the
/// process itself calls [`flush_logs`] first.
pub fn init_logging(config: &LogConfig) {
    start(config, false);
}

/// As [`init_logging`] with `config.log`, and, when `[telemetry.otlp]`
/// enables export (with the `otlp` feature), the layer that turns spans
/// into OpenTelemetry spans (`otlp_layer`): the
/// exporter itself is installed by the app's launch, which checks the
/// section. `#[autumn_web::main]` calls this.
///
/// Spans are exported as the log level lets them through: the request and
/// job spans are at `info`.
pub fn init_telemetry(config: &AutumnConfig) {
    start(&config.log, config.telemetry.otlp.enabled);
}

/// Installs the subscriber, with the OpenTelemetry layer when `traced`.
fn start(config: &LogConfig, traced: bool) {
    if tracing::dispatcher::has_been_set() {
        return;
    }
    if crate::key_admin::invoked() {
        install(config, traced, &STDERR, std::io::stderr);
    } else {
        install(config, traced, &STDOUT, std::io::stdout);
    }
}

/// Installs the subscriber on the stream `open` gives, kept in `cell` for
/// [`flush_logs`].
fn install<W>(
    config: &LogConfig,
    traced: bool,
    cell: &'static OnceLock<Arc<Buffered<W>>>,
    open: fn() -> W,
) where
    W: std::io::Write + IsTerminal + Send + 'static,
{
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    let ansi = open().is_terminal() && !no_color;
    let out = cell.get_or_init(|| Buffered::start(open(), buffered::GATHER));
    let writer = BufferedWriter(Arc::clone(out));
    let _already_installed =
        tracing::subscriber::set_global_default(built(config, writer, ansi, traced)).is_err();
}

/// Standard output as [`init_logging`] writes to it, once installed.
static STDOUT: OnceLock<Arc<Buffered<std::io::Stdout>>> = OnceLock::new();
/// Standard error, for a command's log.
static STDERR: OnceLock<Arc<Buffered<std::io::Stderr>>> = OnceLock::new();

/// Writes the log lines still waiting for their batch. The server does
/// this as it stops, and `#[autumn_web::main]` as `main` returns; call it
/// before `std::process::exit`.
///
/// ```
/// autumn_core::telemetry::init_logging(&autumn_core::config::LogConfig::default());
/// tracing::info!("the last line");
/// autumn_core::telemetry::flush_logs();
/// ```
pub fn flush_logs() {
    if let Some(stdout) = STDOUT.get() {
        stdout.flush();
    }
    if let Some(stderr) = STDERR.get() {
        stderr.flush();
    }
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
    built(config, writer, ansi, false)
}

/// [`subscriber`], with the OpenTelemetry layer when `traced`.
fn built<W>(
    config: &LogConfig,
    writer: W,
    ansi: bool,
    traced: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let directives = directives(std::env::var("RUST_LOG").ok(), &config.level);
    match plain_targets(&directives) {
        Some(targets) => traced_or_not(registry().with(targets), config, writer, ansi, traced),
        None => {
            let filter = EnvFilter::try_new(&directives).unwrap_or_else(|_| EnvFilter::new("info"));
            traced_or_not(registry().with(filter), config, writer, ansi, traced)
        }
    }
}

/// `filtered`, with the OpenTelemetry layer when `traced` (and the `otlp`
/// feature), then formatted.
fn traced_or_not<S, W>(
    filtered: S,
    config: &LogConfig,
    writer: W,
    ansi: bool,
    traced: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    S: tracing::Subscriber + for<'s> LookupSpan<'s> + Send + Sync + 'static,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    #[cfg(feature = "otlp")]
    if traced {
        return formatted(filtered.with(otlp_layer()), config, writer, ansi);
    }
    let _ = traced;
    formatted(filtered, config, writer, ansi)
}

/// The directives in force: `RUST_LOG` when it is valid, else `log.level`
/// when it is, else `info`.
fn directives(rust_log: Option<String>, level: &str) -> String {
    let valid = |text: &str| EnvFilter::try_new(text).is_ok();
    match rust_log {
        Some(text) if valid(&text) => text,
        _ if valid(level) => level.to_owned(),
        _ => "info".to_owned(),
    }
}

/// The directives as a filter matched per call site, once, when they are
/// only targets and levels (`info`, `warn,my_app=debug`), the usual case.
/// Span and field directives (`my_app[request]=debug`) need an `EnvFilter`,
/// which also takes a lock on every span entered, left and closed: on every
/// request, since each has its span.
fn plain_targets(directives: &str) -> Option<Targets> {
    let plain = |directive: &str| {
        !directive.is_empty()
            && directive
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-' | b'.' | b'='))
    };
    directives
        .split(',')
        .all(plain)
        .then(|| directives.parse().ok())
        .flatten()
}

/// `filtered` writing to `writer` in the format `log.format` names.
fn formatted<S, W>(
    filtered: S,
    config: &LogConfig,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    S: tracing::Subscriber + for<'s> LookupSpan<'s> + Send + Sync + 'static,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer();
    match config.format {
        LogFormat::Json => {
            Box::new(filtered.with(layer.with_writer(writer).json().with_current_span(true)))
        }
        // A terminal gets the default format's colours; anything else the
        // same layout written without styling (one line per request).
        _ if ansi => Box::new(filtered.with(layer.with_writer(writer).with_ansi(true))),
        _ => {
            // Shared with the format, which writes the framework's own lines
            // (the access log) to it directly.
            let writer = Shared(Arc::new(writer));
            let direct = {
                let writer = Arc::clone(&writer.0);
                text::Direct::new(move |line| {
                    let _ = writer.make_writer().write_all(line);
                })
            };
            Box::new(
                filtered.with(
                    layer
                        .with_writer(writer)
                        .with_ansi(false)
                        .event_format(text::PlainText::with_direct(direct))
                        .fmt_fields(text::PlainText::default()),
                ),
            )
        }
    }
}

/// A subscriber's writer, shared.
struct Shared<W>(Arc<W>);

impl<'a, W: MakeWriter<'a>> MakeWriter<'a> for Shared<W> {
    type Writer = W::Writer;

    fn make_writer(&'a self) -> Self::Writer {
        self.0.make_writer()
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        self.0.make_writer_for(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_wins_when_valid_then_the_configured_level_then_info() {
        assert_eq!(directives(Some("debug".into()), "warn"), "debug");
        assert_eq!(directives(Some("[=".into()), "warn"), "warn");
        assert_eq!(directives(None, "warn,my_app=debug"), "warn,my_app=debug");
        assert_eq!(directives(None, "[="), "info");
    }

    #[test]
    fn plain_directives_are_matched_per_call_site_and_span_ones_by_env_filter() {
        assert!(plain_targets("info").is_some());
        assert!(plain_targets("warn,my_app::orders=debug").is_some());
        assert!(plain_targets("info,my_app[request]=debug").is_none());
        assert!(plain_targets("info,my_app[{id=1}]=debug").is_none());
        // Empty, targets would enable nothing; the env filter decides.
        assert!(plain_targets("").is_none());
    }

    /// Lines written by a subscriber made from `level`.
    fn logged(level: &str, log: impl FnOnce()) -> String {
        let mut config = LogConfig::default();
        level.clone_into(&mut config.level);
        captured::logged(&config, log)
    }

    #[test]
    fn target_directives_filter_as_the_env_filter_would() {
        let log = logged("warn,my_app::orders=debug", || {
            tracing::debug!(target: "my_app::orders::create", "kept: more specific target");
            tracing::info!(target: "my_app::users", "dropped: below warn");
            tracing::warn!(target: "my_app::users", "kept: warn");
        });
        assert!(log.contains("kept: more specific target"), "{log}");
        assert!(log.contains("kept: warn"), "{log}");
        assert!(!log.contains("dropped"), "{log}");
    }

    #[test]
    fn span_directives_still_filter_by_span() {
        let log = logged("warn,[checkout]=debug", || {
            tracing::debug!("dropped: outside the span");
            tracing::debug_span!("checkout").in_scope(|| tracing::debug!("kept: in the span"));
        });
        assert!(log.contains("kept: in the span"), "{log}");
        assert!(!log.contains("dropped"), "{log}");
    }
}
