//! [`AdminToken`]: the bearer token an operator endpoint on the actuator
//! asks for (`[idempotency.admin] token`, `[jobs.admin] token`), one check
//! for all of them.

use std::sync::Arc;

use axum::http::{HeaderMap, header};
use sha2::{Digest as _, Sha256};

/// A configured token, kept as its SHA-256: requests are compared against
/// the digest, in constant time, so the time a comparison takes says
/// nothing of the token (nor of its length).
#[derive(Clone)]
pub(crate) struct AdminToken(Arc<[u8]>);

impl AdminToken {
    pub(crate) fn new(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).to_vec().into())
    }

    /// Whether `headers` carry `Authorization: Bearer TOKEN`.
    pub(crate) fn admits(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(|sent| Sha256::digest(sent.as_bytes()))
            .is_some_and(|sent| constant_time_eq(sent.as_slice(), &self.0))
    }
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths
/// only (both are SHA-256 digests here).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            authorization.parse().expect("a header value"),
        );
        headers
    }

    #[test]
    fn only_the_bearer_token_itself_is_admitted() {
        let token = AdminToken::new("0123456789abcdef");
        assert!(token.admits(&with("Bearer 0123456789abcdef")));
        for refused in [
            "Bearer 0123456789abcdeF",
            "Bearer 0123456789abcdef ",
            "Bearer 0123456789abcde",
            "bearer 0123456789abcdef",
            "Basic 0123456789abcdef",
            "0123456789abcdef",
        ] {
            assert!(!token.admits(&with(refused)), "{refused}");
        }
        assert!(!token.admits(&HeaderMap::new()));
    }
}
