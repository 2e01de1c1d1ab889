//! What a store keeps: the recorded response and the entry `get` returns.

use axum::body::Body;
use axum::response::IntoResponse as _;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

use crate::problem::IdempotencyRejection;

/// A recorded response: status, headers and body, replayed byte for byte.
///
/// Stores persist it however they like; [`IdempotencyRecord::encode`] and
/// [`IdempotencyRecord::decode`] give a compact binary form that every
/// built-in store uses, and that custom stores may use too. A store that
/// keeps records in a form of its own must keep
/// [`is_not_recorded`](Self::is_not_recorded) too: a marker read back as an
/// ordinary record would replay an empty response.
///
/// A record may also be a marker: the request ran, but its response could
/// not be kept (it was larger than the guard's `max_record_bytes`). A
/// marker holds the response's status and nothing else, and the guards
/// answer it with 409 instead of replaying it.
///
/// ```
/// use autumn_idempotency::IdempotencyRecord;
/// use http::StatusCode;
///
/// let marker = IdempotencyRecord::not_recorded(StatusCode::OK);
/// assert!(marker.is_not_recorded());
/// let read = IdempotencyRecord::decode(&marker.encode())?;
/// assert!(read.is_not_recorded());
/// assert_eq!(read.status(), StatusCode::OK);
/// # Ok::<(), autumn_idempotency::RecordDecodeError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    status: StatusCode,
    headers: Box<[(HeaderName, HeaderValue)]>,
    body: Bytes,
    replay_through_inner: bool,
    /// Whether `body` is sealed (see [`crate::sealing`]).
    body_sealed: bool,
    /// Whether this is a marker for a response that was not kept.
    not_recorded: bool,
}

/// Headers that describe one connection or one transfer, not the response:
/// they are never recorded.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "transfer-encoding" | "upgrade" | "content-length"
    )
}

impl IdempotencyRecord {
    /// A record of a response with this status, headers and body.
    ///
    /// Per-connection headers (`connection`, `transfer-encoding`,
    /// `content-length`, ...) are dropped: they are recomputed on replay. The
    /// body is kept as given, so it may share a larger buffer: a store that
    /// keeps records in memory should keep a copy of its own, as the built-in
    /// stores do by [encoding](Self::encode) it.
    pub fn new(
        status: StatusCode,
        headers: impl IntoIterator<Item = (HeaderName, HeaderValue)>,
        body: impl Into<Bytes>,
    ) -> Self {
        let mut kept: Vec<_> = headers
            .into_iter()
            .filter(|(name, _)| !is_hop_by_hop(name))
            .collect();
        // A boxed slice holds exactly the headers kept: records live for
        // hours, so spare capacity would be paid for per key. Moved into a
        // block of their size rather than shrunk in place: a shrink leaves
        // the spare tail as a free fragment between long-lived blocks, and a
        // store recording many responses fills its heap with them.
        let headers = if kept.len() == kept.capacity() {
            kept.into_boxed_slice()
        } else {
            let mut exact = Vec::with_capacity(kept.len());
            exact.append(&mut kept);
            exact.into_boxed_slice()
        };
        Self {
            status,
            headers,
            body: body.into(),
            replay_through_inner: false,
            body_sealed: false,
            not_recorded: false,
        }
    }

    /// A marker saying a request ran and answered `status`, but its response
    /// was not kept (too large to record): a retry is answered 409 rather
    /// than run again or replayed. It holds no headers and no body.
    ///
    /// It is encoded as a version of its own, which a reader from before
    /// markers existed refuses as an unknown version instead of replaying
    /// it as an empty response.
    pub fn not_recorded(status: StatusCode) -> Self {
        Self {
            status,
            headers: Box::default(),
            body: Bytes::new(),
            replay_through_inner: false,
            body_sealed: false,
            not_recorded: true,
        }
    }

    /// Whether this is a [marker](Self::not_recorded) rather than a
    /// response: there is nothing to replay.
    pub fn is_not_recorded(&self) -> bool {
        self.not_recorded
    }

    /// A record of a response's parts: [`new`](Self::new), with the kept
    /// headers counted first so their slice is allocated once, at its size.
    pub(crate) fn from_parts(parts: &http::response::Parts, body: Bytes) -> Self {
        let kept = || {
            parts
                .headers
                .iter()
                .filter(|(name, _)| !is_hop_by_hop(name))
        };
        let mut headers = Vec::with_capacity(kept().count());
        headers.extend(kept().map(|(name, value)| (name.clone(), value.clone())));
        Self {
            status: parts.status,
            headers: headers.into_boxed_slice(),
            body,
            replay_through_inner: false,
            body_sealed: false,
            not_recorded: false,
        }
    }

    /// The recorded status (for a [marker](Self::not_recorded), the status
    /// of the response that was not kept).
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The recorded headers, in their original order.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// The recorded body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Whether a hit on this record is answered by an
    /// [`IdempotencyReplayLayer`](crate::IdempotencyReplayLayer) inside the
    /// route, after the route's own checks, rather than by the outer layer.
    pub fn replays_through_inner(&self) -> bool {
        self.replay_through_inner
    }

    pub(crate) fn with_replay_through_inner(mut self, yes: bool) -> Self {
        self.replay_through_inner = yes;
        self
    }

    /// Whether the body is sealed: it must be opened before a replay.
    pub fn body_sealed(&self) -> bool {
        self.body_sealed
    }

    /// The headers, to seal or open values in place.
    pub(crate) fn headers_mut(&mut self) -> &mut [(HeaderName, HeaderValue)] {
        &mut self.headers
    }

    /// The same record with this body, sealed or not.
    pub(crate) fn with_body(mut self, body: Bytes, sealed: bool) -> Self {
        self.body = body;
        self.body_sealed = sealed;
        self
    }

    /// Rebuilds the response. Cheap: the body is reference-counted.
    ///
    /// A [marker](Self::not_recorded) has no response to rebuild: it gives
    /// the 409 `idempotency_response_not_recorded` problem the
    /// `Idempotency-Key` guard answers it with, never an empty success.
    pub fn to_response(&self) -> Response {
        if self.not_recorded {
            return IdempotencyRejection::ResponseNotRecorded.into_response();
        }
        let mut response = Response::new(Body::from(self.body.clone()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        response
    }

    /// A compact binary form: version, status, flags, headers and body, each
    /// length-prefixed. A record with a sealed body is written as version 2,
    /// which an older reader refuses rather than replaying ciphertext; a
    /// [marker](Self::not_recorded) as version 3, which an older reader
    /// refuses rather than replaying an empty response.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// How many bytes [`encode`](Self::encode) writes.
    pub(crate) fn encoded_len(&self) -> usize {
        12 + self.body.len()
            + self
                .headers
                .iter()
                .map(|(n, v)| 8 + n.as_str().len() + v.len())
                .sum::<usize>()
    }

    /// [`encode`](Self::encode), appended to `out`.
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        // A marker is never sealed (there is nothing in it to seal), so the
        // two versions after the first never meet.
        out.push(if self.not_recorded {
            CODEC_VERSION_NOT_RECORDED
        } else if self.body_sealed {
            CODEC_VERSION_SEALED_BODY
        } else {
            CODEC_VERSION
        });
        out.extend_from_slice(&self.status.as_u16().to_be_bytes());
        out.push(u8::from(self.replay_through_inner));
        put_len(out, self.headers.len());
        for (name, value) in &self.headers {
            put_bytes(out, name.as_str().as_bytes());
            put_bytes(out, value.as_bytes());
        }
        put_bytes(out, &self.body);
    }

    /// Reads what [`encode`](Self::encode) wrote.
    ///
    /// # Errors
    ///
    /// [`RecordDecodeError`] when the bytes are not a record of this version.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordDecodeError> {
        Self::decode_with(bytes, Bytes::copy_from_slice)
    }

    /// [`decode`](Self::decode) without copying: the body and header values
    /// are slices of `encoded`.
    pub(crate) fn decode_shared(encoded: &Bytes) -> Result<Self, RecordDecodeError> {
        Self::decode_with(encoded, |part| encoded.slice_ref(part))
    }

    fn decode_with(
        bytes: &[u8],
        to_bytes: impl Fn(&[u8]) -> Bytes,
    ) -> Result<Self, RecordDecodeError> {
        let mut input = Reader(bytes);
        let (body_sealed, not_recorded) = match input.take(1)? {
            [CODEC_VERSION] => (false, false),
            [CODEC_VERSION_SEALED_BODY] => (true, false),
            [CODEC_VERSION_NOT_RECORDED] => (false, true),
            _ => return Err(RecordDecodeError("unknown record version")),
        };
        let status = u16::from_be_bytes(input.array()?);
        let status =
            StatusCode::from_u16(status).map_err(|_| RecordDecodeError("invalid status code"))?;
        let replay_through_inner = input.take(1)? != [0];
        let count = input.len()?;
        let mut headers = Vec::with_capacity(count.min(64));
        for _ in 0..count {
            let name = HeaderName::from_bytes(input.bytes()?)
                .map_err(|_| RecordDecodeError("invalid header name"))?;
            let value = HeaderValue::from_maybe_shared(to_bytes(input.bytes()?))
                .map_err(|_| RecordDecodeError("invalid header value"))?;
            headers.push((name, value));
        }
        let body = to_bytes(input.bytes()?);
        if !input.0.is_empty() {
            return Err(RecordDecodeError("trailing bytes"));
        }
        Ok(Self {
            status,
            headers: headers.into_boxed_slice(),
            body,
            replay_through_inner,
            body_sealed,
            not_recorded,
        })
    }
}

const CODEC_VERSION: u8 = 1;
/// The same layout, with a sealed body.
const CODEC_VERSION_SEALED_BODY: u8 = 2;
/// The same layout, for a marker: the response was not kept. Its own
/// version rather than a flag, because readers before it take any flags
/// byte but zero as `replay_through_inner` and would replay the marker.
const CODEC_VERSION_NOT_RECORDED: u8 = 3;

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordDecodeError> {
        if self.0.len() < n {
            return Err(RecordDecodeError("truncated record"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordDecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn len(&mut self) -> Result<usize, RecordDecodeError> {
        Ok(u32::from_be_bytes(self.array()?) as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8], RecordDecodeError> {
        let len = self.len()?;
        self.take(len)
    }
}

/// Stored bytes that are not a record [`IdempotencyRecord::decode`] can read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot decode idempotency record: {0}")]
pub struct RecordDecodeError(&'static str);

/// What a store holds under a storage key: a lock, a record, or both.
///
/// A record whose lock is still held is not final (the session may still be
/// rewriting it), so it is answered with 409 rather than replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyEntry {
    record: Option<(IdempotencyRecord, Vec<u8>)>,
    locked: bool,
}

impl IdempotencyEntry {
    /// A request holds the lock and nothing is recorded yet.
    pub fn in_flight() -> Self {
        Self {
            record: None,
            locked: true,
        }
    }

    /// A recorded response with the fingerprint of the request that
    /// produced it.
    pub fn completed(record: IdempotencyRecord, fingerprint: Vec<u8>) -> Self {
        Self {
            record: Some((record, fingerprint)),
            locked: false,
        }
    }

    /// The same entry, marked as still locked (or not).
    #[must_use]
    pub fn locked(mut self, locked: bool) -> Self {
        self.locked = locked;
        self
    }

    /// Whether a request still holds the lock.
    pub fn is_locked(&self) -> bool {
        self.locked
    }

    /// The recorded response, if any.
    pub fn record(&self) -> Option<&IdempotencyRecord> {
        self.record.as_ref().map(|(record, _)| record)
    }

    /// The fingerprint of the request that produced the record, if any.
    pub fn fingerprint(&self) -> Option<&[u8]> {
        self.record
            .as_ref()
            .map(|(_, fingerprint)| fingerprint.as_slice())
    }

    /// The fingerprint of the request that produced the record, if any.
    #[deprecated(note = "use `fingerprint`: it is the hash of the whole request, not the body")]
    pub fn body_hash(&self) -> Option<&[u8]> {
        self.fingerprint()
    }

    pub(crate) fn into_record(self) -> Option<(IdempotencyRecord, Vec<u8>)> {
        self.record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trips_and_drops_per_connection_headers() {
        let record = IdempotencyRecord::new(
            StatusCode::CREATED,
            [
                (
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                ),
                (http::header::CONTENT_LENGTH, HeaderValue::from_static("2")),
                (http::header::SET_COOKIE, HeaderValue::from_static("a=1")),
                (http::header::SET_COOKIE, HeaderValue::from_static("b=2")),
            ],
            Bytes::from_static(b"{}"),
        )
        .with_replay_through_inner(true);
        assert_eq!(record.headers().len(), 3);
        let decoded = IdempotencyRecord::decode(&record.encode()).expect("decodes");
        assert_eq!(decoded, record);
        assert!(decoded.replays_through_inner());
    }

    #[test]
    fn a_marker_round_trips_as_version_3_and_stays_a_marker() {
        let marker = IdempotencyRecord::not_recorded(StatusCode::CREATED);
        let encoded = marker.encode();
        assert_eq!(encoded[0], 3, "a marker is written as version 3");
        assert_eq!(encoded.len(), marker.encoded_len());
        let decoded = IdempotencyRecord::decode(&encoded).expect("decodes");
        assert_eq!(decoded, marker);
        assert!(decoded.is_not_recorded());
        assert_eq!(decoded.status(), StatusCode::CREATED);
        assert!(decoded.headers().is_empty() && decoded.body().is_empty());
        assert!(!decoded.replays_through_inner() && !decoded.body_sealed());
        let shared = IdempotencyRecord::decode_shared(&Bytes::from(encoded)).expect("decodes");
        assert!(shared.is_not_recorded());
        // An ordinary record is not a marker, whatever its status.
        let plain = IdempotencyRecord::new(StatusCode::CREATED, [], "");
        assert!(
            !IdempotencyRecord::decode(&plain.encode())
                .expect("decodes")
                .is_not_recorded()
        );
        assert_ne!(plain, marker);
    }

    #[test]
    fn a_reader_that_knows_only_versions_1_and_2_refuses_a_marker() {
        // What an older reader checks: the version byte, before anything.
        let encoded = IdempotencyRecord::not_recorded(StatusCode::OK).encode();
        assert!(!matches!(encoded[0], 1 | 2), "not readable as a response");
        // The rest is the version 1 layout: flags zero, no headers, no body.
        let mut as_v1 = encoded.clone();
        as_v1[0] = 1;
        let v1 = IdempotencyRecord::decode(&as_v1).expect("same layout");
        assert!(!v1.is_not_recorded() && v1.body().is_empty());
    }

    #[tokio::test]
    async fn a_marker_never_rebuilds_as_a_success() {
        let response = IdempotencyRecord::not_recorded(StatusCode::OK).to_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .expect("a body")
            .to_bytes();
        let problem: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(problem["code"], "idempotency_response_not_recorded");
    }

    #[test]
    fn decode_rejects_garbage_without_panicking() {
        for bytes in [
            &b""[..],
            b"\x02",
            b"\x03",
            b"\x04\x00\xc8\x00\x00\x00\x00\x00\x00\x00\x00\x00",
            b"\x01\x00",
            b"\x01\x00\xc8\x00\xff\xff\xff\xff",
        ] {
            assert!(IdempotencyRecord::decode(bytes).is_err());
        }
        let mut ok = IdempotencyRecord::new(StatusCode::OK, [], "x").encode();
        ok.push(0);
        assert!(IdempotencyRecord::decode(&ok).is_err(), "trailing byte");
    }
}
