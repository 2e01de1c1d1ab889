//! [`RequestId`]: the id of the request being served, as the request log
//! gives it and handlers take it.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::FromRequestParts;
use http::request::Parts;
use http::{HeaderName, HeaderValue};

/// The header carrying a request's id, read from the client or a proxy and
/// sent back on the response.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// [`REQUEST_ID_HEADER`] as a header name made once: a name given as text
/// is parsed, and copied, on every use.
pub(super) const REQUEST_ID: HeaderName = HeaderName::from_static(REQUEST_ID_HEADER);

/// The id of the request being served: the `x-request-id` it came with, or
/// one made for it. It is on the request's span (so every line logged while
/// serving it names it), on the access log line, and sent back in the
/// response's `x-request-id`.
///
/// A request extension: inserted by the request log (`RequestLogLayer`),
/// outside every other layer of the app but the path-tenant cut (and
/// around an actuator on its own port); read by this extractor, which makes
/// an id when there is none (a bare router in a test).
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
    /// in, which clones without copying. The request log's service and
    /// future put it on the request and the response as it is.
    pub(super) HeaderValue,
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
    pub(in crate::telemetry) fn from_header(value: &HeaderValue) -> Option<Self> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
