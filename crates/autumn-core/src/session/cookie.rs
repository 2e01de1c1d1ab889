//! The session cookie's attributes, and the `Set-Cookie` values made from
//! them.

use std::time::Duration;

use http::HeaderValue;

use super::id::SessionId;

/// The `SameSite` attribute of the session cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SameSite {
    /// Sent on same-site requests and top-level cross-site navigations
    /// (following a link): the default, and what sign-in flows expect.
    #[default]
    Lax,
    /// Sent on same-site requests only.
    Strict,
    /// Sent on every request; browsers require `Secure` with it.
    None,
}

impl SameSite {
    /// The attribute's value, as written in the cookie.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lax => "Lax",
            Self::Strict => "Strict",
            Self::None => "None",
        }
    }
}

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
