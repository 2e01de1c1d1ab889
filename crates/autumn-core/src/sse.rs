//! Server-sent events that keep proxies from timing out and end when the
//! server stops.
//!
//! [`stream`] turns a stream of [`Event`]s into a response with a comment
//! sent every 15 s while nothing else is (so a proxy or load balancer does
//! not close an idle stream), ending when the server stops, so shutdown
//! does not wait out its grace for streams that never end. The browser's
//! `EventSource` reconnects by itself.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//!
//! use autumn_core::sse::{self, Event};
//! use axum::response::IntoResponse;
//! use futures_util::stream;
//!
//! /// Ticks once a second.
//! async fn ticks() -> impl IntoResponse {
//!     let ticks = stream::unfold(0_u64, |n| async move {
//!         tokio::time::sleep(Duration::from_secs(1)).await;
//!         Some((Ok::<_, Infallible>(Event::default().data(n.to_string())), n + 1))
//!     });
//!     sse::stream(ticks)
//! }
//! # let _ = axum::Router::<()>::new().route("/ticks", axum::routing::get(ticks));
//! ```

use std::time::Duration;

use futures_util::{Stream, StreamExt as _};

use crate::app::server::context;

pub use axum::response::sse::{Event, KeepAlive, Sse};

/// How often a keep-alive comment is sent on an otherwise quiet stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `events` as a server-sent events response, with a keep-alive comment
/// every [`KEEP_ALIVE`] and an end when the server stops.
pub fn stream<S, E>(events: S) -> Sse<impl Stream<Item = Result<Event, E>> + Send + 'static>
where
    S: Stream<Item = Result<Event, E>> + Send + 'static,
    E: Into<axum::BoxError>,
{
    let stopping = context::current().map(|connection| connection.stopped());
    let events = events.take_until(context::until_stopped(stopping));
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

#[cfg(test)]
mod tests {
    use axum::response::IntoResponse as _;
    use http_body_util::BodyExt as _;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_sends_a_keep_alive_comment_every_fifteen_seconds() {
        let quiet = futures_util::stream::pending::<Result<Event, std::convert::Infallible>>();
        let mut body = stream(quiet).into_response().into_body();
        let started = tokio::time::Instant::now();
        let frame = body
            .frame()
            .await
            .expect("a frame")
            .expect("no error")
            .into_data()
            .expect("data");
        assert_eq!(started.elapsed(), KEEP_ALIVE);
        assert_eq!(&frame[..], b":\n\n");
    }
}
