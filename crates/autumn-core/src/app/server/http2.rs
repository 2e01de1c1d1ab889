//! HTTP/2's per-connection settings, and the idle timeout hyper's HTTP/2
//! server does not have.
//!
//! The limits are HTTP/1's, carried over: a connection that opens no
//! request within the header-read timeout, or stays without one for the
//! keep-alive timeout, is sent GOAWAY and closed, as an idle HTTP/1
//! connection is closed; a header block is held to `server.max_header_bytes`.
//! Keep-alive PINGs find peers that vanished; `max_concurrent_streams`
//! bounds what one connection may ask at once (hyper's own limits on reset
//! and error-reset streams stay on, against rapid-reset floods).

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::TokioTimer;
use tokio::sync::Notify;

use super::Limits;
use super::slots::Slot;

/// An HTTP/2 connection builder with `limits`.
pub(super) fn builder<E>(limits: &Limits, executor: E) -> http2::Builder<E> {
    let mut builder = http2::Builder::new(executor);
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    if let Some(every) = limits.h2_keep_alive {
        builder.keep_alive_interval(every).keep_alive_timeout(every);
    }
    builder
}

/// The requests an HTTP/2 connection has open, and a way to hear the
/// number change.
#[derive(Default)]
pub(super) struct Activity {
    open: AtomicUsize,
    changed: Notify,
    /// Busy while a request is open, idle otherwise.
    slot: Option<Arc<Slot>>,
}

impl Activity {
    /// The activity of the connection holding `slot`.
    pub(super) fn for_slot(slot: Arc<Slot>) -> Self {
        Self {
            slot: Some(slot),
            ..Self::default()
        }
    }

    /// Counts a request as open until the guard drops.
    pub(super) fn enter(self: &Arc<Self>) -> OpenRequest {
        if self.open.fetch_add(1, Ordering::AcqRel) == 0
            && let Some(slot) = &self.slot
        {
            slot.busy();
        }
        self.changed.notify_waiters();
        OpenRequest(self.clone())
    }

    /// Completes once the connection has had no open request for `first`
    /// (before its first request) or `later` (after one).
    pub(super) async fn idle_for(&self, first: Duration, later: Duration) {
        let mut limit = first;
        loop {
            let changed = self.changed.notified();
            let mut changed = pin!(changed);
            changed.as_mut().enable();
            if self.open.load(Ordering::Acquire) > 0 {
                changed.await;
                limit = later;
                continue;
            }
            if tokio::time::timeout(limit, changed).await.is_err() {
                return;
            }
            limit = later;
        }
    }
}

/// One open request on an HTTP/2 connection.
pub(super) struct OpenRequest(Arc<Activity>);

impl Drop for OpenRequest {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1
            && let Some(slot) = &self.0.slot
        {
            slot.idle();
        }
        self.0.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_requests_is_idle_after_the_first_limit() {
        let activity = Arc::new(Activity::default());
        let started = tokio::time::Instant::now();
        activity
            .idle_for(Duration::from_secs(10), Duration::from_secs(15))
            .await;
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_request_keeps_it_busy_and_the_later_limit_counts_from_its_end() {
        let activity = Arc::new(Activity::default());
        let request = activity.enter();
        let watcher = {
            let activity = activity.clone();
            tokio::spawn(async move {
                activity
                    .idle_for(Duration::from_secs(10), Duration::from_secs(15))
                    .await;
                tokio::time::Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!watcher.is_finished(), "busy for a minute, not idle");
        let ended = tokio::time::Instant::now();
        drop(request);
        let idle_at = watcher.await.expect("watcher");
        assert_eq!(idle_at - ended, Duration::from_secs(15));
    }
}
