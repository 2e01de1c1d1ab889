//! HTTP/1's per-connection settings: the header-read and keep-alive
//! timeouts (one timer per connection), keep-alive and the head size limit.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};
use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;

use super::Limits;
use super::slots::Slot;

/// An HTTP/1 connection builder with `limits`.
pub(super) fn builder(limits: &Limits, slot: Arc<Slot>) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(HeadTimer::new(
            limits.header_read,
            limits.keep_alive.unwrap_or(limits.header_read),
            slot,
        ))
        .header_read_timeout(limits.header_read)
        .keep_alive(limits.keep_alive.is_some())
        .max_header_size(limits.max_header_bytes);
    builder
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
    /// Marked idle whenever a head is waited for: at the server's cap, the
    /// connection idle longest gives way.
    slot: Arc<Slot>,
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
    fn new(header_read: Duration, keep_alive: Duration, slot: Arc<Slot>) -> Self {
        Self {
            first_head: AtomicBool::new(true),
            header_read,
            keep_alive,
            timer: Arc::default(),
            slot,
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
        self.slot.idle();
        self.timer.arm(self.deadline(deadline));
        Box::pin(HeadSleep(Arc::clone(&self.timer)))
    }

    fn now(&self) -> Instant {
        TokioTimer::new().now()
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        if sleep.is::<HeadSleep>() {
            self.slot.idle();
            self.timer.arm(self.deadline(new_deadline));
        } else {
            TokioTimer::new().reset(sleep, new_deadline);
        }
    }
}
