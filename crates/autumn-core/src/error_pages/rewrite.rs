//! Rewriting an error response for the client that asked: a problem
//! document for an API client, the HTML page for a browser. The service
//! notes what was asked (`Asked`), the future calls [`rewrite`] with the
//! layer's [`Settings`].

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};

use super::render::{Described, ErrorInfo, Pages, describe, prefers_html};

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The largest error body buffered to be rewritten by default: 64 KiB.
/// Every body Autumn and axum produce for an error is far smaller.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

/// What an [`ErrorPagesLayer`](super::ErrorPagesLayer) was built with.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) pages: Pages,
    pub(crate) max_body_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            pages: Pages::default(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// What the request asked for, kept for the way out.
pub(super) struct Asked {
    /// The request's `Accept`: parsed only when there is an error to
    /// answer, so a successful request pays nothing for it.
    accept: Accept,
    method: Method,
    uri: http::Uri,
}

/// Every `Accept` value of a request: almost always one or none, kept
/// without an allocation; the rare several in a `Vec`.
enum Accept {
    One(Option<HeaderValue>),
    Several(Vec<HeaderValue>),
}

impl Accept {
    /// Clones that share the request's bytes: no copy.
    fn of(headers: &HeaderMap) -> Self {
        let mut values = headers.get_all(header::ACCEPT).iter();
        match (values.next(), values.next()) {
            (first, None) => Self::One(first.cloned()),
            _ => Self::Several(headers.get_all(header::ACCEPT).iter().cloned().collect()),
        }
    }

    fn values(&self) -> &[HeaderValue] {
        match self {
            Self::One(one) => one.as_slice(),
            Self::Several(several) => several,
        }
    }
}

impl Asked {
    /// Clones that share the request's bytes: no copy per request.
    pub(super) fn of<B>(request: &Request<B>) -> Self {
        Self {
            accept: Accept::of(request.headers()),
            method: request.method().clone(),
            uri: request.uri().clone(),
        }
    }

    fn html(&self) -> bool {
        let mut headers = HeaderMap::new();
        for accept in self.accept.values() {
            headers.append(header::ACCEPT, accept.clone());
        }
        prefers_html(&headers)
    }
}

/// What an error body is, as far as rewriting it goes.
#[derive(PartialEq, Eq)]
enum Kind {
    Problem,
    Text,
}

pub(super) async fn rewrite<B>(
    settings: &Settings,
    asked: &Asked,
    response: Response<B>,
) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let status = response.status();
    if status.as_u16() < 400 {
        return response.map(Body::new);
    }
    let empty = response.body().size_hint().exact() == Some(0);
    let kind = match media_type(response.headers()).as_deref() {
        Some("application/problem+json") => Kind::Problem,
        Some("text/plain") => Kind::Text,
        None if empty => Kind::Text,
        // The app's own page or JSON: its business.
        _ => return response.map(Body::new),
    };
    let fits = response
        .body()
        .size_hint()
        .upper()
        .is_some_and(|upper| upper <= settings.max_body_bytes as u64);
    let html = asked.html();
    if (kind == Kind::Problem && !html) || !fits {
        let mut response = response.map(Body::new);
        vary_on_accept(response.headers_mut());
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // A body that fails while read is lost either way: the page for its
    // status is the most that can be said.
    let bytes = axum::body::to_bytes(Body::new(body), settings.max_body_bytes)
        .await
        .unwrap_or_default();
    for name in [
        header::CONTENT_TYPE,
        header::CONTENT_LENGTH,
        header::CONTENT_ENCODING,
    ] {
        parts.headers.remove(name);
    }
    vary_on_accept(&mut parts.headers);
    let text = || String::from_utf8_lossy(&bytes);
    let body = match kind {
        // A problem document reaches this point only for a browser: for an
        // API client it passed as it is, above.
        Kind::Text if !html => {
            let described = Described::new(status, &asked.method, asked.uri.path(), &text());
            // The one renderer: its body and type; the headers the response
            // already had stay.
            let (problem, body) = autumn_base::render_problem(&described).into_parts();
            if let Some(content_type) = problem.headers.get(header::CONTENT_TYPE) {
                parts
                    .headers
                    .insert(header::CONTENT_TYPE, content_type.clone());
            }
            body
        }
        Kind::Text => {
            let info = describe(status, &asked.method, asked.uri.path(), &text());
            html_page(settings, &mut parts.headers, &info)
        }
        Kind::Problem => {
            let info = from_problem(status, &bytes, asked);
            html_page(settings, &mut parts.headers, &info)
        }
    };
    Response::from_parts(parts, body)
}

/// The app's page for `info`, as the body of a response with `headers`.
fn html_page(settings: &Settings, headers: &mut HeaderMap, info: &ErrorInfo) -> Body {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    Body::from(settings.pages.render(info))
}

/// The page's view of a problem document; a document that does not parse
/// gets the sentence for its status.
fn from_problem(status: StatusCode, bytes: &[u8], asked: &Asked) -> ErrorInfo {
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice(bytes) else {
        return describe(status, &asked.method, asked.uri.path(), "");
    };
    let text = |name: &str| fields.get(name).and_then(serde_json::Value::as_str);
    let mut info = match text("detail") {
        Some(detail) => ErrorInfo::new(status, detail).for_request(&asked.method, asked.uri.path()),
        None => describe(status, &asked.method, asked.uri.path(), ""),
    };
    if let Some(title) = text("title") {
        info = info.with_title(title);
    }
    if let Some(code) = text("code") {
        info = info.with_code(code);
    }
    info
}

/// The `Content-Type`'s media type, lowercased, without parameters.
fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next().unwrap_or(value).trim();
    Some(essence.to_ascii_lowercase())
}

/// Caches must not give a browser's page to an API client or back.
fn vary_on_accept(headers: &mut HeaderMap) {
    let varies = headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|name| name.trim() == "*" || name.trim().eq_ignore_ascii_case("accept"));
    if !varies {
        headers.append(header::VARY, HeaderValue::from_static("accept"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(accepts: &[&'static str]) -> Asked {
        let mut headers = HeaderMap::new();
        for accept in accepts {
            headers.append(header::ACCEPT, HeaderValue::from_static(accept));
        }
        Asked {
            accept: Accept::of(&headers),
            method: Method::GET,
            uri: http::Uri::from_static("/"),
        }
    }

    #[test]
    fn every_accept_value_counts_however_many_were_sent() {
        assert!(!asked(&[]).html());
        assert!(asked(&["text/html"]).html());
        assert!(!asked(&["application/json"]).html());
        // A browser's preference in a second header is not lost.
        assert!(asked(&["image/webp", "text/html"]).html());
        assert_eq!(asked(&["a/b", "c/d", "e/f"]).accept.values().len(), 3);
    }
}
