//! Problem documents for the errors hyper answers itself, before any
//! service runs: a request head it cannot parse (400), a target too long
//! (414), a head over `server.max_header_bytes` (431).
//!
//! hyper writes those as a bare head (`connection: close`,
//! `content-length: 0` and `date` only)
//! and closes the connection, with no hook to say more. [`ParseErrorBodies`]
//! wraps the connection's socket and swaps exactly that head for the same
//! status with a problem document. Nothing else is touched: every error the
//! app answers goes through [`ErrorPages`](super::ErrorPages), so it has a
//! `content-type` and a body and never looks like hyper's.
//!
//! The head was not parsed, so `Accept` is unknown: these are always
//! problem documents.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Method, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::render::describe;

/// A socket whose bare parse-error responses get a problem document.
pub(crate) struct ParseErrorBodies<T> {
    io: T,
    /// The replacement still to be written, and how much of it was.
    pending: Option<(Bytes, usize)>,
}

impl<T> ParseErrorBodies<T> {
    pub(crate) fn new(io: T) -> Self {
        Self { io, pending: None }
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
        if let Some(replacement) = replacement(buf) {
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
        // hyper's bare head is one buffer; anything else is a real response.
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
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
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
}
