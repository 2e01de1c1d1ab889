//! One connection, from its accept to its close: a trusted proxy's PROXY
//! header when the server reads them, TLS when the server has it, then
//! HTTP/1 or HTTP/2 (chosen by ALPN over TLS, by the preface without),
//! served until the client leaves, a timeout cuts it, or the server stops.

use std::convert::Infallible;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::body_rate::MinRate;
use super::context::{ConnectionContext, ScopedExecutor};
use super::http2::Activity;
use super::slots::Slot;
use super::tls::ServerTls;
use super::{Limits, http1, http2, preface, proxy_protocol};
use crate::app::middleware::AppService;
use crate::error_pages::connection::{AppWrites, ParseErrorBodies, TrackResponse};

/// Serves one accepted connection until it closes; on `stopped`, lets a
/// request in progress finish and closes the connection.
pub(super) async fn serve(
    stream: TcpStream,
    app: AppService,
    limits: &Limits,
    tls: Option<&ServerTls>,
    context: Arc<ConnectionContext>,
) {
    // What comes before the first request head (a PROXY header, a TLS
    // handshake, the bytes that tell HTTP/2 from HTTP/1) holds a connection
    // like a head that never ends: all of it within the head's limit.
    let deadline = Instant::now() + limits.header_read;
    if !(limits.proxy_protocol && context.comes_from_trusted_proxy()) {
        return serve_stream(stream, app, limits, tls, context, deadline).await;
    }
    let stream = match tokio::time::timeout_at(deadline, proxy_protocol::read(stream)).await {
        Ok(Ok((header, stream))) => {
            if let Some(proxy_protocol::Header::Client(client)) = header {
                context.proxied_for(client);
            }
            stream
        }
        Ok(Err(error)) => {
            tracing::debug!(%error, "connection from a trusted proxy closed");
            return;
        }
        Err(_) => {
            tracing::debug!(
                "no PROXY header or request within server.timeouts.header_read_timeout_ms"
            );
            return;
        }
    };
    serve_stream(stream, app, limits, tls, context, deadline).await;
}

/// Serves `stream`, over TLS when `tls`, its handshake (or its first bytes)
/// done by `deadline`.
async fn serve_stream<T>(
    stream: T,
    app: AppService,
    limits: &Limits,
    tls: Option<&ServerTls>,
    context: Arc<ConnectionContext>,
    deadline: Instant,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let stopped = context.stopped();
    let slot = Arc::clone(context.slot());
    match tls {
        Some(tls) => {
            let accepted = tokio::time::timeout_at(deadline, tls.acceptor.accept(stream)).await;
            let stream = match accepted {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!("TLS handshake timed out");
                    return;
                }
            };
            let h2 = limits.h2_over_tls && stream.get_ref().1.alpn_protocol() == Some(b"h2");
            if h2 {
                serve_h2(stream, app, limits, stopped, context).await;
            } else {
                serve_h1(stream, app, limits, stopped, slot).await;
            }
        }
        None => {
            let sniffed = tokio::time::timeout_at(deadline, preface::sniff(stream)).await;
            let (is_h2, stream) = match sniffed {
                Ok(Ok(sniffed)) => sniffed,
                Ok(Err(error)) => {
                    tracing::debug!(%error, "connection closed before its first request");
                    return;
                }
                Err(_) => {
                    tracing::debug!(
                        "no request head within server.timeouts.header_read_timeout_ms"
                    );
                    return;
                }
            };
            match (is_h2, limits.h2c) {
                (false, _) => serve_h1(stream, app, limits, stopped, slot).await,
                (true, true) => serve_h2(stream, app, limits, stopped, context).await,
                (true, false) => {
                    if let Err(error) = preface::refuse_h2c(stream).await {
                        tracing::debug!(%error, "could not refuse an h2c connection");
                    }
                }
            }
        }
    }
}

async fn serve_h1<T>(
    io: T,
    app: AppService,
    limits: &Limits,
    mut stopped: watch::Receiver<bool>,
    slot: Arc<Slot>,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // hyper's own 400/414/431 get a problem document too; the socket
    // learns from the service when a write can be hyper's alone.
    let writes = Arc::new(AppWrites::default());
    let served = http1::builder(limits, Arc::clone(&slot))
        .serve_connection(
            TokioIo::new(ParseErrorBodies::new(io, Arc::clone(&writes))),
            ConnectionService::for_http1(app, slot, limits, writes),
        )
        .with_upgrades();
    let mut served = pin!(served);
    tokio::select! {
        result = served.as_mut() => log_connection_error(result),
        () = until_stopped(&mut stopped) => {
            // Idle connections close now; one mid-request finishes it first.
            served.as_mut().graceful_shutdown();
            log_connection_error(served.await);
        }
    }
}

async fn serve_h2<T>(
    io: T,
    app: AppService,
    limits: &Limits,
    mut stopped: watch::Receiver<bool>,
    context: Arc<ConnectionContext>,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::for_slot(Arc::clone(context.slot())));
    // Each stream runs as a task of its own, with the connection's context.
    let served = http2::builder(limits, ScopedExecutor(context)).serve_connection(
        TokioIo::new(io),
        ConnectionService::for_http2(app, activity.clone(), limits),
    );
    let mut served = pin!(served);
    let idle = activity.idle_for(
        limits.header_read,
        limits.keep_alive.unwrap_or(limits.header_read),
    );
    tokio::select! {
        result = served.as_mut() => log_connection_error(result),
        () = until_stopped(&mut stopped) => {
            // GOAWAY: open streams finish, no new one starts.
            served.as_mut().graceful_shutdown();
            log_connection_error(served.await);
        }
        () = idle => {
            served.as_mut().graceful_shutdown();
            // A client that never reads (a PING or SETTINGS flood) never
            // takes the GOAWAY either: it gets as long as a request head
            // gets, then the connection is dropped.
            match tokio::time::timeout(limits.header_read, served).await {
                Ok(result) => log_connection_error(result),
                Err(_) => tracing::debug!("an idle HTTP/2 connection did not close after GOAWAY: dropped"),
            }
        }
    }
}

/// Completes when the server stops (or its loop is gone: time to stop
/// either way).
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

fn log_connection_error(result: Result<(), hyper::Error>) {
    if let Err(error) = result {
        // Timeouts, resets and malformed requests are the client's doing: not an error here.
        tracing::debug!(%error, "connection closed");
    }
}

/// The app as one connection calls it. HTTP/1 serves a connection's
/// requests one after another, so the connection keeps one copy of the app
/// and calls it in place; the usual adapter clones the service for every
/// request, and for a whole framework stack that clone (and its drop) costs
/// more than most of what the stack does.
///
/// HTTP/2 calls it for several streams at once: the lock is held only
/// while a request's future is made, and each open request is counted in
/// the connection's [`Activity`] for its idle timeout.
pub(super) struct ConnectionService {
    app: Mutex<AppService>,
    activity: Option<Arc<Activity>>,
    /// Marked busy by each request (HTTP/1; HTTP/2 through `activity`).
    slot: Option<Arc<Slot>>,
    /// `min_body_rate` and its grace, when a body must keep a pace.
    body_rate: Option<(u64, Duration)>,
    /// What the app has under way, for the socket's parse-error bodies
    /// (HTTP/1).
    writes: Option<Arc<AppWrites>>,
}

impl ConnectionService {
    pub(super) fn new(app: AppService) -> Self {
        Self {
            app: Mutex::new(app),
            activity: None,
            slot: None,
            body_rate: None,
            writes: None,
        }
    }

    /// An HTTP/1 connection's: each request marks `slot` busy.
    fn for_http1(
        app: AppService,
        slot: Arc<Slot>,
        limits: &Limits,
        writes: Arc<AppWrites>,
    ) -> Self {
        Self {
            slot: Some(slot),
            body_rate: body_rate(limits),
            writes: Some(writes),
            ..Self::new(app)
        }
    }

    /// An HTTP/2 connection's, counting open requests in `activity`.
    fn for_http2(app: AppService, activity: Arc<Activity>, limits: &Limits) -> Self {
        Self {
            activity: Some(activity),
            body_rate: body_rate(limits),
            ..Self::new(app)
        }
    }
}

fn body_rate(limits: &Limits) -> Option<(u64, Duration)> {
    (limits.min_body_rate > 0).then_some((limits.min_body_rate, limits.header_read))
}

impl hyper::service::Service<http::Request<Incoming>> for ConnectionService {
    type Response = axum::response::Response;
    type Error = Infallible;
    /// The boxed future the app's one box returns anyway, its response
    /// counted for the socket (HTTP/1).
    type Future = TrackResponse<<AppService as tower::Service<axum::extract::Request>>::Future>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        if let Some(slot) = &self.slot {
            slot.busy();
        }
        if let Some(writes) = &self.writes {
            writes.start();
        }
        let request = match self.body_rate {
            Some((rate, grace)) => {
                let slot = self.slot.clone();
                request.map(|body| Body::new(MinRate::new(body, rate, grace, slot)))
            }
            None => request.map(Body::new),
        };
        let future = self.call_in_place(request);
        let future = match &self.activity {
            None => future,
            Some(activity) => {
                let open = activity.enter();
                Box::pin(async move {
                    let response = future.await;
                    drop(open);
                    response
                })
            }
        };
        TrackResponse::new(future, self.writes.clone())
    }
}

impl ConnectionService {
    pub(super) fn call_in_place(
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::task::Context;
    use std::time::Duration;

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
