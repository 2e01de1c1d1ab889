//! Problem documents for the errors hyper answers itself, before any
//! service runs: a request head it cannot parse (400), a target too long
//! (414), a head over `server.max_header_bytes` (431).
//!
//! hyper writes those as a bare head (`connection: close`,
//! `content-length: 0` and `date` only) and closes the connection, with no
//! hook to say more. So the socket under hyper is a [`ParseErrorBodies`],
//! which swaps that head for the same status with a problem document, and
//! it decides *when* a write can be hyper's own by what the connection is
//! doing, never by the bytes alone: the bytes are looked at only while no
//! response of the app can be on its way.
//!
//! The connection's service counts in [`AppWrites`] each response it
//! starts, each response body hyper is done with, and an upgrade. hyper
//! writes a parse error only for a head it could not take, which it reads
//! only once the previous response was written whole; so a write is a
//! candidate only when every response started has ended *and* the socket
//! has been flushed since (hyper hands the socket a body's last chunk after
//! it drops the body, and before the flush), and never once the connection
//! was upgraded (a WebSocket's frames are the app's). A body chunk equal to
//! hyper's head is therefore written as it is; a parse error that comes
//! behind bytes of the previous response still unflushed keeps hyper's bare
//! head, which is a valid answer, only without a body.
//!
//! The head was not parsed, so `Accept` is unknown: these are always
//! problem documents.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::render::describe;

/// What the app has under way on one HTTP/1 connection, as its socket
/// needs to know it: shared by the connection's service, which counts, and
/// its [`ParseErrorBodies`], which reads.
#[derive(Debug, Default)]
pub(crate) struct AppWrites {
    /// Responses the app was asked for (service calls).
    started: AtomicU64,
    /// Of those, the ones whose body hyper is done with (dropped).
    ended: AtomicU64,
    /// A response switched protocols: from then on every byte is the app's.
    upgraded: AtomicBool,
}

impl AppWrites {
    /// A request is handed to the app.
    pub(crate) fn start(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    /// The app's response to it: counted as ended when hyper drops its
    /// body; a `101` marks the connection upgraded.
    pub(crate) fn track(
        self: &Arc<Self>,
        response: axum::response::Response,
    ) -> axum::response::Response {
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            self.upgraded.store(true, Ordering::Relaxed);
        }
        let writes = Arc::clone(self);
        response.map(|body| axum::body::Body::new(Tracked { body, writes }))
    }

    /// Every response started has ended; the count, when so.
    fn settled(&self) -> Option<u64> {
        let started = self.started.load(Ordering::Relaxed);
        (self.ended.load(Ordering::Relaxed) == started).then_some(started)
    }
}

/// A response body that tells [`AppWrites`] when hyper is done with it.
struct Tracked {
    body: axum::body::Body,
    writes: Arc<AppWrites>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.writes.ended.fetch_add(1, Ordering::Relaxed);
    }
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A socket whose bare parse-error responses get a problem document.
pub(crate) struct ParseErrorBodies<T> {
    io: T,
    writes: Arc<AppWrites>,
    /// The count of responses started at the last flush by which all of
    /// them had ended: while it is the count now, and all have ended, no
    /// byte of the app's is still on its way to the socket.
    flushed_at: u64,
    /// The replacement still to be written, and how much of it was.
    pending: Option<(Bytes, usize)>,
}

impl<T> ParseErrorBodies<T> {
    pub(crate) fn new(io: T, writes: Arc<AppWrites>) -> Self {
        Self {
            io,
            writes,
            flushed_at: 0,
            pending: None,
        }
    }

    /// Whether a write now can only be hyper's own.
    fn hyper_alone(&self) -> bool {
        !self.writes.upgraded.load(Ordering::Relaxed)
            && self.writes.settled() == Some(self.flushed_at)
    }
}

impl<T: AsyncWrite + Unpin> ParseErrorBodies<T> {
    /// Writes what is left of the replacement.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written == bytes.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ParseErrorBodies<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ParseErrorBodies<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if self.hyper_alone()
            && let Some(replacement) = replacement(buf)
        {
            // hyper's head counts as written; flush and shutdown finish the
            // replacement.
            self.pending = Some((replacement, 0));
            if let Poll::Ready(Err(error)) = self.poll_pending(cx) {
                return Poll::Ready(Err(error));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut filled = bufs.iter().filter(|buf| !buf.is_empty());
        // hyper's bare head is one buffer.
        if let (Some(only), None) = (filled.next(), filled.next()) {
            return self.poll_write(cx, only);
        }
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // hyper flushes the socket only once it has handed it everything
        // it buffered: if every response had ended by now, all of them are
        // behind us.
        let settled = self.writes.settled();
        ready!(self.poll_pending(cx))?;
        ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        if let Some(started) = settled {
            self.flushed_at = started;
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

pin_project_lite::pin_project! {
    /// A response future whose response is counted in [`AppWrites`] (see
    /// [`AppWrites::track`]); with none, it is the inner future as it is.
    pub(crate) struct TrackResponse<F> {
        #[pin]
        inner: F,
        writes: Option<Arc<AppWrites>>,
    }
}

impl<F> TrackResponse<F> {
    pub(crate) fn new(inner: F, writes: Option<Arc<AppWrites>>) -> Self {
        Self { inner, writes }
    }
}

impl<F> std::future::Future for TrackResponse<F>
where
    F: std::future::Future<Output = Result<axum::response::Response, std::convert::Infallible>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        Poll::Ready(match this.writes.take() {
            Some(writes) => result.map(|response| writes.track(response)),
            None => result,
        })
    }
}

/// The statuses hyper answers on its own for a head it could not take.
const PARSE_ERRORS: [StatusCode; 3] = [
    StatusCode::BAD_REQUEST,
    StatusCode::URI_TOO_LONG,
    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
];

/// The response to send instead of `buf`, when `buf` is exactly hyper's
/// bare parse-error head: `HTTP/1.1 <status> <reason>`, then
/// `connection: close`, `content-length: 0` and `date`, and nothing else.
fn replacement(buf: &[u8]) -> Option<Bytes> {
    let head = std::str::from_utf8(buf).ok()?.strip_suffix("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let status = PARSE_ERRORS.into_iter().find(|status| {
        status_line
            == format!(
                "HTTP/1.1 {} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or_default()
            )
    })?;
    let (mut length, mut date) = (false, None);
    for line in lines {
        match line.split_once(": ") {
            Some(("content-length", "0")) if !length => length = true,
            Some(("connection", "close")) => {}
            Some(("date", value)) if date.is_none() => date = Some(value),
            _ => return None,
        }
    }
    if !length {
        return None;
    }
    let info = describe(status, &Method::GET, "/", "");
    let body = serde_json::json!({
        "type": "about:blank",
        "title": info.title(),
        "status": status.as_u16(),
        "detail": info.detail(),
        "code": info.code(),
    })
    .to_string();
    let mut out = format!(
        "{status_line}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    if let Some(date) = date {
        out.push_str("date: ");
        out.push_str(date);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    Some(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hyper_bare_parse_error_heads_are_replaced() {
        let bare = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n";
        let replaced = replacement(bare).expect("replaced");
        let text = std::str::from_utf8(&replaced).expect("utf-8");
        assert!(text.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(text.contains("content-type: application/problem+json\r\n"));
        assert!(text.contains("date: Mon, 01 Jan 2024 00:00:00 GMT\r\n"));
        let (head, body) = text.split_once("\r\n\r\n").expect("head");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(json["code"], "request_header_fields_too_large");

        // A response with anything more, another status, or a body, is the app's.
        for other in [
            &b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nx",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
        ] {
            assert!(replacement(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }

    /// hyper's bare 400 head.
    const BARE: &[u8] = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n";

    /// A response of `status` that hyper is done with at once.
    fn finished(writes: &Arc<AppWrites>, status: StatusCode) {
        writes.start();
        let mut response = axum::response::Response::new(axum::body::Body::empty());
        *response.status_mut() = status;
        drop(writes.track(response));
    }

    /// Writes [`BARE`] through `socket` as hyper would (then a flush), and
    /// returns what reached the other end: `BARE` itself, or a problem
    /// document in its place.
    async fn send_bare(
        socket: &mut ParseErrorBodies<tokio::io::DuplexStream>,
        client: &mut tokio::io::DuplexStream,
    ) -> Vec<u8> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        socket.write_all(BARE).await.expect("write");
        socket.flush().await.expect("flush");
        let mut got = Vec::new();
        while got != BARE && !got.ends_with(b"}") {
            let mut chunk = [0_u8; 1024];
            let n = client.read(&mut chunk).await.expect("read");
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&chunk[..n]);
        }
        got
    }

    #[tokio::test]
    async fn a_bare_head_is_replaced_only_while_no_byte_of_the_app_can_be_on_its_way() {
        use tokio::io::AsyncWriteExt as _;

        let writes = Arc::new(AppWrites::default());
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let mut socket = ParseErrorBodies::new(server, Arc::clone(&writes));
        let mut sent = Vec::new();
        // Nothing of the app's yet: hyper alone writes, and is answered.
        sent.push(send_bare(&mut socket, &mut client).await);
        // A response under way: the bytes are its body's.
        writes.start();
        sent.push(send_bare(&mut socket, &mut client).await);
        // Its body dropped, but no flush since it was: its last chunk.
        drop(writes.track(axum::response::Response::new(axum::body::Body::empty())));
        sent.push(send_bare(&mut socket, &mut client).await);
        // Flushed with every response ended: hyper's own again.
        sent.push(send_bare(&mut socket, &mut client).await);
        // Upgraded: every byte from now on is the app's.
        finished(&writes, StatusCode::SWITCHING_PROTOCOLS);
        socket.flush().await.expect("flush");
        sent.push(send_bare(&mut socket, &mut client).await);

        let replaced: Vec<bool> = sent.iter().map(|bytes| bytes != BARE).collect();
        assert_eq!(replaced, [true, false, false, true, false]);
        let text = String::from_utf8_lossy(&sent[0]).into_owned();
        assert!(text.contains("application/problem+json"), "{text}");
    }
}
