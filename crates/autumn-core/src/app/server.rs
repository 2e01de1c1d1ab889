//! The connection loop: accepts TCP connections up to `[server] max_connections`, serves
//! each over HTTP/1 with header-read and keep-alive timeouts and a header size limit, and on
//! shutdown drains open requests and detached first-time runs within `shutdown_grace_ms`.
//!
//! `axum::serve` has none of these knobs, and without them a client holding idle sockets, or
//! sending its headers a byte at a time, keeps connections open indefinitely.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::rt::{Sleep, Timer};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};

use crate::config::ServerConfig;
use crate::error_pages::connection::ParseErrorBodies;

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting, lets open
/// requests finish and waits for detached first-time runs, all within
/// `config.shutdown_grace()`.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    config: &ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    let limits = Arc::new(Limits::from(config));
    // One permit per connection: at the cap the loop stops accepting, so further clients wait
    // in the kernel's listen backlog and are served, in order, as connections close.
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let (stop, stopped) = watch::channel(false);
    let open = Arc::new(OpenConnections::default());
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
        let limits = limits.clone();
        let router = router.clone();
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _connection = connection;
            let builder = limits.builder();
            let served = builder
                .serve_connection(
                    // hyper's own 400/414/431 get a problem document too.
                    TokioIo::new(ParseErrorBodies::new(stream)),
                    TowerToHyperService::new(router),
                )
                .with_upgrades();
            let mut served = pin!(served);
            tokio::select! {
                result = served.as_mut() => log_connection_error(result),
                () = async {
                    // Ends too if the loop is gone: either way, time to stop.
                    let _ = stopped.wait_for(|stop| *stop).await;
                } => {
                    // Idle connections close now; one mid-request finishes it first.
                    served.as_mut().graceful_shutdown();
                    log_connection_error(served.await);
                }
            }
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
    let runs = autumn_idempotency::wait_for_detached_runs(remaining).await;
    if connections > 0 || runs > 0 {
        tracing::warn!(
            connections,
            detached_runs = runs,
            "server.shutdown_grace_ms ({}ms) elapsed: abandoning what is still running; an abandoned first-time run leaves its key locked until its in-flight TTL lapses",
            config.shutdown_grace_ms
        );
    }
}

/// The per-connection HTTP/1 settings.
struct Limits {
    header_read: Duration,
    keep_alive: Option<Duration>,
    max_header_bytes: usize,
}

impl From<&ServerConfig> for Limits {
    fn from(config: &ServerConfig) -> Self {
        Self {
            header_read: config.header_read_timeout(),
            keep_alive: config.keep_alive_timeout(),
            max_header_bytes: config.max_header_bytes,
        }
    }
}

impl Limits {
    fn builder(&self) -> http1::Builder {
        let mut builder = http1::Builder::new();
        builder
            .timer(HeadTimer {
                first_head: AtomicBool::new(true),
                header_read: self.header_read,
                keep_alive: self.keep_alive.unwrap_or(self.header_read),
            })
            .header_read_timeout(self.header_read)
            .keep_alive(self.keep_alive.is_some())
            .max_header_size(self.max_header_bytes);
        builder
    }
}

/// hyper's HTTP/1 server arms its timer only to wait for a request head, from the moment the
/// connection is ready for one: on a new connection, and again after each response while the
/// connection is kept alive. So the first wait is the header-read timeout and every later one
/// the keep-alive timeout (idle time plus reading that head), without a timer per request of
/// our own. One per connection.
struct HeadTimer {
    first_head: AtomicBool,
    header_read: Duration,
    keep_alive: Duration,
}

impl HeadTimer {
    /// hyper asks for `now + header_read`; later heads get `now + keep_alive` instead.
    fn deadline(&self, asked: Instant) -> Instant {
        if self.first_head.swap(false, Ordering::Relaxed) {
            asked
        } else {
            asked
                .checked_sub(self.header_read)
                .and_then(|now| now.checked_add(self.keep_alive))
                .unwrap_or(asked)
        }
    }
}

impl Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        TokioTimer::new().sleep(duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        TokioTimer::new().sleep_until(self.deadline(deadline))
    }

    fn now(&self) -> Instant {
        TokioTimer::new().now()
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        TokioTimer::new().reset(sleep, self.deadline(new_deadline));
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

fn log_connection_error(result: Result<(), hyper::Error>) {
    if let Err(error) = result {
        // Timeouts, resets and malformed requests are the client's doing: not an error here.
        tracing::debug!(%error, "connection closed");
    }
}
