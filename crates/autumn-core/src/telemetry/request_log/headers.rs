//! [`ResponseHeaders`]: headers every response gets unless it sets its own
//! (the security headers), put on by the request log as the response
//! leaves.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

/// Headers every response gets unless it sets its own (a handler that
/// needs another policy for one page sets it, and that one stays).
#[derive(Debug, Clone)]
pub(crate) struct ResponseHeaders(Arc<[(HeaderName, HeaderValue)]>);

impl ResponseHeaders {
    pub(crate) fn new(headers: Vec<(HeaderName, HeaderValue)>) -> Self {
        Self(headers.into())
    }

    /// Adds each header `map` lacks, and room for `extra` more after them.
    pub(super) fn apply(&self, map: &mut HeaderMap, extra: usize) {
        reserve(map, self.0.len() + extra);
        for (name, value) in self.0.iter() {
            map.entry(name).or_insert_with(|| value.clone());
        }
    }
}

/// Room for `additional` more headers in `map`, growing it at most once.
/// `HeaderMap::reserve` rebuilds the table even when it already has the
/// room, so ask only when it does not.
pub(super) fn reserve(map: &mut HeaderMap, additional: usize) {
    // Entries hold one name each; further values of a name live apart.
    if map.capacity().saturating_sub(map.keys_len()) < additional {
        map.reserve(additional);
    }
}

#[cfg(test)]
mod tests {
    use super::super::id::REQUEST_ID;
    use super::*;

    #[test]
    fn response_headers_go_on_where_missing_whatever_the_map_holds() {
        let headers = ResponseHeaders::new(vec![
            (
                http::header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                http::header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'self'"),
            ),
        ]);
        // More values than the map has entries: many cookies under one name.
        let mut map = HeaderMap::new();
        for n in 0..20 {
            map.append(http::header::SET_COOKIE, HeaderValue::from(n));
        }
        map.insert(
            http::header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'"),
        );
        assert!(map.len() > map.capacity());
        headers.apply(&mut map, 1);
        map.insert(REQUEST_ID, HeaderValue::from_static("id"));
        assert_eq!(map["x-content-type-options"], "nosniff");
        // The response's own policy stays.
        assert_eq!(map["content-security-policy"], "default-src 'none'");
        assert_eq!(map.get_all(http::header::SET_COOKIE).iter().count(), 20);
        assert_eq!(map[REQUEST_ID], "id");
    }
}
