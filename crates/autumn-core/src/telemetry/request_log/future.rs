//! [`ResponseFuture`]: the inner response, polled in the request's logging
//! scope; as it leaves, its `x-request-id` and last headers go on and the
//! access line is written.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::response::Response;
use http::Method;
use pin_project_lite::pin_project;

use super::headers::{ResponseHeaders, reserve};
use super::id::{REQUEST_ID, RequestId};
use crate::telemetry::text;

/// What the access log line needs once the response is ready.
#[derive(Debug)]
pub(super) struct Logged {
    pub(super) method: Method,
    pub(super) uri: http::Uri,
    /// The client, as `ClientIp` finds it.
    pub(super) client: IpAddr,
    pub(super) started: Instant,
}

/// Where the lines logged while a request is served get its id from.
pub(super) enum Scope {
    /// Autumn's plain-text subscriber: the id is put where it looks while
    /// the request is polled (a [`text::RequestScope`]), and the access
    /// line is written to its writer directly.
    Direct(text::Direct),
    /// Any other subscriber: a `request` span, entered on each poll.
    Span(tracing::Span),
}

pin_project! {
    /// The future of [`RequestLog`](super::service::RequestLog): the inner
    /// response, polled in the request's scope, with its last headers put
    /// on and its access line logged.
    pub(crate) struct ResponseFuture<F> {
        #[pin]
        inner: F,
        scope: Scope,
        // Lent to the request's scope while it is polled.
        id: Option<RequestId>,
        logged: Option<Logged>,
        headers: Option<ResponseHeaders>,
    }
}

impl<F> ResponseFuture<F> {
    /// `inner`, polled in `scope` (lent `id` while it runs), answered with
    /// `headers` and logged when `logged`.
    pub(super) fn new(
        inner: F,
        scope: Scope,
        id: RequestId,
        logged: Option<Logged>,
        headers: Option<ResponseHeaders>,
    ) -> Self {
        Self {
            inner,
            scope,
            id: Some(id),
            logged,
            headers,
        }
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let polled = match this.scope {
            Scope::Span(span) => {
                let _entered = span.enter();
                this.inner.poll(cx)
            }
            Scope::Direct(_) => match this.id.take() {
                Some(id) => {
                    let scope = text::RequestScope::enter(id);
                    let polled = this.inner.poll(cx);
                    *this.id = scope.leave();
                    polled
                }
                None => this.inner.poll(cx),
            },
        };
        let mut response = match polled {
            Poll::Ready(Ok(response)) => response,
            other => return other,
        };
        if let Scope::Span(span) = this.scope {
            // Declared by a traced request's span only; a no-op on others.
            span.record("http.response.status_code", response.status().as_u16());
        }
        if let Some(id) = this.id.as_ref() {
            let map = response.headers_mut();
            match this.headers {
                Some(headers) => headers.apply(map, 1),
                None => reserve(map, 1),
            }
            map.insert(REQUEST_ID, id.0.clone());
            if let Some(Logged {
                method,
                uri,
                client,
                started,
            }) = this.logged.take()
            {
                let line = Access {
                    method: &method,
                    path: uri.path(),
                    status: response.status().as_u16(),
                    latency: Millis(started.elapsed()),
                    client,
                    id,
                };
                log_access(this.scope, &line);
            }
        }
        Poll::Ready(Ok(response))
    }
}

/// The access line's target.
const ACCESS_TARGET: &str = "autumn::access";

/// What the access line says.
struct Access<'a> {
    method: &'a Method,
    path: &'a str,
    status: u16,
    latency: Millis,
    client: IpAddr,
    id: &'a RequestId,
}

/// Logs the access line (when `autumn::access` is on): written straight to
/// Autumn's plain-text subscriber's writer, or as an event for any other.
fn log_access(scope: &Scope, line: &Access<'_>) {
    if tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
        match scope {
            Scope::Direct(direct) => direct.info(ACCESS_TARGET, |out| access_fields(out, line)),
            Scope::Span(_) => access_event(line),
        }
    }
}

/// The access line as a `tracing` event.
fn access_event(line: &Access<'_>) {
    let Access {
        method,
        path,
        status,
        latency,
        client,
        id,
    } = line;
    tracing::info!(
        target: ACCESS_TARGET,
        method = %method,
        path = %path,
        status,
        latency_ms = %latency,
        client_ip = %client,
        request_id = %id,
        "{method} {path} {status} {latency}ms"
    );
}

/// The access line's fields as the plain-text format writes them from the
/// event: `POST /orders 201 0.412ms method=POST path=/orders status=201
/// latency_ms=0.412 client_ip=203.0.113.9 request_id=...`, written without
/// `fmt` machinery but for the address.
fn access_fields(out: &mut String, line: &Access<'_>) {
    let Access {
        method,
        path,
        status,
        latency,
        client,
        id,
    } = line;
    let mut digits = itoa::Buffer::new();
    let status = digits.format(*status);
    let latency = latency.as_text();
    let latency = latency.as_str();
    let method = method.as_str();
    let id = id.as_str();
    // An IPv6 address takes at most 39 bytes.
    out.reserve(2 * (method.len() + path.len() + status.len() + latency.len()) + id.len() + 128);
    // The message is escaped as every message is. Only the path can hold
    // what a terminal acts on (bytes from U+0080 up); a method is a token,
    // and the rest are digits.
    out.push_str(method);
    out.push(' ');
    let _ = fmt::Write::write_str(&mut text::Escaping(&mut *out), path);
    for part in [" ", status, " ", latency, "ms"] {
        out.push_str(part);
    }
    for (name, value) in [
        (" method=", method),
        (" path=", *path),
        (" status=", status),
        (" latency_ms=", latency),
    ] {
        out.push_str(name);
        out.push_str(value);
    }
    out.push_str(" client_ip=");
    // Digits, dots and colons only.
    let _ = fmt::Write::write_fmt(out, format_args!("{client}"));
    out.push_str(" request_id=");
    out.push_str(id);
}

/// A duration as milliseconds with three decimals (`0.412`), written
/// without a float or a string of its own.
#[derive(Clone, Copy)]
struct Millis(std::time::Duration);

impl Millis {
    /// The text, on the stack.
    fn as_text(self) -> MillisText {
        // In u64 (half a million years of microseconds): u128 formats slowly.
        let micros = u64::try_from(self.0.as_micros()).unwrap_or(u64::MAX);
        let mut text = MillisText {
            bytes: [0; 24],
            len: 0,
        };
        let mut digits = itoa::Buffer::new();
        let whole = digits.format(micros / 1000).as_bytes();
        text.bytes[..whole.len()].copy_from_slice(whole);
        let fraction = micros % 1000;
        let mut at = whole.len();
        text.bytes[at] = b'.';
        for divisor in [100, 10, 1] {
            at += 1;
            // A digit: below 10.
            text.bytes[at] = b'0' + u8::try_from(fraction / divisor % 10).unwrap_or(0);
        }
        text.len = at + 1;
        text
    }
}

/// [`Millis`] as text: at most 20 digits, a point and three.
struct MillisText {
    bytes: [u8; 24],
    len: usize,
}

impl MillisText {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or("0.000")
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_text().as_str())
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    /// The access line, without its timestamp, as the plain-text
    /// subscriber writes what `log` logs.
    fn plain_line(log: impl FnOnce()) -> String {
        let line = crate::telemetry::captured::logged(&crate::config::LogConfig::default(), log);
        crate::telemetry::captured::untimed(&line).to_owned()
    }

    /// The access line as Autumn's plain-text subscriber gets it: written
    /// directly, not dispatched.
    fn written_directly(line: &Access<'_>) {
        let Some(direct) = text::PlainText::current_direct() else {
            panic!("Autumn's plain-text subscriber offers its writer");
        };
        log_access(&Scope::Direct(direct), line);
    }

    #[test]
    fn the_directly_written_access_line_is_the_line_the_event_gives() {
        let id = RequestId::from_header(&HeaderValue::from_static("abc123")).expect("valid");
        for (method, path, status, micros, client) in [
            (Method::POST, "/orders", 201, 412, "203.0.113.9"),
            (Method::GET, "/", 404, 0, "127.0.0.1"),
            (
                Method::from_bytes(b"PURGE").expect("a method"),
                "/caf%C3%A9/x",
                500,
                12_345_678,
                "2001:db8::7",
            ),
        ] {
            let line = Access {
                method: &method,
                path,
                status,
                latency: Millis(std::time::Duration::from_micros(micros)),
                client: client.parse().expect("an address"),
                id: &id,
            };
            let fast = plain_line(|| written_directly(&line));
            let generic = plain_line(|| access_event(&line));
            assert_eq!(fast, generic);
            assert!(fast.starts_with(" INFO autumn::access: "), "{fast}");
            assert!(fast.contains(&format!(" client_ip={client} ")), "{fast}");
        }
        let line = Access {
            method: &Method::POST,
            path: "/orders",
            status: 201,
            latency: Millis(std::time::Duration::from_micros(412)),
            client: "203.0.113.9".parse().expect("an address"),
            id: &id,
        };
        assert_eq!(
            plain_line(|| written_directly(&line)),
            " INFO autumn::access: POST /orders 201 0.412ms method=POST path=/orders status=201 latency_ms=0.412 client_ip=203.0.113.9 request_id=abc123\n"
        );
    }

    #[test]
    fn latency_is_milliseconds_with_three_decimals() {
        let shown = |micros| Millis(std::time::Duration::from_micros(micros)).to_string();
        assert_eq!(shown(0), "0.000");
        assert_eq!(shown(412), "0.412");
        assert_eq!(shown(1_005), "1.005");
        assert_eq!(shown(12_345_678), "12345.678");
        assert_eq!(shown(u64::MAX), "18446744073709551.615");
    }
}
