//! [`OtlpReceiver`]: an OTLP/HTTP collector of the test's own. It accepts
//! `POST /v1/traces` (protobuf, as `opentelemetry-otlp` sends it), decodes
//! each request and keeps its spans for the test to look at.
//!
//! It runs on a thread and runtime of its own, so a test that blocks its
//! runtime while the exporter posts (a flush) still gets answered.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;

/// A span as the receiver got it, ids in lowercase hex (as `traceparent`
/// writes them).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedSpan {
    /// The span's name.
    pub name: String,
    /// Its trace id, 32 hex digits.
    pub trace_id: String,
    /// Its id, 16 hex digits.
    pub span_id: String,
    /// Its parent's id; `None` for a trace's root.
    pub parent_span_id: Option<String>,
    /// The spans it links to: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// Its attributes whose values are strings, integers or booleans, as
    /// text.
    pub attributes: Vec<(String, String)>,
    /// The `service.name` of the resource it came with.
    pub service_name: Option<String>,
}

impl ReceivedSpan {
    /// The attribute `key`, as text.
    #[must_use]
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

/// What the receiver holds, shared with its server.
#[derive(Debug, Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// Export requests received, decoded or not.
    requests: usize,
}

/// An OTLP/HTTP collector on a free loopback port; stopped on drop.
///
/// ```no_run
/// let receiver = autumn_testkit::otlp::OtlpReceiver::start();
/// // [telemetry.otlp] endpoint = receiver.endpoint()
/// assert!(receiver.spans().is_empty());
/// ```
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OtlpReceiver {
    /// Starts a receiver on a free loopback port.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or no thread started.
    #[must_use]
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .expect("a loopback port for the OTLP receiver");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the receiver's address");
        let received = Arc::new(Mutex::new(Received::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let shared = Arc::clone(&received);
        let thread = std::thread::Builder::new()
            .name("otlp-receiver".to_owned())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the receiver's runtime");
                runtime.block_on(serve(listener, shared, stopped));
            })
            .expect("the receiver's thread");
        Self {
            addr,
            received,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The URL to export to: `http://127.0.0.1:{port}/v1/traces`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// Every span received so far, in the order received.
    #[must_use]
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .spans
            .clone()
    }

    /// How many export requests arrived, spans or not.
    #[must_use]
    pub fn requests(&self) -> usize {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts connections until `stopped`.
async fn serve(
    listener: std::net::TcpListener,
    received: Arc<Mutex<Received>>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut stopped => return,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let received = Arc::clone(&received);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let received = Arc::clone(&received);
                async move { Ok::<_, std::convert::Infallible>(answer(request, &received).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Records the spans of one export request.
async fn answer(request: Request<Incoming>, received: &Mutex<Received>) -> Response<Full<Bytes>> {
    let status = |status: StatusCode| {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = status;
        response
    };
    if request.method() != hyper::Method::POST || request.uri().path() != "/v1/traces" {
        return status(StatusCode::NOT_FOUND);
    }
    let Ok(body) = request.into_body().collect().await else {
        return status(StatusCode::BAD_REQUEST);
    };
    let mut received = received.lock().unwrap_or_else(PoisonError::into_inner);
    received.requests += 1;
    let Ok(export) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return status(StatusCode::BAD_REQUEST);
    };
    for resource_spans in export.resource_spans {
        let service_name = resource_spans.resource.as_ref().and_then(|resource| {
            resource
                .attributes
                .iter()
                .find(|attribute| attribute.key == "service.name")
                .and_then(text)
        });
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.spans.push(ReceivedSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: (!span.parent_span_id.is_empty())
                        .then(|| hex(&span.parent_span_id)),
                    links: span
                        .links
                        .iter()
                        .map(|link| (hex(&link.trace_id), hex(&link.span_id)))
                        .collect(),
                    attributes: span
                        .attributes
                        .iter()
                        .filter_map(|attribute| Some((attribute.key.clone(), text(attribute)?)))
                        .collect(),
                    service_name: service_name.clone(),
                });
            }
        }
    }
    let mut response = Response::new(Full::new(Bytes::from(
        ExportTraceServiceResponse::default().encode_to_vec(),
    )));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-protobuf"),
    );
    response
}

/// An attribute's value as text, when it is a string, an integer or a
/// boolean.
fn text(attribute: &KeyValue) -> Option<String> {
    match attribute.value.as_ref()? {
        AnyValue {
            value: Some(any_value::Value::StringValue(text)),
        } => Some(text.clone()),
        AnyValue {
            value: Some(any_value::Value::IntValue(number)),
        } => Some(number.to_string()),
        AnyValue {
            value: Some(any_value::Value::BoolValue(flag)),
        } => Some(flag.to_string()),
        _ => None,
    }
}

/// `bytes` in lowercase hex.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}
