//! The exporter's HTTP client: one HTTP/1.1 `POST` per batch on hyper,
//! over rustls (ring, the public roots) for an `https://` collector, run on
//! a small runtime of its own so that the SDK's export thread needs none.
//!
//! A connection per batch: a batch leaves every few seconds at most, and a
//! pool would keep a socket (and its TLS session) open for the app's whole
//! life to save one handshake per batch.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use opentelemetry_http::{HttpClient, HttpError};

/// The most of a collector's answer read: a partial-success message at
/// most; anything longer is not one.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// How often a failing export is logged at most: a collector that is down
/// would otherwise add a warning every batch.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Posts the exporter's requests.
pub(super) struct Client {
    runtime: tokio::runtime::Runtime,
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
    warned: Mutex<Option<Instant>>,
    /// Failures not logged since the last warning.
    quiet: AtomicU64,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client whose requests each take at most `timeout`.
    pub(super) fn new(timeout: Duration) -> Result<Self, std::io::Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let roots =
            rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(Self {
            runtime,
            tls: Arc::new(tls),
            timeout,
            warned: Mutex::new(None),
            quiet: AtomicU64::new(0),
        })
    }

    /// Logs `failure`, at most once a [`WARN_EVERY`], with how many went
    /// unlogged since.
    fn warn(&self, failure: &str) {
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if warned.is_some_and(|at| now.duration_since(at) < WARN_EVERY) {
            self.quiet.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *warned = Some(now);
        let unlogged = self.quiet.swap(0, Ordering::Relaxed);
        tracing::warn!(
            target: "autumn::telemetry",
            unlogged,
            "spans could not be exported (their batch is dropped): {failure}"
        );
    }
}

impl HttpClient for Client {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        // The timer is made where the future first runs: on a runtime.
        let (timeout, tls) = (self.timeout, Arc::clone(&self.tls));
        let post = async move { tokio::time::timeout(timeout, post(request, tls)).await };
        let checked = |result: Result<Result<Response<Bytes>, HttpError>, _>| match result {
            Ok(Ok(response)) => {
                if !response.status().is_success() {
                    self.warn(&format!("the collector answered {}", response.status()));
                }
                Ok(response)
            }
            Ok(Err(error)) => {
                self.warn(&error.to_string());
                Err(error)
            }
            Err(_elapsed) => {
                self.warn("the collector did not answer within telemetry.otlp.timeout_ms");
                Err("timed out".into())
            }
        };
        match tokio::runtime::Handle::try_current() {
            // On a runtime already (a flush called from async code): post
            // on it rather than block it.
            Ok(handle) => {
                let task = handle.spawn(post);
                Box::pin(async move {
                    match task.await {
                        Ok(result) => checked(result),
                        Err(error) => Err(error.into()),
                    }
                })
            }
            // The SDK's export thread: block it on the client's runtime.
            Err(_) => {
                let result = checked(self.runtime.block_on(post));
                Box::pin(std::future::ready(result))
            }
        }
    }
}

/// Posts `request` on a connection of its own.
async fn post(
    request: Request<Bytes>,
    tls: Arc<rustls::ClientConfig>,
) -> Result<Response<Bytes>, HttpError> {
    let uri = request.uri().clone();
    let host = uri.host().ok_or("the endpoint has no host")?;
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    // An IPv6 literal is written in brackets in a URI, not to connect.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = tokio::net::TcpStream::connect((bare, port)).await?;
    tcp.set_nodelay(true)?;
    if https {
        let name = rustls::pki_types::ServerName::try_from(bare.to_owned())?;
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await?;
        exchange(TokioIo::new(stream), request).await
    } else {
        exchange(TokioIo::new(tcp), request).await
    }
}

/// One request and its answer over `io`.
async fn exchange<I>(io: I, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    let (mut parts, body) = request.into_parts();
    // HTTP/1.1 sends the path in the request line and the host apart.
    if let Some(authority) = parts.uri.authority() {
        parts.headers.insert(
            http::header::HOST,
            http::HeaderValue::from_str(authority.as_str())?,
        );
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    parts.uri = path.parse()?;
    // Driven beside the exchange; it ends when the sender is dropped.
    tokio::spawn(async move {
        let _closed = connection.await;
    });
    let response = sender
        .send_request(Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_RESPONSE_BYTES)
        .collect()
        .await?
        .to_bytes();
    Ok(Response::from_parts(parts, body))
}
