//! What a connection's requests can know of the connection: that the
//! server is stopping, and the connection's hold on its slot.
//!
//! A WebSocket outlives the request that opened it: hyper hands the socket
//! over and its connection future ends. The slot (`max_connections`), the
//! drain count and the open-connections metric are held by
//! [`ConnectionContext`], which the upgraded socket's task keeps too, so
//! they end with the socket, not with the handshake. Handlers reach it
//! through a task-local set around the connection's work (and around each
//! HTTP/2 stream, which hyper runs as a task of its own): nothing is added
//! to requests that never ask.

use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use autumn_idempotency::DetachedRuns;

use super::slots::Slot;
use crate::trusted_proxies::Network;
use tokio::sync::watch;

tokio::task_local! {
    static CONNECTION: Arc<ConnectionContext>;
}

/// One connection's slot, the server's stop signal and its detached runs.
pub(crate) struct ConnectionContext {
    stopped: watch::Receiver<bool>,
    runs: Arc<DetachedRuns>,
    slot: Arc<Slot>,
    trusted: Arc<[Network]>,
    /// The client a trusted proxy's PROXY header named, if it sent one.
    proxied: OnceLock<IpAddr>,
    /// Released (slot, drain count, metric) when the last holder drops.
    _hold: Box<dyn Send + Sync>,
}

impl ConnectionContext {
    pub(crate) fn new(
        stopped: watch::Receiver<bool>,
        runs: Arc<DetachedRuns>,
        slot: Arc<Slot>,
        trusted: Arc<[Network]>,
        hold: impl Send + Sync + 'static,
    ) -> Self {
        Self {
            stopped,
            runs,
            slot,
            trusted,
            proxied: OnceLock::new(),
            _hold: Box::new(hold),
        }
    }

    /// The connection's slot: its client address, idle or busy.
    pub(crate) fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// Whether the connection comes from one of `trusted_proxies`.
    pub(crate) fn comes_from_trusted_proxy(&self) -> bool {
        crate::trusted_proxies::is_trusted(self.slot.peer(), &self.trusted)
    }

    /// The connection carries `client`'s requests, as its trusted proxy's
    /// PROXY header says; said once, before its first request.
    pub(crate) fn proxied_for(&self, client: IpAddr) {
        let _ = self.proxied.set(client);
    }

    /// The client of a request with `headers` on this connection: the
    /// socket's address (or the one its PROXY header named), or, when that
    /// is a trusted proxy, what its `Forwarded` or `X-Forwarded-For` say.
    pub(crate) fn client(&self, headers: &http::HeaderMap) -> IpAddr {
        let connected = self.proxied.get().copied().unwrap_or(self.slot.peer());
        crate::trusted_proxies::client_of(connected, headers, &self.trusted)
    }

    /// A receiver of the server's stop signal (`true` once it stops).
    pub(crate) fn stopped(&self) -> watch::Receiver<bool> {
        self.stopped.clone()
    }
}

/// The context of the connection the current task serves, if any (none in
/// `TestApp`, or on a task the app spawned itself).
pub(crate) fn current() -> Option<Arc<ConnectionContext>> {
    CONNECTION.try_with(Arc::clone).ok()
}

/// Runs `work` with `context` as the current connection, counting the
/// first-time runs it detaches in its server's.
pub(crate) fn scope<F: Future>(
    context: Arc<ConnectionContext>,
    work: F,
) -> impl Future<Output = F::Output> {
    let runs = Arc::clone(&context.runs);
    runs.scope(CONNECTION.scope(context, work))
}

/// Completes once `stopped` says the server stops; never, without one.
pub(crate) async fn until_stopped(stopped: Option<watch::Receiver<bool>>) {
    match stopped {
        Some(mut stopped) => {
            // An error means the server is gone: stopping all the same.
            let _ = stopped.wait_for(|stop| *stop).await;
        }
        None => std::future::pending().await,
    }
}

/// hyper's executor for HTTP/2 streams, each run with its connection's
/// context and its server's detached-run count.
#[derive(Clone)]
pub(crate) struct ScopedExecutor(pub(crate) Arc<ConnectionContext>);

impl<F> hyper::rt::Executor<F> for ScopedExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        tokio::spawn(scope(Arc::clone(&self.0), future));
    }
}

/// The client of a request with `headers` on the connection the current
/// task serves (`127.0.0.1` outside one): what `ClientIp` extracts, the
/// access log names and rate limits count.
pub(crate) fn client_of(headers: &http::HeaderMap) -> IpAddr {
    current().map_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), |connection| {
        connection.client(headers)
    })
}
