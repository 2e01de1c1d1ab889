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
//! - [`proxy_protocol`]: the client a trusted proxy names in a PROXY header;
//! - [`rewind`]: bytes read ahead to decide either, read again;
//! - [`tls`]: the certificate, reloaded when its files change;
//! - [`redirect`]: the optional plain-HTTP port that sends clients to HTTPS.

mod body_rate;
mod connection;
pub(crate) mod context;
mod http1;
mod http2;
mod preface;
mod proxy_protocol;
pub(crate) mod redirect;
mod rewind;
pub(crate) mod slots;
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
use slots::{Refusal, Registry};
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
    // One permit per connection. At the cap the connection that has waited
    // longest for a request head gives way to the new one; only when every
    // connection is mid-request does a new client wait for a permit.
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let waiting = Arc::new(Semaphore::new(config.max_connections));
    let registry = Registry::new(config.max_connections_per_client, config.trusted_networks());
    let (stop, stopped) = watch::channel(false);
    let open = Arc::new(OpenConnections::default());
    // This server's own detached runs: its drain waits for them, not for
    // another app's in the same process.
    let runs = Arc::new(DetachedRuns::default());
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
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
        let hold = match registry.enter(peer.ip()) {
            Ok(hold) => hold,
            Err(refusal) => {
                refuse(stream, refusal, tls.is_some());
                continue;
            }
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => Admission::Now(permit),
            Err(_) => {
                // At the cap: the connection idle longest gives way, and
                // this one waits for its slot on a task of its own, so the
                // loop goes on accepting (and shedding) at full speed. At
                // most `max_connections` wait; past that, the loop waits too.
                registry.shed_oldest_idle();
                let ticket = tokio::select! {
                    () = &mut shutdown => break,
                    ticket = waiting.clone().acquire_owned() => match ticket {
                        Ok(ticket) => ticket,
                        // The semaphore is never closed.
                        Err(_) => break,
                    },
                };
                Admission::Later(ticket)
            }
        };
        let connection = open.enter();
        let counted = metrics.as_ref().map(HttpMetrics::connection_opened);
        let limits = limits.clone();
        let tls = tls.clone();
        let app = app.clone();
        let permits = permits.clone();
        let stopped = stopped.clone();
        let runs = runs.clone();
        let registry = registry.clone();
        tokio::spawn(async move {
            let slot = Arc::clone(hold.slot());
            let permit = match permit {
                Admission::Now(permit) => permit,
                Admission::Later(ticket) => {
                    let mut stop = stopped.clone();
                    // Every connection was mid-request when this one came:
                    // the first to go idle gives way, looked for now and then.
                    let shed_when_idle = async {
                        loop {
                            tokio::time::sleep(SHED_RETRY).await;
                            registry.shed_oldest_idle();
                        }
                    };
                    let permit = tokio::select! {
                        permit = permits.acquire_owned() => permit.ok(),
                        () = shed_when_idle => None,
                        _ = stop.wait_for(|stop| *stop) => None,
                    };
                    drop(ticket);
                    match permit {
                        Some(permit) => permit,
                        None => return,
                    }
                }
            };
            slot.admitted();
            // The slot is held by the connection's context, which an
            // upgraded socket (a WebSocket) keeps after the connection's own
            // task ends.
            let context = Arc::new(ConnectionContext::new(
                stopped,
                runs,
                Arc::clone(&slot),
                Arc::clone(&limits.trusted),
                (permit, connection, counted, hold),
            ));
            context::scope(context.clone(), async move {
                tokio::select! {
                    () = connection::serve(stream, app, &limits, tls.as_deref(), context) => {}
                    // Idle at the cap: closed for a new client.
                    () = slot.shed() => tracing::debug!("idle connection closed to admit a new one"),
                }
            })
            .await;
        });
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

/// How often a connection waiting for a slot looks for one gone idle.
const SHED_RETRY: Duration = Duration::from_millis(50);

/// How an accepted connection gets its slot.
enum Admission {
    /// A slot was free.
    Now(tokio::sync::OwnedSemaphorePermit),
    /// It waits for the one an idle connection gives up (holding a place
    /// in the bounded wait).
    Later(tokio::sync::OwnedSemaphorePermit),
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
    /// `[server] trusted_proxies`, parsed.
    trusted: Arc<[crate::trusted_proxies::Network]>,
    /// `[server] proxy_protocol`: a trusted proxy's PROXY header is read.
    proxy_protocol: bool,
    /// `[server.timeouts] min_body_rate`, bytes per second; 0: none.
    min_body_rate: u64,
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
            trusted: config.trusted_networks().into(),
            proxy_protocol: config.proxy_protocol,
            min_body_rate: config.timeouts.min_body_rate,
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

/// Turns away a connection the registry refused: over plain HTTP with a
/// 503 problem document saying why, written without waiting (a new
/// socket's send buffer takes it whole; a client that does not read gets
/// nothing more), over TLS by closing it. No task is spawned: under a flood
/// of refused connections the accept loop must stay cheap.
fn refuse(stream: tokio::net::TcpStream, refusal: Refusal, tls: bool) {
    let Refusal::ClientAtCap = refusal;
    tracing::debug!("connection refused: its client holds server.max_connections_per_client");
    if !tls {
        let _ = stream.try_write(REFUSED.as_bytes());
    }
    if let Ok(stream) = stream.into_std() {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
}

/// The answer to a connection past `max_connections_per_client`.
const REFUSED: &str = concat!(
    "HTTP/1.1 503 Service Unavailable\r\n",
    "content-type: application/problem+json\r\n",
    "retry-after: 1\r\n",
    "connection: close\r\n",
    "content-length: 243\r\n\r\n",
    "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,",
    "\"code\":\"too_many_connections\",\"detail\":\"this client already holds as many ",
    "connections as one client may (server.max_connections_per_client); reuse one, or retry ",
    "when one closes\"}",
);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_whole_problem_document_with_its_code() {
        let (head, body) = REFUSED.split_once("\r\n\r\n").expect("a head and a body");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let problem: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert_eq!(problem["status"], 503);
        assert_eq!(problem["code"], crate::codes::TOO_MANY_CONNECTIONS.as_str());
    }
}
