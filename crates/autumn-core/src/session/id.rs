//! [`SessionId`]: the random value a session cookie carries.

use sha2::{Digest, Sha256};

/// The most bytes a cookie value may have to be taken as a session id.
const MAX_COOKIE_ID_BYTES: usize = 128;

/// A session's id: what the cookie carries, and nothing else about the
/// session.
///
/// New ids are 160 bits from `rand`'s thread-local generator (ChaCha,
/// seeded and reseeded from the operating system), written as 40 hex digits. A cookie value the client sends is taken as an
/// id when it is 1 to 128 visible ASCII characters; whether a store knows it
/// is another matter (an id Autumn did not issue never becomes a stored
/// session: a session is always saved under an id Autumn made).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionId(String);

impl SessionId {
    /// A fresh random id.
    ///
    /// The bytes come from the thread's cryptographically secure generator
    /// (ChaCha12, seeded and regularly reseeded from the operating system),
    /// as submit tokens' do: not a system call for every new visitor.
    ///
    /// # Panics
    ///
    /// When the operating system has no secure random source to seed it
    /// from (a process could not serve sessions safely without one).
    #[must_use]
    pub fn generate() -> Self {
        let mut bytes = [0u8; 20];
        rand::fill(&mut bytes);
        let mut text = [0u8; 40];
        // 40 hex digits for 20 bytes: always fits.
        let _fits = hex::encode_to_slice(bytes, &mut text).is_ok();
        // Hex digits are ASCII: this never falls back.
        Self(String::from_utf8(text.to_vec()).unwrap_or_default())
    }

    /// The id a cookie value names, when it can be one.
    ///
    /// ```
    /// use autumn_core::session::SessionId;
    ///
    /// assert!(SessionId::from_cookie(b"3f2a").is_some());
    /// assert!(SessionId::from_cookie(b"").is_none());
    /// assert!(SessionId::from_cookie(b"has space").is_none());
    /// ```
    #[must_use]
    pub fn from_cookie(value: &[u8]) -> Option<Self> {
        let usable = !value.is_empty()
            && value.len() <= MAX_COOKIE_ID_BYTES
            && value.iter().all(|byte| byte.is_ascii_graphic());
        // Visible ASCII is UTF-8.
        usable
            .then(|| std::str::from_utf8(value).ok())
            .flatten()
            .map(|id| Self(id.to_owned()))
    }

    /// The id as the cookie carries it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name stores keep this session under: a hash of the id, so what a
    /// store holds (or logs) cannot be replayed as a cookie.
    ///
    /// ```
    /// use autumn_core::session::SessionId;
    ///
    /// let id = SessionId::generate();
    /// assert_eq!(id.storage_key().len(), 64);
    /// assert!(!id.storage_key().contains(id.as_str()));
    /// ```
    pub fn storage_key(&self) -> String {
        let mut hash = Sha256::new();
        hash.update(b"autumn.session.v1\0");
        hash.update(self.0.as_bytes());
        hex::encode(hash.finalize())
    }
}

impl std::fmt::Debug for SessionId {
    // The id signs its holder in: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionId(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_long_distinct_and_cookie_safe() {
        let a = SessionId::generate();
        let b = SessionId::generate();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 40);
        assert_eq!(
            SessionId::from_cookie(a.as_str().as_bytes()),
            Some(a.clone())
        );
        assert!(!format!("{a:?}").contains(a.as_str()));
    }

    #[test]
    fn oversized_or_binary_cookie_values_are_not_ids() {
        assert!(SessionId::from_cookie(&[b'a'; 129]).is_none());
        assert!(SessionId::from_cookie(&[b'a'; 128]).is_some());
        assert!(SessionId::from_cookie(&[0xff, b'a']).is_none());
    }
}
