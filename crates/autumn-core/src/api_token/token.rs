//! The token itself: how it is made, recognised, hashed and compared.
//!
//! A token reads `atk_<prefix>_<secret>`: 64 random bits of public prefix
//! (the lookup id, safe to log) and 192 random bits of secret, both hex. Only
//! a SHA-256 hash of the whole token is stored.

use http::{HeaderMap, header};
use sha2::{Digest as _, Sha256};

/// What every token starts with, so a leaked one is recognisable.
pub(crate) const TOKEN_START: &str = "atk_";
const PREFIX_BYTES: usize = 8;
const SECRET_BYTES: usize = 24;

/// A new token, its prefix and its hash.
pub(crate) struct Generated {
    pub(crate) token: String,
    pub(crate) prefix: String,
    pub(crate) hash: [u8; 32],
}

/// A fresh token from the operating system's secure random source.
pub(crate) fn generate() -> Result<Generated, getrandom::Error> {
    let mut bytes = [0u8; PREFIX_BYTES + SECRET_BYTES];
    getrandom::fill(&mut bytes)?;
    let (prefix, secret) = bytes.split_at(PREFIX_BYTES);
    let prefix = hex::encode(prefix);
    let token = format!("{TOKEN_START}{prefix}_{}", hex::encode(secret));
    let hash = hash(&token);
    Ok(Generated {
        token,
        prefix,
        hash,
    })
}

/// The stored form of `token`: a domain-separated SHA-256.
pub(crate) fn hash(token: &str) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update(b"autumn.api_token.v1\0");
    digest.update(token.as_bytes());
    digest.finalize().into()
}

/// The prefix of a well-formed token; `None` for anything else, which is
/// refused without asking the store.
pub(crate) fn prefix_of(token: &str) -> Option<&str> {
    let (prefix, secret) = token.strip_prefix(TOKEN_START)?.split_once('_')?;
    let hex = |part: &str, bytes: usize| {
        part.len() == bytes * 2 && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    (hex(prefix, PREFIX_BYTES) && hex(secret, SECRET_BYTES)).then_some(prefix)
}

/// Compares two hashes in time that does not depend on where they differ,
/// so response timing tells an attacker nothing about a stored hash.
pub(crate) fn hashes_match(stored: &[u8], presented: &[u8]) -> bool {
    if stored.len() != presented.len() {
        return false;
    }
    let difference = stored
        .iter()
        .zip(presented)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(difference) == 0
}

/// What the `Authorization` header holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Presented<'h> {
    /// No header, or another scheme than `Bearer`.
    Nothing,
    /// A bearer credential (not yet checked).
    Bearer(&'h str),
    /// A `Bearer` header that cannot hold a token: empty, not ASCII, or
    /// sent more than once.
    Malformed,
}

/// The bearer credential in `headers`.
pub(crate) fn presented(headers: &HeaderMap) -> Presented<'_> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Presented::Nothing;
    };
    let bytes = value.as_bytes();
    let is_bearer = bytes.len() >= 6 && bytes[..6].eq_ignore_ascii_case(b"bearer");
    if !is_bearer || bytes.get(6).is_some_and(|b| *b != b' ') {
        return Presented::Nothing;
    }
    if values.next().is_some() {
        return Presented::Malformed;
    }
    match value.to_str().map(|v| v[6..].trim_matches(' ')) {
        Ok(token) if !token.is_empty() => Presented::Bearer(token),
        _ => Presented::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn tokens_are_long_random_and_recognised() {
        let a = generate().expect("randomness");
        let b = generate().expect("randomness");
        assert_ne!(a.token, b.token);
        assert_eq!(
            a.token.len(),
            4 + 16 + 1 + 48,
            "192 secret bits, 64 prefix bits"
        );
        assert_eq!(prefix_of(&a.token), Some(a.prefix.as_str()));
        assert_eq!(a.hash, hash(&a.token));
        assert!(!hashes_match(&a.hash, &b.hash));
        assert!(hashes_match(&a.hash, &hash(&a.token)));
        for bad in [
            "",
            "atk_",
            "atk_zz_yy",
            &a.token[1..],
            &a.token.to_uppercase(),
        ] {
            assert_eq!(prefix_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_others_are_not_tokens() {
        let mut headers = HeaderMap::new();
        assert_eq!(presented(&headers), Presented::Nothing);
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  abc"),
        );
        assert_eq!(presented(&headers), Presented::Bearer("abc"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(presented(&headers), Presented::Nothing);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearerabc"));
        assert_eq!(presented(&headers), Presented::Nothing);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(presented(&headers), Presented::Malformed);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer a"));
        headers.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer b"));
        assert_eq!(presented(&headers), Presented::Malformed);
    }
}
