//! Traces: the request's span joined to its caller's trace (W3C
//! `traceparent`), the trace context a job row keeps and its span links
//! to, the headers that carry the trace on to another service, and (with
//! the `otlp` feature) the export of spans over OTLP/HTTP.
//!
//! Export is process-wide, as the log subscriber is: the first app launched
//! with `[telemetry.otlp] enabled = true` installs the exporter, and a later
//! one replaces it. The subscriber needs the layer that turns `tracing`
//! spans into OpenTelemetry spans: [`init_telemetry`](super::init_telemetry)
//! adds it when the configuration enables export, and
//! [`otlp_layer`] gives it to an app that builds its own subscriber.
//!
//! With export off nothing here runs on a request: the request log checks
//! one flag given at launch, a job row one process-wide flag.

#[cfg(feature = "otlp")]
mod client;
#[cfg(feature = "otlp")]
mod export;

use http::{HeaderMap, HeaderValue};

#[cfg(feature = "otlp")]
pub(crate) use export::install;
#[cfg(feature = "otlp")]
pub use export::otlp_layer;

/// The header an idempotency key travels in to a downstream service.
const IDEMPOTENCY_KEY: http::HeaderName = http::HeaderName::from_static("idempotency-key");

/// The headers for a call from this request to another service: its
/// `idempotency-key` ([`scoped_key`](autumn_idempotency::IdempotencyContext::scoped_key)
/// of `purpose`, the same on every retry of this request), and, while traces
/// are exported, the `traceparent` (and `tracestate`) of the current span,
/// so the other service's spans join this trace.
///
/// ```
/// use autumn_idempotency::IdempotencyContext;
///
/// // A handler of an idempotent route (`autumn_web::idempotency::IdempotencyContext`
/// // and `autumn_web::telemetry::outgoing_headers` in an app).
/// async fn charge(idempotency: IdempotencyContext) -> &'static str {
///     let headers = autumn_core::telemetry::outgoing_headers(&idempotency, "charge");
///     // Given to the client that calls the payment provider:
///     // client.post(url).headers(headers).send().await
///     assert!(headers.contains_key("idempotency-key"));
///     "charged"
/// }
/// ```
#[must_use]
pub fn outgoing_headers(
    context: &autumn_idempotency::IdempotencyContext,
    purpose: &str,
) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(3);
    // Hex digits: always a valid header value.
    if let Ok(key) = HeaderValue::from_str(&context.scoped_key(purpose)) {
        headers.insert(IDEMPOTENCY_KEY, key);
    }
    inject_current(&mut headers);
    headers
}

/// Puts the current span's `traceparent` (and `tracestate`) in `headers`,
/// when traces are exported and the span is in one.
#[cfg(feature = "otlp")]
fn inject_current(headers: &mut HeaderMap) {
    if export::exporting() {
        export::inject_current(headers);
    }
}

#[cfg(not(feature = "otlp"))]
fn inject_current(_headers: &mut HeaderMap) {}

/// The span of a request while traces are exported: a server span named
/// after its method, a child of the trace `headers` name in a valid
/// `traceparent` (a malformed one is ignored: the request starts a trace).
pub(crate) fn request_span(
    // Its id as text: the request log's type stays the request log's.
    id: &impl std::fmt::Display,
    method: &http::Method,
    headers: &HeaderMap,
) -> tracing::Span {
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        otel.name = method.as_str(),
        otel.kind = "server",
        http.request.method = method.as_str(),
        http.response.status_code = tracing::field::Empty,
    );
    #[cfg(feature = "otlp")]
    export::join_caller(&span, headers);
    #[cfg(not(feature = "otlp"))]
    let _ = headers;
    span
}

/// The W3C `traceparent` of the current span, for the job row it queues:
/// `None` when traces are not exported (or the span is in none).
#[cfg_attr(not(feature = "database"), allow(dead_code))]
pub(crate) fn current_traceparent() -> Option<String> {
    #[cfg(feature = "otlp")]
    if export::exporting() {
        return export::current_traceparent();
    }
    None
}

/// Links `span` (a job's) to the span whose `traceparent` queued it. A
/// malformed value (a row written by hand) links nothing.
#[cfg_attr(not(feature = "database"), allow(dead_code))]
pub(crate) fn link_to(span: &tracing::Span, traceparent: Option<&str>) {
    #[cfg(feature = "otlp")]
    if let Some(traceparent) = traceparent
        && export::exporting()
    {
        export::link_to(span, traceparent);
    }
    #[cfg(not(feature = "otlp"))]
    let _ = (span, traceparent);
}

/// Sends the spans still waiting for their batch to the collector, and
/// waits (up to `[telemetry.otlp] timeout_ms`) for it to take them. The
/// server does this as it stops; call it before `std::process::exit`, or in
/// a test before looking at what a collector received. Does nothing while
/// no exporter is installed.
pub async fn flush_traces() {
    #[cfg(feature = "otlp")]
    export::flush().await;
}
