//! The connection loop: accepts TCP connections up to `[server] max_connections`, serves
//! each over HTTP/1 with header-read and keep-alive timeouts and a header size limit, and on
//! shutdown drains open requests and detached first-time runs within `shutdown_grace_ms`.
//!
//! `axum::serve` has none of these knobs, and without them a client holding idle sockets, or
//! sending its headers a byte at a time, keeps connections open indefinitely.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::body::Incoming;
use hyper::rt::{Sleep, Timer};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};

use super::middleware::AppService;
use crate::config::ServerConfig;
use crate::error_pages::connection::ParseErrorBodies;
use crate::telemetry::metrics::HttpMetrics;

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting, lets open
/// requests finish and waits for detached first-time runs, all within
/// `config.shutdown_grace()`. Each connection counts in `metrics`' open connections from its
/// accept until its task ends, however it ends.
pub(crate) async fn serve(
    listener: TcpListener,
    app: AppService,
    config: &ServerConfig,
    metrics: Option<Arc<HttpMetrics>>,
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
        let counted = metrics.as_ref().map(HttpMetrics::connection_opened);
        let limits = limits.clone();
        let app = ConnectionService::new(app.clone());
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _connection = connection;
            let _counted = counted;
            let builder = limits.builder();
            let served = builder
                .serve_connection(
                    // hyper's own 400/414/431 get a problem document too.
                    TokioIo::new(ParseErrorBodies::new(stream)),
                    app,
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

/// The app as one connection calls it. HTTP/1 serves a connection's
/// requests one after another, so the connection keeps one copy of the app
/// and calls it in place; the usual adapter clones the service for every
/// request, and for a whole framework stack that clone (and its drop) costs
/// more than most of what the stack does.
struct ConnectionService {
    app: Mutex<AppService>,
}

impl ConnectionService {
    fn new(app: AppService) -> Self {
        Self {
            app: Mutex::new(app),
        }
    }
}

impl hyper::service::Service<http::Request<Incoming>> for ConnectionService {
    type Response = axum::response::Response;
    type Error = Infallible;
    /// The boxed future the app's one box returns anyway.
    type Future = <AppService as tower::Service<axum::extract::Request>>::Future;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        self.call_in_place(request.map(Body::new))
    }
}

impl ConnectionService {
    fn call_in_place(
        &self,
        request: axum::extract::Request,
    ) -> <AppService as tower::Service<axum::extract::Request>>::Future {
        // Never contended (one request at a time); a panic while holding
        // it is caught inside the app, so a poisoned lock is still usable.
        let mut app = self.app.lock().unwrap_or_else(PoisonError::into_inner);
        // tower's contract: ready before called. The framework's stack is
        // always ready; were it not, this request waits on a copy of its own.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match tower::Service::poll_ready(&mut *app, &mut cx) {
            Poll::Ready(Ok(())) => tower::Service::call(&mut *app, request),
            Poll::Ready(Err(never)) => match never {},
            Poll::Pending => Box::pin(tower::ServiceExt::oneshot(app.clone(), request)),
        }
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
            .timer(HeadTimer::new(
                self.header_read,
                self.keep_alive.unwrap_or(self.header_read),
            ))
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
///
/// hyper asks for a new sleep for every head. Each would be registered with the runtime's
/// timer wheel when first polled and taken out of it when dropped, both under the wheel's
/// lock, on every request. Instead the connection keeps one runtime timer, and each head moves
/// its deadline later: a deadline that only grows is one atomic update, and the wheel moves
/// the entry only if it comes due (at most once per timeout, on a connection that stays open).
struct HeadTimer {
    first_head: AtomicBool,
    header_read: Duration,
    keep_alive: Duration,
    timer: Arc<HeadDeadline>,
}

/// The connection's one timer, made on its first head.
#[derive(Default)]
struct HeadDeadline {
    // Only the connection's own task touches it, so the lock is never contended.
    sleep: Mutex<Option<Pin<Box<tokio::time::Sleep>>>>,
}

impl HeadDeadline {
    /// Moves the timer to `deadline` (making it on the first call).
    fn arm(&self, deadline: Instant) {
        let deadline = tokio::time::Instant::from_std(deadline);
        let mut sleep = self.sleep.lock().unwrap_or_else(PoisonError::into_inner);
        match sleep.as_mut() {
            Some(sleep) => sleep.as_mut().reset(deadline),
            None => *sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }
}

/// What hyper holds while it waits for a head: the connection's timer.
struct HeadSleep(Arc<HeadDeadline>);

impl Future for HeadSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let mut sleep = self.0.sleep.lock().unwrap_or_else(PoisonError::into_inner);
        match sleep.as_mut() {
            Some(sleep) => sleep.as_mut().poll(cx),
            // Never: a HeadSleep is handed out only once armed.
            None => Poll::Ready(()),
        }
    }
}

impl Sleep for HeadSleep {}

impl HeadTimer {
    fn new(header_read: Duration, keep_alive: Duration) -> Self {
        Self {
            first_head: AtomicBool::new(true),
            header_read,
            keep_alive,
            timer: Arc::default(),
        }
    }

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
        self.timer.arm(self.deadline(deadline));
        Box::pin(HeadSleep(Arc::clone(&self.timer)))
    }

    fn now(&self) -> Instant {
        TokioTimer::new().now()
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        if sleep.is::<HeadSleep>() {
            self.timer.arm(self.deadline(new_deadline));
        } else {
            TokioTimer::new().reset(sleep, new_deadline);
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

fn log_connection_error(result: Result<(), hyper::Error>) {
    if let Err(error) = result {
        // Timeouts, resets and malformed requests are the client's doing: not an error here.
        tracing::debug!(%error, "connection closed");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Context;

    use axum::response::Response;

    use super::*;

    /// A service that counts its clones and is ready only when told.
    struct Counted {
        clones: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
    }

    impl Clone for Counted {
        fn clone(&self) -> Self {
            self.clones.fetch_add(1, Ordering::SeqCst);
            Self {
                clones: self.clones.clone(),
                ready: self.ready.clone(),
            }
        }
    }

    impl tower::Service<axum::extract::Request> for Counted {
        type Response = Response;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            if self.ready.load(Ordering::SeqCst) {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        }

        fn call(&mut self, _: axum::extract::Request) -> Self::Future {
            std::future::ready(Ok(Response::new(Body::from("served"))))
        }
    }

    #[tokio::test]
    async fn a_connection_calls_its_app_in_place_and_clones_it_only_when_not_ready() {
        let (clones, ready) = (Arc::default(), Arc::new(AtomicBool::new(true)));
        let connection = ConnectionService::new(AppService::new(Counted {
            clones: Arc::clone(&clones),
            ready: Arc::clone(&ready),
        }));
        for _ in 0..10 {
            let response = connection
                .call_in_place(axum::extract::Request::new(Body::empty()))
                .await
                .expect("infallible");
            assert_eq!(response.status(), http::StatusCode::OK);
        }
        assert_eq!(clones.load(Ordering::SeqCst), 0, "ten requests, no clone");

        // Not ready: the request is not refused, it waits on a copy.
        ready.store(false, Ordering::SeqCst);
        let waiting = connection.call_in_place(axum::extract::Request::new(Body::empty()));
        assert_eq!(clones.load(Ordering::SeqCst), 1);
        ready.store(true, Ordering::SeqCst);
        let response = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .ok()
            .and_then(Result::ok);
        assert!(response.is_some(), "served once ready");
    }
}
