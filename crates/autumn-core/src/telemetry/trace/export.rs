//! The exporter: a batch of spans posted over OTLP/HTTP by the SDK's own
//! thread, and the tracer the `tracing` layer builds spans with, switched
//! to the installed exporter's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{SpanBuilder, TraceContextExt as _, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::registry::LookupSpan;

use super::client::Client;
use crate::config::OtlpConfig;

/// Whether an exporter is installed: what every check on the hot path
/// reads first.
static ON: AtomicBool = AtomicBool::new(false);

/// The installed exporter's tracer, which [`SwitchTracer`] builds spans
/// with.
static TRACER: RwLock<Option<SdkTracer>> = RwLock::new(None);

/// The installed provider, flushed at shutdown.
static PROVIDER: Mutex<Option<SdkTracerProvider>> = Mutex::new(None);

/// Whether an exporter is installed.
pub(super) fn exporting() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ExportError {
    /// `telemetry.otlp.endpoint` is unset or not an http(s) URL.
    #[error("telemetry.otlp.endpoint must be an http:// or https:// URL with a host")]
    Endpoint,
    /// The SDK refused the exporter.
    #[error("telemetry.otlp: the exporter could not be built: {0}")]
    Build(String),
}

/// Builds the exporter `config` describes and makes it the process's:
/// spans from now on go to it, and the one installed before (an earlier
/// app in the same process) is flushed and shut down on a thread of its
/// own.
///
/// # Errors
///
/// [`ExportError`] when the endpoint is unusable or the SDK refuses it
/// (validation has refused both already; this is the last word).
pub(crate) fn install(config: &OtlpConfig) -> Result<(), ExportError> {
    let endpoint = config.endpoint_uri().ok_or(ExportError::Endpoint)?;
    let timeout = Duration::from_millis(config.timeout_ms.max(1));
    let headers: HashMap<String, String> = config
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Client::new(timeout).map_err(|e| ExportError::Build(e.to_string()))?)
        .with_endpoint(endpoint.to_string())
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(timeout)
        .with_headers(headers)
        .build()
        .map_err(|error| ExportError::Build(error.to_string()))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(config.service_name())
        .build();
    // The batch processor exports from a thread of its own: a slow or
    // absent collector never holds a request, and a full queue drops spans
    // instead of growing.
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("autumn");
    *TRACER.write().unwrap_or_else(PoisonError::into_inner) = Some(tracer);
    let replaced = PROVIDER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .replace(provider);
    ON.store(true, Ordering::Relaxed);
    if let Some(old) = replaced {
        // Shutting down waits for its last export: not on the caller's
        // thread, which may be the runtime's.
        let _detached = std::thread::Builder::new()
            .name("autumn-otlp-retire".to_owned())
            .spawn(move || drop(old.shutdown()));
    }
    tracing::info!(
        target: "autumn::telemetry",
        endpoint = %redacted(&endpoint),
        "traces exported over OTLP/HTTP"
    );
    Ok(())
}

/// The endpoint without what its user info may carry.
fn redacted(endpoint: &http::Uri) -> String {
    crate::config::redact(&endpoint.to_string())
}

/// Flushes the installed provider, off the async runtime: the flush waits
/// for the export thread.
pub(super) async fn flush() {
    let provider = PROVIDER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if let Some(provider) = provider {
        let flushed = tokio::task::spawn_blocking(move || provider.force_flush()).await;
        if let Ok(Err(error)) = flushed {
            tracing::warn!(target: "autumn::telemetry", %error, "spans could not be flushed");
        }
    }
}

/// The layer that turns `tracing` spans into OpenTelemetry spans, exported
/// by the exporter the app installs at launch (`[telemetry.otlp]`). Add it
/// to a subscriber of your own;
/// [`init_telemetry`](crate::telemetry::init_telemetry) adds it to
/// Autumn's.
///
/// ```
/// use tracing_subscriber::layer::SubscriberExt as _;
///
/// let subscriber = tracing_subscriber::registry()
///     .with(autumn_core::telemetry::otlp_layer())
///     .with(tracing_subscriber::fmt::layer());
/// tracing::subscriber::with_default(subscriber, || tracing::info!("traced"));
/// ```
pub fn otlp_layer<S>() -> impl tracing_subscriber::Layer<S> + Send + Sync
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    tracing_opentelemetry::layer()
        .with_tracer(SwitchTracer)
        // Busy and idle times would read the clock on every poll of every
        // span; the span's own start and end say how long it took.
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false)
}

/// Builds spans with the installed exporter's tracer, or, before one is
/// installed, with a tracer that exports nowhere.
#[derive(Debug, Clone, Copy)]
struct SwitchTracer;

/// A tracer with no processor: its spans go nowhere.
fn idle() -> &'static SdkTracer {
    static IDLE: OnceLock<SdkTracer> = OnceLock::new();
    IDLE.get_or_init(|| SdkTracerProvider::builder().build().tracer("autumn"))
}

impl Tracer for SwitchTracer {
    type Span = opentelemetry_sdk::trace::Span;

    fn build_with_context(&self, builder: SpanBuilder, parent_cx: &Context) -> Self::Span {
        let installed = TRACER.read().unwrap_or_else(PoisonError::into_inner);
        match installed.as_ref() {
            Some(tracer) => tracer.build_with_context(builder, parent_cx),
            None => idle().build_with_context(builder, parent_cx),
        }
    }
}

/// Makes `span` (a request's) a child of the trace `headers` name, when
/// they carry a valid `traceparent`; otherwise it starts a trace of its
/// own.
pub(crate) fn join_caller(span: &tracing::Span, headers: &HeaderMap) {
    if !headers.contains_key("traceparent") {
        return;
    }
    let parent =
        TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        // The span is not started yet: setting its parent cannot fail but
        // for a subscriber without the layer, which exports nothing anyway.
        let _ = span.set_parent(parent);
    }
}

/// The current span's context as `traceparent` and `tracestate`.
pub(super) fn inject_current(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context();
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new()
            .inject_context(&context, &mut opentelemetry_http::HeaderInjector(headers));
    }
}

/// The current span's `traceparent`.
pub(super) fn current_traceparent() -> Option<String> {
    let mut headers = HeaderMap::new();
    inject_current(&mut headers);
    headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// Links `span` to the span `traceparent` names, when it is valid.
pub(super) fn link_to(span: &tracing::Span, traceparent: &str) {
    let Ok(value) = http::HeaderValue::from_str(traceparent) else {
        return;
    };
    let mut headers = HeaderMap::with_capacity(1);
    headers.insert("traceparent", value);
    let queued =
        TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(&headers));
    let context = queued.span().span_context().clone();
    if context.is_valid() {
        span.add_link_with_attributes(context, vec![KeyValue::new("autumn.link", "queued_by")]);
    }
}
