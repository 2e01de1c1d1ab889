//! The session cookie's attributes, the `Set-Cookie` values made from
//! them, and the cookie read back from a request.

use std::time::Duration;

use http::{HeaderMap, HeaderValue, header};

use super::id::SessionId;
pub use crate::config::SameSite;

/// How the session cookie is written.
#[derive(Debug, Clone)]
pub(crate) struct CookieSettings {
    pub(crate) name: String,
    pub(crate) ttl: Duration,
    pub(crate) same_site: SameSite,
    pub(crate) secure: bool,
}

impl CookieSettings {
    /// `Set-Cookie` for `id`, lasting the session's TTL.
    pub(crate) fn set(&self, id: &SessionId) -> Option<HeaderValue> {
        self.header(id.as_str(), self.ttl.as_secs())
    }

    /// `Set-Cookie` removing the cookie.
    pub(crate) fn remove(&self) -> Option<HeaderValue> {
        self.header("", 0)
    }

    fn header(&self, value: &str, max_age: u64) -> Option<HeaderValue> {
        // Pushed piece by piece: `format!` cost more than the rest of
        // giving a visitor a session.
        let mut digits = itoa::Buffer::new();
        let max_age = digits.format(max_age);
        let mut cookie = String::with_capacity(self.name.len() + value.len() + 72);
        for part in [
            self.name.as_str(),
            "=",
            value,
            "; Path=/; HttpOnly; SameSite=",
            self.same_site.as_str(),
            "; Max-Age=",
            max_age,
        ] {
            cookie.push_str(part);
        }
        if self.secure {
            cookie.push_str("; Secure");
        }
        // The name was checked at startup and ids are visible ASCII.
        HeaderValue::try_from(cookie).ok()
    }
}

/// The value of cookie `name`, from any `Cookie` header, as bytes.
///
/// Parsed byte-wise: one cookie whose value is not UTF-8 (another app on the
/// same domain can set anything) must not hide the session cookie beside it,
/// which would move a signed-in user into the anonymous scope.
pub(crate) fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h [u8]> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|value| value.as_bytes().split(|byte| *byte == b';'))
        .filter_map(|pair| {
            let pair = pair.trim_ascii();
            let equals = pair.iter().position(|byte| *byte == b'=')?;
            Some((&pair[..equals], &pair[equals + 1..]))
        })
        .find(|(key, _)| *key == name.as_bytes())
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_carry_the_safe_defaults() {
        let settings = CookieSettings {
            name: "autumn_session".into(),
            ttl: Duration::from_secs(60),
            same_site: SameSite::Lax,
            secure: true,
        };
        let id = SessionId::from_cookie(b"abc").expect("an id");
        assert_eq!(
            settings.set(&id).expect("a header"),
            "autumn_session=abc; Path=/; HttpOnly; SameSite=Lax; Max-Age=60; Secure"
        );
        assert_eq!(
            settings.remove().expect("a header"),
            "autumn_session=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0; Secure"
        );
    }
}
