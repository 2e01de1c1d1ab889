//! `[server.timeouts] min_body_rate`: a request body that arrives slower
//! than a minimum average rate, once it has had the header-read timeout to
//! get going, ends in an error, so a client that dribbles a body a byte at
//! a time cannot hold a connection for the whole request timeout.
//!
//! The handler's body read fails (its extractor answers 400 or the timeout
//! layer 408), the response says `connection: close`, and the slot is free.
//! Nothing is checked, and no timer is made, while the body arrives as fast
//! as it is read: most bodies come whole with their head.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::slots::Slot;

/// Why a body was cut off.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request body arrived slower than server.timeouts.min_body_rate ({rate} bytes/s) allows"
)]
pub(crate) struct TooSlow {
    rate: u64,
}

pin_project_lite::pin_project! {
    /// `inner`, held to a minimum average rate after a grace period.
    pub(crate) struct MinRate<B> {
        #[pin]
        inner: B,
        rate: u64,
        grace: Duration,
        started: Instant,
        received: u64,
        // Told when the body falls behind the rate, so that at the cap the
        // connection may give way.
        slot: Option<Arc<Slot>>,
        // Made only when the body is waited for.
        #[pin]
        deadline: Option<Sleep>,
    }
}

impl<B> MinRate<B> {
    pub(crate) fn new(inner: B, rate: u64, grace: Duration, slot: Option<Arc<Slot>>) -> Self {
        Self {
            inner,
            rate,
            grace,
            started: Instant::now(),
            received: 0,
            slot,
            deadline: None,
        }
    }
}

/// When a body that has `received` bytes since `started` falls below
/// `rate`: the grace, plus the time those bytes buy at that rate.
fn due(started: Instant, grace: Duration, received: u64, rate: u64) -> Instant {
    let bought = Duration::from_secs_f64(received as f64 / rate as f64);
    started + grace + bought
}

impl<B> Body for MinRate<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    *this.received += data.len() as u64;
                }
                if let Some(slot) = this.slot.as_ref() {
                    slot.busy();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if let Some(slot) = this.slot.as_ref()
                    && Instant::now()
                        >= due(*this.started, Duration::ZERO, *this.received, *this.rate)
                {
                    slot.slow_body(this.started.into_std());
                }
                let at = due(*this.started, *this.grace, *this.received, *this.rate);
                if this.deadline.is_none() {
                    this.deadline.set(Some(tokio::time::sleep_until(at)));
                }
                let Some(mut deadline) = this.deadline.as_mut().as_pin_mut() else {
                    return Poll::Pending;
                };
                // Each byte received moves the deadline later.
                if deadline.deadline() != at {
                    deadline.as_mut().reset(at);
                }
                match deadline.poll(cx) {
                    Poll::Ready(()) => {
                        Poll::Ready(Some(Err(Box::new(TooSlow { rate: *this.rate }))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt as _, StreamBody};

    use super::*;

    #[test]
    fn each_byte_buys_time_at_the_rate() {
        let started = Instant::now();
        let grace = Duration::from_secs(10);
        assert_eq!(due(started, grace, 0, 500), started + grace);
        assert_eq!(
            due(started, grace, 1_000, 500),
            started + grace + Duration::from_secs(2)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dribbled_body_is_cut_off_and_a_prompt_one_is_not() {
        // One byte, then nothing: cut off at the grace plus 2 ms.
        let (sender, receiver) =
            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        sender
            .send(Ok(Frame::data(Bytes::from_static(b"x"))))
            .await
            .expect("send");
        let stream = tokio_stream_from(receiver);
        let body = MinRate::new(StreamBody::new(stream), 500, Duration::from_secs(10), None);
        let started = Instant::now();
        let error = body.collect().await.expect_err("too slow");
        assert!(error.to_string().contains("min_body_rate"), "{error}");
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(10) + Duration::from_millis(2)
        );
        drop(sender);

        let whole = MinRate::new(
            http_body_util::Full::new(Bytes::from_static(b"{}")),
            500,
            Duration::from_secs(10),
            None,
        );
        let collected = whole.collect().await.expect("whole").to_bytes();
        assert_eq!(&collected[..], b"{}");
    }

    /// A stream of the receiver's items.
    fn tokio_stream_from<T: Send + 'static>(
        mut receiver: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures_util::Stream<Item = T> {
        futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
    }
}
