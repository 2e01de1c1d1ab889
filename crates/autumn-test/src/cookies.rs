//! A small cookie jar: what a browser would send back to one site.

use std::collections::BTreeMap;

use http::HeaderMap;
use http::header::SET_COOKIE;

#[derive(Debug, Default)]
pub(crate) struct CookieJar {
    cookies: BTreeMap<String, String>,
}

impl CookieJar {
    /// Takes in every `Set-Cookie` of a response; a cookie set to expire
    /// (`Max-Age=0` or less) is removed.
    pub(crate) fn store(&mut self, headers: &HeaderMap) {
        for value in headers.get_all(SET_COOKIE) {
            let Ok(value) = value.to_str() else { continue };
            let mut parts = value.split(';');
            let Some((name, cookie)) = parts.next().and_then(|p| p.trim().split_once('=')) else {
                continue;
            };
            let expired = parts.any(|attribute| {
                let attribute = attribute.trim().to_ascii_lowercase();
                attribute
                    .strip_prefix("max-age=")
                    .and_then(|age| age.parse::<i64>().ok())
                    .is_some_and(|age| age <= 0)
            });
            if expired {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), cookie.to_owned());
            }
        }
    }

    /// The `Cookie` header to send, if any cookie is kept.
    pub(crate) fn header(&self) -> Option<String> {
        (!self.cookies.is_empty()).then(|| {
            self.cookies
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.cookies.get(name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn keeps_sets_and_forgets_expired_cookies() {
        let mut jar = CookieJar::default();
        let mut headers = HeaderMap::new();
        headers.append(
            SET_COOKIE,
            HeaderValue::from_static("a=1; Path=/; HttpOnly"),
        );
        headers.append(SET_COOKIE, HeaderValue::from_static("b=2"));
        jar.store(&headers);
        assert_eq!(jar.header().as_deref(), Some("a=1; b=2"));

        let mut headers = HeaderMap::new();
        headers.append(SET_COOKIE, HeaderValue::from_static("a=; Max-Age=0"));
        jar.store(&headers);
        assert_eq!(jar.header().as_deref(), Some("b=2"));
        assert_eq!(jar.get("a"), None);
    }
}
