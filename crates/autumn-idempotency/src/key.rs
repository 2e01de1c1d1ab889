//! Reading the `Idempotency-Key` header, and the hashes derived from a request:
//! the storage key and the fingerprint.

use std::fmt::Write as _;

use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::{Digest, Sha256};

/// Whether requests with this method are guarded (POST, PUT, PATCH,
/// DELETE): the methods that change things.
pub fn is_guarded_method(method: &http::Method) -> bool {
    use http::Method;
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// Whether a guard may act on this request: a guarded method with an
/// `Idempotency-Key` (the idempotency layer) or a form body (the
/// submit-token layer: only a form carries its field). What only a guard
/// reads (the scope, the session's hooks) is left out of every other
/// request, so a JSON call without a key pays for none of it.
///
/// ```
/// use autumn_idempotency::key::may_be_guarded;
/// use http::{HeaderMap, HeaderValue, Method, header};
///
/// let mut headers = HeaderMap::new();
/// headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
/// assert!(!may_be_guarded(&Method::POST, &headers));
/// headers.insert("idempotency-key", HeaderValue::from_static("order-1"));
/// assert!(may_be_guarded(&Method::POST, &headers));
/// assert!(!may_be_guarded(&Method::GET, &headers));
/// ```
pub fn may_be_guarded(method: &http::Method, headers: &HeaderMap) -> bool {
    // One pass over a request's few headers costs less than two lookups,
    // each hashing its name (the key's is no standard name, so its hash is
    // made from its bytes every time). Any `Content-Type` that may be a
    // form counts, not only the first the submit-token layer reads.
    is_guarded_method(method)
        && headers.iter().any(|(name, value)| {
            *name == IDEMPOTENCY_KEY
                || (*name == http::header::CONTENT_TYPE
                    && crate::form_type::may_be_form(value.as_bytes()))
        })
}

/// The request header that carries the key, `Idempotency-Key`: a
/// [`HeaderName`], so a lookup does not parse the name each time.
///
/// ```
/// use autumn_idempotency::key::IDEMPOTENCY_KEY;
/// use http::{HeaderMap, HeaderValue};
///
/// let mut headers = HeaderMap::new();
/// headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("order-1"));
/// assert_eq!(headers["idempotency-key"], "order-1");
/// ```
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// The response header that marks a replay, `X-Idempotent-Replayed: true`.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("x-idempotent-replayed");
/// The response header that says a keyed request ran for the first time
/// under its key, `X-Idempotent-Honoured: true`: a retry with the same key
/// gets this response replayed (when it was a 2xx or 3xx).
pub const IDEMPOTENT_HONOURED: HeaderName = HeaderName::from_static("x-idempotent-honoured");
/// The response header that says until when a first run's response is
/// replayed, as an HTTP date, when the policy asks for it
/// (`X-Idempotent-Expires`).
pub const IDEMPOTENT_EXPIRES: HeaderName = HeaderName::from_static("x-idempotent-expires");
/// The longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// Why an `Idempotency-Key` header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The header was sent more than once.
    #[error("send exactly one Idempotency-Key header, not several")]
    Repeated,
    /// The key is empty.
    #[error("the Idempotency-Key header is empty; send a unique value such as a UUID")]
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] bytes.
    #[error("the Idempotency-Key is {0} bytes long; at most 255 are accepted")]
    TooLong(usize),
    /// The key has a byte outside visible ASCII.
    #[error(
        "the Idempotency-Key may only contain visible ASCII characters (no spaces or control characters); found byte 0x{0:02x}"
    )]
    InvalidByte(u8),
    /// A quoted key is not a well-formed structured-field string.
    #[error("the quoted Idempotency-Key is not a valid string: {0}")]
    BadQuoting(&'static str),
}

/// The key the client sent, if any: `Ok(None)` when there is no header.
///
/// Both forms are accepted: a bare token (`Idempotency-Key: abc-123`) and the
/// draft's structured-field string (`Idempotency-Key: "abc-123"`).
///
/// # Errors
///
/// [`KeyError`] for a repeated, empty, oversized or otherwise malformed key.
pub fn parse_key(headers: &HeaderMap) -> Result<Option<String>, KeyError> {
    Ok(parse_key_value(headers)?.map(|key| key_str(&key).to_owned()))
}

/// [`parse_key`], as a header value: a bare key is the header's own value
/// (shared, not copied), a quoted one its unescaped content.
pub(crate) fn parse_key_value(headers: &HeaderMap) -> Result<Option<HeaderValue>, KeyError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    let raw = trim_ows(value.as_bytes());
    let unquoted;
    let key = match raw {
        [b'"', ..] => {
            unquoted = unquote(raw)?;
            &unquoted[..]
        }
        _ => raw,
    };
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong(key.len()));
    }
    if let Some(&byte) = key.iter().find(|b| !(0x21..=0x7e).contains(*b)) {
        return Err(KeyError::InvalidByte(byte));
    }
    if key.len() == value.len() {
        return Ok(Some(value.clone()));
    }
    // Visible ASCII is always a valid header value.
    HeaderValue::from_bytes(key)
        .map(Some)
        .map_err(|_| KeyError::InvalidByte(0))
}

/// A key [`parse_key_value`] accepted, as text: it is visible ASCII.
/// A secret shown in a log line (an `Idempotency-Key`, a storage key) as
/// the first 12 hex digits of its SHA-256, after `sha256:`.
///
/// A raw key is the only secret an anonymous caller has, and a storage key
/// is enough to inspect or evict a record: neither belongs in a log that
/// many people read. The digest still tells two keys apart, and finds a
/// key one already holds (`printf %s "$KEY" | sha256sum | cut -c1-12`).
/// The raw values are never logged, at any level.
pub(crate) struct LogDigest<'a>(pub(crate) &'a [u8]);

impl std::fmt::Display for LogDigest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(self.0);
        f.write_str("sha256:")?;
        f.write_str(&hex::encode(&digest[..6]))
    }
}

pub(crate) fn key_str(key: &HeaderValue) -> &str {
    key.to_str().unwrap_or_default()
}

fn trim_ows(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// An RFC 8941 sf-string: `"` ... `"`, where only `\"` and `\\` are escapes.
fn unquote(raw: &[u8]) -> Result<Vec<u8>, KeyError> {
    let inner = raw
        .strip_prefix(b"\"")
        .and_then(|r| r.strip_suffix(b"\""))
        .ok_or(KeyError::BadQuoting("missing closing quote"))?;
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(escaped),
                _ => return Err(KeyError::BadQuoting("only \\\" and \\\\ may be escaped")),
            },
            b'"' => return Err(KeyError::BadQuoting("unescaped quote inside the string")),
            _ => out.push(b),
        }
    }
    Ok(out)
}

/// A SHA-256 over length-prefixed parts, so that no two different tuples of
/// parts hash the same input by concatenation (`("ab", "c")` vs `("a", "bc")`).
pub(crate) fn hash_parts(domain: &str, parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in std::iter::once(domain.as_bytes()).chain(parts.iter().copied()) {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// The storage key for a key sent to `method path_and_query` by `scope`:
/// versioned, and never the raw key, so a client cannot pick what the store's
/// key looks like.
///
/// The key covers the path, not the query, and the path in its normal form
/// (see [`canonical_target`]): a retry that adds `?attempt=2` or spells the
/// path with other percent-escapes finds the first attempt's record, and
/// the [`fingerprint`], which covers the query, tells whether it is the same
/// request (replay) or not (422). The same key on another path is a key of
/// its own.
///
/// ```
/// use autumn_idempotency::key::storage_key;
///
/// let first = storage_key("POST", "/orders", b"", "k");
/// assert_eq!(first, storage_key("POST", "/orders?attempt=2", b"", "k"));
/// assert_eq!(first, storage_key("POST", "/%6Frders", b"", "k"));
/// assert_ne!(first, storage_key("POST", "/refunds", b"", "k"));
/// ```
pub fn storage_key(method: &str, path_and_query: &str, scope: &[u8], key: &str) -> String {
    let target = canonical_target(path_and_query);
    let path = target.split_once('?').map_or(&*target, |(path, _)| path);
    let digest = hash_parts(
        "autumn.idempotency.v1",
        &[method.as_bytes(), path.as_bytes(), scope, key.as_bytes()],
    );
    prefixed_hex("idem:v1:", &digest)
}

/// A request target (`path?query`) in the form the storage key and the
/// fingerprint hash: percent-escapes of characters that need none (letters,
/// digits, `-`, `.`, `_`, `~`) decoded, the hex digits of the others in
/// upper case, as RFC 3986 (6.2.2) normalizes a URI; the query kept as sent.
/// A target already in that form (almost every one) is returned as it is,
/// so keys recorded before the normal form was taken stay the same.
///
/// ```
/// use autumn_idempotency::key::canonical_target;
///
/// assert_eq!(canonical_target("/caf%c3%a9/%7Eme?q=%41"), "/caf%C3%A9/~me?q=%41");
/// assert_eq!(canonical_target("/orders?attempt=2"), "/orders?attempt=2");
/// ```
pub fn canonical_target(path_and_query: &str) -> std::borrow::Cow<'_, str> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    };
    if !path.contains('%') {
        return std::borrow::Cow::Borrowed(path_and_query);
    }
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path_and_query.len());
    let mut at = 0;
    while at < bytes.len() {
        let escape = (bytes[at] == b'%')
            .then(|| bytes.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escape {
            Some(byte)
                if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') =>
            {
                out.push(char::from(byte));
                at += 3;
            }
            Some(byte) => {
                // Writing to a String cannot fail.
                let _ = write!(out, "%{byte:02X}");
                at += 3;
            }
            None => {
                // Not an escape: the byte as it is (a path is ASCII; a
                // stray `%` stays).
                out.push(char::from(bytes[at]));
                at += 1;
            }
        }
    }
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    std::borrow::Cow::Owned(out)
}

/// `prefix` followed by `digest` in lowercase hex, in one allocation.
pub(crate) fn prefixed_hex(prefix: &str, digest: &[u8; 32]) -> String {
    let mut hex = [0u8; 64];
    // A 32-byte digest always fits 64 hex digits.
    let _fits = hex::encode_to_slice(digest, &mut hex).is_ok();
    let mut out = String::with_capacity(prefix.len() + hex.len());
    out.push_str(prefix);
    out.push_str(std::str::from_utf8(&hex).unwrap_or_default());
    out
}

/// The fingerprint a replay must match: method, path and query (in the
/// [normal form](canonical_target)), content type and body.
pub fn fingerprint(
    method: &str,
    path_and_query: &str,
    content_type: &[u8],
    body: &[u8],
) -> Vec<u8> {
    fingerprint_digest(method, path_and_query, content_type, body).to_vec()
}

/// [`fingerprint`], on the stack.
pub(crate) fn fingerprint_digest(
    method: &str,
    path_and_query: &str,
    content_type: &[u8],
    body: &[u8],
) -> [u8; 32] {
    hash_parts(
        "autumn.fingerprint.v1",
        &[
            method.as_bytes(),
            canonical_target(path_and_query).as_bytes(),
            content_type,
            body,
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_keyed_or_form_mutation_may_be_guarded() {
        use http::Method;
        use http::header::{CONTENT_TYPE, HOST};
        let headers = |pairs: &[(HeaderName, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(name.clone(), HeaderValue::from_static(value));
            }
            headers
        };
        let json = headers(&[(HOST, "example.com"), (CONTENT_TYPE, "application/json")]);
        let keyed = headers(&[(CONTENT_TYPE, "application/json"), (IDEMPOTENCY_KEY, "k")]);
        let form = headers(&[(CONTENT_TYPE, " Application/X-WWW-Form-UrlEncoded")]);
        let multipart = headers(&[(CONTENT_TYPE, "multipart/form-data; boundary=x")]);
        // A second Content-Type that may be a form counts too.
        let second = headers(&[
            (CONTENT_TYPE, "text/plain"),
            (CONTENT_TYPE, "application/x-www-form-urlencoded"),
        ]);
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(!may_be_guarded(&method, &json), "{method} JSON");
            assert!(!may_be_guarded(&method, &HeaderMap::new()), "{method} bare");
            for guarded in [&keyed, &form, &multipart, &second] {
                assert!(may_be_guarded(&method, guarded), "{method} {guarded:?}");
            }
        }
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            for request in [&json, &keyed, &form, &multipart] {
                assert!(!may_be_guarded(&method, request), "{method} {request:?}");
            }
        }
    }

    fn parse(values: &[&[u8]]) -> Result<Option<String>, KeyError> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(
                IDEMPOTENCY_KEY,
                HeaderValue::from_bytes(v).expect("valid header value"),
            );
        }
        parse_key(&headers)
    }

    #[test]
    fn bare_and_quoted_keys_read_the_same() {
        assert_eq!(parse(&[b"abc-123"]), Ok(Some("abc-123".into())));
        assert_eq!(parse(&[b"\"abc-123\""]), Ok(Some("abc-123".into())));
        assert_eq!(parse(&[b"  \"a\\\"b\\\\c\" "]), Ok(Some("a\"b\\c".into())));
        assert_eq!(parse(&[]), Ok(None));
    }

    #[test]
    fn malformed_keys_are_refused_with_the_reason() {
        assert_eq!(parse(&[b""]), Err(KeyError::Empty));
        assert_eq!(parse(&[b"\"\""]), Err(KeyError::Empty));
        assert_eq!(parse(&[b"a", b"b"]), Err(KeyError::Repeated));
        assert_eq!(parse(&[&[b'k'; 256]]), Err(KeyError::TooLong(256)));
        assert_eq!(
            parse(&[&[b'k'; 255]]).map(|k| k.map(|k| k.len())),
            Ok(Some(255))
        );
        assert_eq!(parse(&[b"a b"]), Err(KeyError::InvalidByte(b' ')));
        assert_eq!(parse(&[b"caf\xc3\xa9"]), Err(KeyError::InvalidByte(0xc3)));
        assert!(matches!(parse(&[b"\"abc"]), Err(KeyError::BadQuoting(_))));
        assert!(matches!(
            parse(&[b"\"a\\nb\""]),
            Err(KeyError::BadQuoting(_))
        ));
        assert!(matches!(
            parse(&[b"\"a\"b\""]),
            Err(KeyError::BadQuoting(_))
        ));
    }

    #[test]
    fn storage_keys_do_not_collide_by_concatenation() {
        let a = storage_key("POST", "/ab", b"", "c");
        let b = storage_key("POST", "/a", b"", "bc");
        let c = storage_key("POST", "/a", b"b", "c");
        assert_ne!(a, b);
        assert_ne!(b, c);
        assert_eq!(a, storage_key("POST", "/ab", b"", "c"));
        assert!(!a.contains('c') || a.starts_with("idem:v1:"));
        assert_eq!(a.len(), "idem:v1:".len() + 64);
    }

    #[test]
    fn fingerprint_covers_content_type_and_body() {
        let base = fingerprint("POST", "/o", b"application/json", b"{}");
        assert_ne!(base, fingerprint("POST", "/o", b"text/plain", b"{}"));
        assert_ne!(base, fingerprint("POST", "/o", b"application/json", b"{ }"));
        assert_ne!(base, fingerprint("PUT", "/o", b"application/json", b"{}"));
        assert_eq!(base, fingerprint("POST", "/o", b"application/json", b"{}"));
    }
}
