//! The request id and access log: [`RequestLogLayer`], outermost of the
//! framework's layers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::{FromRequestParts, Request};
use axum::response::Response;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::text;

/// The header carrying a request's id, read from the client or a proxy and
/// sent back on the response.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// [`REQUEST_ID_HEADER`] as a header name made once: a name given as text
/// is parsed, and copied, on every use.
const REQUEST_ID: HeaderName = HeaderName::from_static(REQUEST_ID_HEADER);

/// The id of the request being served: the `x-request-id` it came with, or
/// one made for it. It is on the request's span (so every line logged while
/// serving it names it), on the access log line, and sent back in the
/// response's `x-request-id`.
///
/// ```
/// use autumn_core::telemetry::RequestId;
///
/// async fn handler(id: RequestId) -> String {
///     format!("request {id}")
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(
    /// Visible ASCII only, so it is text too; held as the header it is sent
    /// in, which clones without copying.
    HeaderValue,
);

impl RequestId {
    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Only ever made from visible ASCII, which `to_str` accepts.
        self.0.to_str().unwrap_or_default()
    }

    /// The id the request came with, when it is one worth keeping: 1 to 128
    /// visible ASCII characters (anything else could forge log lines).
    pub(super) fn from_header(value: &HeaderValue) -> Option<Self> {
        let bytes = value.as_bytes();
        ((1..=128).contains(&bytes.len()) && bytes.iter().all(|b| (0x21..=0x7e).contains(b)))
            .then(|| Self(value.clone()))
    }

    /// A new id: 32 hex digits, unique within the process and, with
    /// overwhelming likelihood, across processes. Not a secret, so not a
    /// system call per request: a random seed taken once, then a counter
    /// through a bijective mix (distinct counters give distinct ids).
    pub(crate) fn generate() -> Self {
        static SEED: std::sync::OnceLock<[u64; 2]> = std::sync::OnceLock::new();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let [high, low] = *SEED.get_or_init(|| {
            let mut bytes = [0u8; 16];
            // No randomness: ids stay unique within this process.
            let _ = getrandom::fill(&mut bytes);
            let (high, low) = bytes.split_at(8);
            [
                u64::from_le_bytes(high.try_into().unwrap_or_default()),
                u64::from_le_bytes(low.try_into().unwrap_or_default()),
            ]
        });
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&high.to_be_bytes());
        bytes[8..].copy_from_slice(&mix(n ^ low).to_be_bytes());
        // One allocation, shared by every clone (the request's header, the
        // response's, the extension); copied bytes would be allocated
        // again on the first clone.
        let hex = bytes::Bytes::from_owner(hex(&bytes));
        // Hex digits are always a valid header value.
        Self(HeaderValue::from_maybe_shared(hex).unwrap_or(HeaderValue::from_static("0")))
    }
}

/// Lowercase hex digits of 16 bytes: a byte's two digits at once, from a
/// table made at compile time (a digit at a time cost about 280
/// instructions a request).
fn hex(bytes: &[u8; 16]) -> [u8; 32] {
    const PAIRS: [[u8; 2]; 256] = {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0; 2]; 256];
        let mut byte = 0;
        while byte < 256 {
            pairs[byte] = [DIGITS[byte >> 4], DIGITS[byte & 0x0f]];
            byte += 1;
        }
        pairs
    };
    let mut out = [0_u8; 32];
    for (pair, &byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&PAIRS[usize::from(byte)]);
    }
    out
}

/// SplitMix64's finaliser: a bijection on `u64` that scatters neighbours.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Outside Autumn's pipeline (a bare router in a test) there is no
        // id yet: make one.
        Ok(parts
            .extensions
            .get::<Self>()
            .cloned()
            .unwrap_or_else(Self::generate))
    }
}

/// Gives each request its id and span, and writes its access log line
/// (when `access_log`) once the response head is ready.
///
/// The response's last headers go on here too: its `x-request-id` and the
/// [`ResponseHeaders`] given with [`with_response_headers`](Self::with_response_headers)
/// (the security headers), in one pass over the finished response rather
/// than in a layer of their own, which would move every response through
/// one more future.
#[derive(Debug, Clone)]
pub(crate) struct RequestLogLayer {
    access_log: bool,
    headers: Option<ResponseHeaders>,
}

impl RequestLogLayer {
    pub(crate) fn new(access_log: bool) -> Self {
        Self {
            access_log,
            headers: None,
        }
    }

    /// Sets `headers` on every response that has none of its own.
    pub(crate) fn with_response_headers(mut self, headers: Option<ResponseHeaders>) -> Self {
        self.headers = headers;
        self
    }
}

impl<S> Layer<S> for RequestLogLayer {
    type Service = RequestLog<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestLog {
            inner,
            access_log: self.access_log,
            headers: self.headers.clone(),
        }
    }
}

/// The service made by [`RequestLogLayer`].
#[derive(Debug, Clone)]
pub(crate) struct RequestLog<S> {
    inner: S,
    access_log: bool,
    headers: Option<ResponseHeaders>,
}

/// Headers every response gets unless it sets its own (a handler that
/// needs another policy for one page sets it, and that one stays).
#[derive(Debug, Clone)]
pub(crate) struct ResponseHeaders(Arc<[(HeaderName, HeaderValue)]>);

impl ResponseHeaders {
    pub(crate) fn new(headers: Vec<(HeaderName, HeaderValue)>) -> Self {
        Self(headers.into())
    }

    /// Adds each header `map` lacks, and room for `extra` more after them.
    fn apply(&self, map: &mut HeaderMap, extra: usize) {
        reserve(map, self.0.len() + extra);
        for (name, value) in self.0.iter() {
            map.entry(name).or_insert_with(|| value.clone());
        }
    }
}

/// Room for `additional` more headers in `map`, growing it at most once.
/// `HeaderMap::reserve` rebuilds the table even when it already has the
/// room, so ask only when it does not.
fn reserve(map: &mut HeaderMap, additional: usize) {
    // Entries hold one name each; further values of a name live apart.
    if map.capacity().saturating_sub(map.keys_len()) < additional {
        map.reserve(additional);
    }
}

impl<S> Service<Request> for RequestLog<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = RequestLogFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let started = Instant::now();
        with_room_for_the_framework(request.extensions_mut());
        let id = request
            .headers()
            .get(&REQUEST_ID)
            .and_then(RequestId::from_header)
            .unwrap_or_else(RequestId::generate);
        // Handlers and proxied calls see the id the response will carry.
        request.headers_mut().insert(REQUEST_ID, id.0.clone());
        let method = request.method().clone();
        // Autumn's own plain-text subscriber keeps the request's scope
        // itself; any other gets a span. The id alone: it ties each line to
        // the access line, which has the method and path; every field here
        // is formatted on every request.
        let scope = match text::PlainText::current_direct() {
            Some(direct) => Scope::Direct(direct),
            None => Scope::Span(tracing::info_span!("request", request_id = %id)),
        };
        // The path only: a query string may carry what must not be logged.
        let logged = self.access_log.then(|| Logged {
            method,
            // Shares the request's bytes: no copy.
            uri: request.uri().clone(),
            started,
        });
        request.extensions_mut().insert(id.clone());
        RequestLogFuture {
            inner: self.inner.call(request),
            scope,
            id: Some(id),
            logged,
            headers: self.headers.clone(),
        }
    }
}

/// Gives `extensions` room for what the framework's layers insert (the
/// request id, the session, the scope, the state, the route's match...):
/// grown one insert at a time, the map would be allocated three times and
/// rehashed twice on every request. One allocation, from an empty map made
/// once per thread with that room.
fn with_room_for_the_framework(extensions: &mut http::Extensions) {
    /// Distinct types to make the room with, then taken out again.
    #[derive(Clone)]
    struct Slot<const N: usize>;

    fn roomy() -> http::Extensions {
        let mut roomy = http::Extensions::new();
        macro_rules! room {
            ($($n:literal)*) => {
                $( roomy.insert(Slot::<$n>); )*
                $( roomy.remove::<Slot<$n>>(); )*
            };
        }
        // Past 7 entries the map moves to its next size, which holds 14.
        room!(0 1 2 3 4 5 6 7 8);
        roomy
    }

    thread_local! {
        static ROOMY: http::Extensions = roomy();
    }
    let mut fresh = ROOMY.with(Clone::clone);
    fresh.extend(std::mem::take(extensions));
    *extensions = fresh;
}

/// The access line's target.
const ACCESS_TARGET: &str = "autumn::access";

/// Logs the access line (when `autumn::access` is on): written straight to
/// Autumn's plain-text subscriber's writer, or as an event for any other.
fn log_access(
    scope: &Scope,
    method: &Method,
    path: &str,
    status: u16,
    latency: Millis,
    id: &RequestId,
) {
    if tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
        match scope {
            Scope::Direct(direct) => direct.info(ACCESS_TARGET, |out| {
                access_fields(out, method, path, status, latency, id);
            }),
            Scope::Span(_) => access_event(method, path, status, latency, id),
        }
    }
}

/// The access line as a `tracing` event.
fn access_event(method: &Method, path: &str, status: u16, latency: Millis, id: &RequestId) {
    tracing::info!(
        target: ACCESS_TARGET,
        method = %method,
        path = %path,
        status,
        latency_ms = %latency,
        request_id = %id,
        "{method} {path} {status} {latency}ms"
    );
}

/// The access line's fields as the plain-text format writes them from the
/// event: `POST /orders 201 0.412ms method=POST path=/orders status=201
/// latency_ms=0.412 request_id=...`, written without `fmt` machinery.
fn access_fields(
    out: &mut String,
    method: &Method,
    path: &str,
    status: u16,
    latency: Millis,
    id: &RequestId,
) {
    let mut digits = itoa::Buffer::new();
    let status = digits.format(status);
    let latency = latency.as_text();
    let latency = latency.as_str();
    let method = method.as_str();
    let id = id.as_str();
    out.reserve(2 * (method.len() + path.len() + status.len() + latency.len()) + id.len() + 64);
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
        (" path=", path),
        (" status=", status),
        (" latency_ms=", latency),
        (" request_id=", id),
    ] {
        out.push_str(name);
        out.push_str(value);
    }
}

/// What the access log line needs once the response is ready.
#[derive(Debug)]
struct Logged {
    method: Method,
    uri: http::Uri,
    started: Instant,
}

/// Where the lines logged while a request is served get its id from.
enum Scope {
    /// Autumn's plain-text subscriber: the id is put where it looks while
    /// the request is polled (a [`text::RequestScope`]), and the access
    /// line is written to its writer directly.
    Direct(text::Direct),
    /// Any other subscriber: a `request` span, entered on each poll.
    Span(tracing::Span),
}

pin_project! {
    /// The future of [`RequestLog`].
    pub(crate) struct RequestLogFuture<F> {
        #[pin]
        inner: F,
        scope: Scope,
        // Lent to the request's scope while it is polled.
        id: Option<RequestId>,
        logged: Option<Logged>,
        headers: Option<ResponseHeaders>,
    }
}

impl<F, E> Future for RequestLogFuture<F>
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
                started,
            }) = this.logged.take()
            {
                let path = uri.path();
                let status = response.status().as_u16();
                let latency = Millis(started.elapsed());
                log_access(this.scope, &method, path, status, latency, id);
            }
        }
        Poll::Ready(Ok(response))
    }
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
    use super::*;

    #[test]
    fn response_headers_go_on_where_missing_whatever_the_map_holds() {
        let headers = ResponseHeaders::new(vec![
            (
                http::header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                http::header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'self'"),
            ),
        ]);
        // More values than the map has entries: many cookies under one name.
        let mut map = HeaderMap::new();
        for n in 0..20 {
            map.append(http::header::SET_COOKIE, HeaderValue::from(n));
        }
        map.insert(
            http::header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'"),
        );
        assert!(map.len() > map.capacity());
        headers.apply(&mut map, 1);
        map.insert(REQUEST_ID, HeaderValue::from_static("id"));
        assert_eq!(map["x-content-type-options"], "nosniff");
        // The response's own policy stays.
        assert_eq!(map["content-security-policy"], "default-src 'none'");
        assert_eq!(map.get_all(http::header::SET_COOKIE).iter().count(), 20);
        assert_eq!(map[REQUEST_ID], "id");
    }

    #[test]
    fn making_room_keeps_what_the_request_carried_and_adds_nothing() {
        #[derive(Clone, Debug, PartialEq)]
        struct Carried(u8);
        let mut extensions = http::Extensions::new();
        extensions.insert(Carried(7));
        with_room_for_the_framework(&mut extensions);
        assert_eq!(extensions.len(), 1);
        assert_eq!(extensions.get::<Carried>(), Some(&Carried(7)));
        let mut empty = http::Extensions::new();
        with_room_for_the_framework(&mut empty);
        assert!(empty.is_empty());
    }

    /// The access line, without its timestamp, as the plain-text
    /// subscriber writes what `log` logs.
    fn plain_line(log: impl FnOnce()) -> String {
        let line = super::super::captured::logged(&crate::config::LogConfig::default(), log);
        super::super::captured::untimed(&line).to_owned()
    }

    /// The access line as Autumn's plain-text subscriber gets it: written
    /// directly, not dispatched.
    fn written_directly(method: &Method, path: &str, status: u16, latency: Millis, id: &RequestId) {
        let Some(direct) = text::PlainText::current_direct() else {
            panic!("Autumn's plain-text subscriber offers its writer");
        };
        log_access(&Scope::Direct(direct), method, path, status, latency, id);
    }

    #[test]
    fn the_directly_written_access_line_is_the_line_the_event_gives() {
        let id = RequestId::from_header(&HeaderValue::from_static("abc123")).expect("valid");
        for (method, path, status, micros) in [
            (Method::POST, "/orders", 201, 412),
            (Method::GET, "/", 404, 0),
            (
                Method::from_bytes(b"PURGE").expect("a method"),
                "/caf%C3%A9/x",
                500,
                12_345_678,
            ),
        ] {
            let latency = Millis(std::time::Duration::from_micros(micros));
            let fast = plain_line(|| written_directly(&method, path, status, latency, &id));
            let generic = plain_line(|| access_event(&method, path, status, latency, &id));
            assert_eq!(fast, generic);
            assert!(fast.starts_with(" INFO autumn::access: "), "{fast}");
        }
        let latency = Millis(std::time::Duration::from_micros(412));
        assert_eq!(
            plain_line(|| written_directly(&Method::POST, "/orders", 201, latency, &id)),
            " INFO autumn::access: POST /orders 201 0.412ms method=POST path=/orders status=201 latency_ms=0.412 request_id=abc123\n"
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

    #[test]
    fn hex_writes_every_byte_as_two_lowercase_digits() {
        for first in (0..=255_u8).step_by(16) {
            let mut bytes = [0_u8; 16];
            for (byte, offset) in bytes.iter_mut().zip(0_u8..) {
                *byte = first.wrapping_add(offset);
            }
            let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex(&bytes), expected.as_bytes(), "{bytes:?}");
        }
    }

    #[test]
    fn generated_ids_are_32_hex_digits_and_distinct() {
        let ids: std::collections::HashSet<String> = (0..10_000)
            .map(|_| RequestId::generate().to_string())
            .collect();
        assert_eq!(ids.len(), 10_000);
        assert!(
            ids.iter()
                .all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        );
    }
}
