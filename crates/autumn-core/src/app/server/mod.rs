//! The connection loop: accepts TCP connections up to `[server] max_connections`, serves each
//! over HTTP/1 or HTTP/2, over TLS when `[server.tls]` is set, with header-read and keep-alive
//! timeouts and a header size limit, and on shutdown drains open requests and detached
//! first-time runs within `shutdown_grace_ms`.
//!
//! `axum::serve` has none of these knobs, and without them a client holding idle sockets, or
//! sending its headers a byte at a time, keeps connections open indefinitely.
//!
//! - [`connection`]: one connection, TLS and protocol choice included;
//! - [`context`]: what a connection's requests (and its WebSockets) hold of it;
//! - [`http1`], [`http2`]: each protocol's settings and timers;
//! - [`preface`]: h2c told apart from HTTP/1 on a plaintext connection;
//! - [`tls`]: the certificate, reloaded when its files change;
//! - [`redirect`]: the optional plain-HTTP port that sends clients to HTTPS.

mod connection;
pub(crate) mod context;
mod http1;
mod http2;
mod preface;
pub(crate) mod redirect;
pub(crate) mod tls;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use autumn_idempotency::DetachedRuns;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};

use super::middleware::AppService;
use crate::config::ServerConfig;
use crate::telemetry::metrics::HttpMetrics;
use context::ConnectionContext;
use tls::ServerTls;

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown` completes, then
/// stops accepting, lets open requests finish and waits for detached first-time runs, all
/// within `config.shutdown_grace()`. Each connection counts in `metrics`' open connections from
/// its accept until its task ends, however it ends.
pub(crate) async fn serve(
    listener: TcpListener,
    app: AppService,
    config: &ServerConfig,
    tls: Option<Arc<ServerTls>>,
    metrics: Option<Arc<HttpMetrics>>,
    shutdown: impl Future<Output = ()>,
) {
    let limits = Arc::new(Limits::from(config));
    // One permit per connection: at the cap the loop stops accepting, so further clients wait
    // in the kernel's listen backlog and are served, in order, as connections close.
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let (stop, stopped) = watch::channel(false);
    let open = Arc::new(OpenConnections::default());
    // This server's own detached runs: its drain waits for them, not for
    // another app's in the same process.
    let runs = Arc::new(DetachedRuns::default());
    let mut shutdown = pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                // The semaphore is never closed.
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    if must_pause(&error) {
                        tokio::select! {
                            () = &mut shutdown => break,
                            () = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                    }
                    continue;
                }
            },
        };
        let connection = open.enter();
        let counted = metrics.as_ref().map(HttpMetrics::connection_opened);
        let limits = limits.clone();
        let tls = tls.clone();
        let app = app.clone();
        // The slot is held by the connection's context, which an upgraded
        // socket (a WebSocket) keeps after the connection's own task ends.
        let context = Arc::new(ConnectionContext::new(
            stopped.clone(),
            runs.clone(),
            (permit, connection, counted),
        ));
        tokio::spawn(context::scope(context.clone(), async move {
            connection::serve(stream, app, &limits, tls.as_deref(), context).await;
        }));
    }
    drop(listener);
    tracing::info!("shutting down: finishing open requests");
    let deadline = tokio::time::Instant::now() + config.shutdown_grace();
    let _ = stop.send(true);
    let connections = tokio::time::timeout_at(deadline, open.all_closed())
        .await
        .map_or_else(|_| open.count(), |()| 0);
    let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
    let runs = runs.wait(remaining).await;
    if connections > 0 || runs > 0 {
        tracing::warn!(
            connections,
            detached_runs = runs,
            "server.shutdown_grace_ms ({}ms) elapsed: abandoning what is still running; an abandoned first-time run leaves its key locked until its in-flight TTL lapses",
            config.shutdown_grace_ms
        );
    }
}

/// What every connection is held to, from `[server]`.
struct Limits {
    header_read: Duration,
    keep_alive: Option<Duration>,
    max_header_bytes: usize,
    /// HTTP/2 offered to TLS clients by ALPN.
    h2_over_tls: bool,
    /// HTTP/2 served to plaintext clients that start with its preface.
    h2c: bool,
    max_concurrent_streams: u32,
    h2_keep_alive: Option<Duration>,
}

impl From<&ServerConfig> for Limits {
    fn from(config: &ServerConfig) -> Self {
        Self {
            header_read: config.header_read_timeout(),
            keep_alive: config.keep_alive_timeout(),
            max_header_bytes: config.max_header_bytes,
            h2_over_tls: config.http2.enabled,
            h2c: config.http2.h2c,
            max_concurrent_streams: config.http2.max_concurrent_streams,
            h2_keep_alive: match config.http2.keep_alive_interval_ms {
                0 => None,
                millis => Some(Duration::from_millis(millis)),
            },
        }
    }
}
/// Connections still being served, and a way to hear the last one close.
#[derive(Default)]
struct OpenConnections {
    count: AtomicUsize,
    closed: Notify,
}

impl OpenConnections {
    fn enter(self: &Arc<Self>) -> OpenConnection {
        self.count.fetch_add(1, Ordering::AcqRel);
        OpenConnection(self.clone())
    }

    fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    async fn all_closed(&self) {
        loop {
            let closed = self.closed.notified();
            let mut closed = pin!(closed);
            closed.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            closed.await;
        }
    }
}

struct OpenConnection(Arc<OpenConnections>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.closed.notify_waiters();
        }
    }
}

/// Whether a failed accept calls for a pause. A connection reset before it was accepted is the
/// client's business; anything else (out of file descriptors) is logged and retried after a
/// pause, so the loop does not spin.
fn must_pause(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return false;
    }
    tracing::error!(%error, "cannot accept a connection; retrying in 1s");
    true
}
