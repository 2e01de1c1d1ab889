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
    /// How long a session may live at most from its creation or last
    /// sign-in, however active; `None` for no limit.
    pub(crate) absolute_ttl: Option<Duration>,
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

/// What a request's `Cookie` headers hold under one cookie name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SentCookie<'h> {
    /// No cookie of that name.
    Absent,
    /// One value, sent once or repeated alike.
    One(&'h [u8]),
    /// Two or more different values. A browser sends every cookie whose
    /// domain and path match, so under a name without the `__Host-` prefix
    /// (or in a browser that ignores it) a sibling subdomain or a
    /// plain-HTTP page can plant one beside ours, and with a longer `Path`
    /// it comes first: which one is ours cannot be told, so neither is
    /// trusted.
    Conflicting,
}

impl<'h> SentCookie<'h> {
    /// Every value of cookie `name`, from every `Cookie` header, compared
    /// as bytes.
    ///
    /// Parsed byte-wise: one cookie whose value is not UTF-8 (another app on
    /// the same domain can set anything) must not hide the session cookie
    /// beside it, which would move a signed-in user into the anonymous
    /// scope. Only the exact name counts: beside `__Host-autumn_session`, a
    /// plain `autumn_session` is someone else's cookie.
    pub(crate) fn read(headers: &'h HeaderMap, name: &str) -> Self {
        let values = headers
            .get_all(header::COOKIE)
            .iter()
            .flat_map(|value| value.as_bytes().split(|byte| *byte == b';'))
            .filter_map(|pair| {
                let pair = pair.trim_ascii();
                let equals = pair.iter().position(|byte| *byte == b'=')?;
                (&pair[..equals] == name.as_bytes()).then(|| &pair[equals + 1..])
            });
        let mut found = Self::Absent;
        for value in values {
            match found {
                Self::One(first) if first != value => return Self::Conflicting,
                _ => found = Self::One(value),
            }
        }
        found
    }
}

/// The value of the session cookie `name`, as bytes; `None` when the
/// request has none, or has two different values under `name` (logged at
/// `warn`, without the values: they are session ids).
pub(crate) fn session_cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h [u8]> {
    match SentCookie::read(headers, name) {
        SentCookie::Absent => None,
        SentCookie::One(value) => Some(value),
        SentCookie::Conflicting => {
            tracing::warn!(
                cookie = name,
                "the request carries two different session cookies; neither is trusted, \
                 so it has no session (one of them may have been planted by another site)"
            );
            None
        }
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
            absolute_ttl: None,
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

    fn cookies(values: &[&'static [u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(
                header::COOKIE,
                HeaderValue::from_bytes(value).expect("visible bytes are a valid header value"),
            );
        }
        headers
    }

    const NAME: &str = "__Host-autumn_session";

    #[test]
    fn one_value_is_read_wherever_it_sits() {
        for headers in [
            cookies(&[b"__Host-autumn_session=abc"]),
            cookies(&[b"theme=dark; __Host-autumn_session=abc; lang=en"]),
            cookies(&[b"theme=dark", b" __Host-autumn_session=abc "]),
        ] {
            assert_eq!(SentCookie::read(&headers, NAME), SentCookie::One(b"abc"));
        }
        assert_eq!(
            SentCookie::read(&cookies(&[b"theme=dark"]), NAME),
            SentCookie::Absent
        );
        assert_eq!(
            SentCookie::read(&HeaderMap::new(), NAME),
            SentCookie::Absent
        );
    }

    #[test]
    fn a_plain_name_beside_the_prefixed_one_does_not_count() {
        // Planted first, as a longer Path makes the browser send it.
        let headers = cookies(&[b"autumn_session=planted; __Host-autumn_session=ours"]);
        assert_eq!(SentCookie::read(&headers, NAME), SentCookie::One(b"ours"));
        assert_eq!(session_cookie(&headers, NAME), Some(&b"ours"[..]));
        let only_planted = cookies(&[b"autumn_session=planted; __host-autumn_session=x"]);
        assert_eq!(
            SentCookie::read(&only_planted, NAME),
            SentCookie::Absent,
            "names are compared exactly"
        );
    }

    #[test]
    fn two_different_values_under_the_name_trust_neither() {
        for headers in [
            cookies(&[b"__Host-autumn_session=planted; __Host-autumn_session=ours"]),
            cookies(&[
                b"__Host-autumn_session=ours",
                b"__Host-autumn_session=planted",
            ]),
            cookies(&[
                b"__Host-autumn_session=a; x=1; __Host-autumn_session=a; __Host-autumn_session=b",
            ]),
        ] {
            assert_eq!(SentCookie::read(&headers, NAME), SentCookie::Conflicting);
            assert_eq!(session_cookie(&headers, NAME), None);
        }
        // The same value twice is one cookie.
        let repeated = cookies(&[b"__Host-autumn_session=ours; __Host-autumn_session=ours"]);
        assert_eq!(SentCookie::read(&repeated, NAME), SentCookie::One(b"ours"));
    }

    #[test]
    fn values_are_compared_as_bytes() {
        let headers = cookies(&[b"tracker=caf\xe9; __Host-autumn_session=\xff\xfe"]);
        assert_eq!(
            SentCookie::read(&headers, NAME),
            SentCookie::One(b"\xff\xfe")
        );
        let differing = cookies(&[b"__Host-autumn_session=\xff; __Host-autumn_session=\xfe"]);
        assert_eq!(SentCookie::read(&differing, NAME), SentCookie::Conflicting);
    }
}
