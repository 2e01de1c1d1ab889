//! What an error says: its stable code and a sentence per status, whether
//! the client wants HTML, and the default HTML page.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use autumn_base::problem::{ProblemCode, ProblemDetails};
use http::{HeaderMap, Method, StatusCode, header};

use crate::codes;

/// One error as a page sees it: what the problem document says, and the
/// request it answers.
///
/// ```
/// use autumn_core::error_pages::ErrorInfo;
/// use http::StatusCode;
///
/// let info = ErrorInfo::new(StatusCode::NOT_FOUND, "there is nothing at /x").with_code("not_found");
/// assert_eq!(info.title(), "Not Found");
/// assert_eq!(info.code(), Some("not_found"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorInfo {
    status: StatusCode,
    title: String,
    detail: String,
    code: Option<String>,
    method: Method,
    path: String,
}

impl ErrorInfo {
    /// An error with this status and detail; the title is the status's
    /// reason phrase, the request `GET /` until the layer fills it in.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            status,
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            detail: detail.into(),
            code: None,
            method: Method::GET,
            path: "/".to_owned(),
        }
    }

    /// With a stable machine-readable code, e.g. `not_found`.
    #[must_use]
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// With another title than the reason phrase.
    #[must_use]
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = title.into();
        self
    }

    pub(crate) fn for_request(mut self, method: &Method, path: &str) -> Self {
        method.clone_into(&mut self.method);
        path.clone_into(&mut self.path);
        self
    }

    /// The response's status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The problem's title (the status's reason phrase, unless the problem
    /// document said otherwise).
    pub fn title(&self) -> &str {
        &self.title
    }

    /// What went wrong, in a sentence for the person reading it.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The stable machine-readable code, when the error has one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The request's method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The request's path (without the query).
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// Renders the HTML page of an error for a browser; Autumn's default page
/// is used where it answers `None`.
///
/// ```
/// use autumn_core::error_pages::{ErrorInfo, ErrorPageRenderer};
///
/// struct Plain;
///
/// impl ErrorPageRenderer for Plain {
///     fn render(&self, info: &ErrorInfo) -> Option<String> {
///         // Only server errors get the app's page.
///         info.status().is_server_error().then(|| "<h1>Sorry</h1>".to_owned())
///     }
/// }
/// assert!(Plain.render(&ErrorInfo::new(http::StatusCode::NOT_FOUND, "gone")).is_none());
/// ```
pub trait ErrorPageRenderer: Send + Sync + 'static {
    /// The page for `info`, as HTML (escape what you take from `info`), or
    /// `None` for the default page.
    fn render(&self, info: &ErrorInfo) -> Option<String>;
}

type PageFn = Arc<dyn Fn(&ErrorInfo) -> String + Send + Sync>;

/// The app's pages: one per status, then a renderer for any status, then
/// the default page.
#[derive(Clone, Default)]
pub(crate) struct Pages {
    by_status: HashMap<StatusCode, PageFn>,
    renderer: Option<Arc<dyn ErrorPageRenderer>>,
}

impl Pages {
    pub(crate) fn insert(&mut self, status: StatusCode, page: PageFn) {
        self.by_status.insert(status, page);
    }

    pub(crate) fn set_renderer(&mut self, renderer: Arc<dyn ErrorPageRenderer>) {
        self.renderer = Some(renderer);
    }

    pub(crate) fn render(&self, info: &ErrorInfo) -> String {
        if let Some(page) = self.by_status.get(&info.status) {
            return page(info);
        }
        self.renderer
            .as_ref()
            .and_then(|renderer| renderer.render(info))
            .unwrap_or_else(|| default_page(info))
    }
}

/// Autumn's page: the status, title, detail and code, escaped; no script,
/// a few lines of inline CSS.
pub(crate) fn default_page(info: &ErrorInfo) -> String {
    let mut page = String::with_capacity(1024);
    let status = info.status.as_u16();
    let title = escape(&info.title);
    let _ = write!(
        page,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{status} {title}</title>\
         <style>body{{font-family:system-ui,sans-serif;color:#222;max-width:40rem;margin:4rem auto;padding:0 1rem;line-height:1.5}}\
         h1{{font-size:1.6rem;margin-bottom:.5rem}}.status{{color:#a33}}.code{{color:#666;font-family:monospace}}</style>\
         </head><body><main><h1><span class=\"status\">{status}</span> {title}</h1>\
         <p class=\"detail\">{}</p>",
        escape(&info.detail)
    );
    if let Some(code) = &info.code {
        let _ = write!(page, "<p class=\"code\">{}</p>", escape(code));
    }
    page.push_str("</main></body></html>\n");
    page
}

/// Escapes text for an HTML element or a quoted attribute.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Whether the client asked for HTML over JSON: `text/html` (or XHTML)
/// weighs more in `Accept` than `application/json` and
/// `application/problem+json`. No `Accept`, `*/*` or a tie: JSON.
pub(crate) fn prefers_html(headers: &HeaderMap) -> bool {
    let ranges: Vec<(&str, f32)> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(media_range)
        .collect();
    if ranges.is_empty() {
        return false;
    }
    let weight = |media: &str| {
        let kind = media.split('/').next().unwrap_or(media);
        // The most specific range that matches decides.
        let mut best: Option<(u8, f32)> = None;
        for (range, q) in &ranges {
            let specificity = if range.eq_ignore_ascii_case(media) {
                3
            } else if range
                .strip_suffix("/*")
                .is_some_and(|k| k.eq_ignore_ascii_case(kind))
            {
                2
            } else if *range == "*/*" {
                1
            } else {
                continue;
            };
            if best.is_none_or(|(s, _)| specificity > s) {
                best = Some((specificity, *q));
            }
        }
        best.map_or(0.0, |(_, q)| q)
    };
    let html = weight("text/html").max(weight("application/xhtml+xml"));
    let json = weight("application/json").max(weight("application/problem+json"));
    html > json
}

/// One `Accept` element: its media range and `q`.
fn media_range(element: &str) -> Option<(&str, f32)> {
    let mut parts = element.split(';');
    let range = parts.next()?.trim();
    if range.is_empty() {
        return None;
    }
    let q = parts
        .filter_map(|param| param.split_once('='))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
        .and_then(|(_, value)| value.trim().parse::<f32>().ok())
        .unwrap_or(1.0);
    Some((range, q.clamp(0.0, 1.0)))
}

/// The code and detail for an error whose body said nothing (or only
/// axum's rejection text, `text`).
pub(crate) fn describe(status: StatusCode, method: &Method, path: &str, text: &str) -> ErrorInfo {
    Described::new(status, method, path, text).info(method, path)
}

/// An error whose body said nothing, or only axum's rejection text, as
/// its problem document will say it: one of [`codes`] and a sentence.
#[derive(Debug)]
pub(crate) struct Described {
    status: StatusCode,
    code: ProblemCode,
    detail: String,
}

impl Described {
    pub(crate) fn new(status: StatusCode, method: &Method, path: &str, text: &str) -> Self {
        let text = text.trim();
        let code = rejection_code(status, text).unwrap_or(ProblemCode::for_status(status));
        let detail = if text.is_empty() {
            status_sentence(status, method, path)
        } else {
            text.to_owned()
        };
        Self {
            status,
            code,
            detail,
        }
    }

    /// What the page shows of it.
    pub(crate) fn info(self, method: &Method, path: &str) -> ErrorInfo {
        ErrorInfo::new(self.status, self.detail)
            .with_code(self.code.as_str())
            .for_request(method, path)
    }
}

impl std::fmt::Display for Described {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

impl ProblemDetails for Described {
    fn problem_status(&self) -> StatusCode {
        self.status
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(self.code)
    }
}

/// The code of one of axum's extractor rejections, told apart by its text.
fn rejection_code(status: StatusCode, text: &str) -> Option<ProblemCode> {
    let code = match status {
        StatusCode::BAD_REQUEST if text.starts_with("Failed to parse the request body as JSON") => {
            codes::BAD_JSON
        }
        StatusCode::BAD_REQUEST
            if text.starts_with("Failed to deserialize query string")
                || text.starts_with("Failed to deserialize form") =>
        {
            codes::BAD_QUERY
        }
        StatusCode::UNPROCESSABLE_ENTITY
            if text.starts_with("Failed to deserialize the JSON body") =>
        {
            codes::UNPROCESSABLE_JSON
        }
        StatusCode::UNPROCESSABLE_ENTITY if text.starts_with("Failed to deserialize form body") => {
            codes::UNPROCESSABLE_FORM
        }
        _ => return None,
    };
    Some(code)
}

/// A sentence for an error whose body said nothing.
pub(crate) fn status_sentence(status: StatusCode, method: &Method, path: &str) -> String {
    match status.as_u16() {
        400 => "the request is malformed".to_owned(),
        401 => "this needs you to sign in or send credentials".to_owned(),
        403 => "you may not do this".to_owned(),
        404 => format!("there is nothing at {path}"),
        405 => format!("{path} does not answer {method}; the Allow header lists what it answers"),
        406 => "no representation of this resource matches the Accept header".to_owned(),
        408 => "the request took longer than the server allows; try again".to_owned(),
        413 => "the request body is larger than the server accepts".to_owned(),
        414 => "the request target is longer than the server accepts".to_owned(),
        415 => "the request body's content type is not one this endpoint accepts".to_owned(),
        429 => "too many requests; wait a moment and try again".to_owned(),
        431 => "the request's headers are larger than the server accepts; send fewer or smaller headers (cookies included)".to_owned(),
        500 => "the server failed while handling this request".to_owned(),
        503 => "the service is unavailable for a moment; try again later".to_owned(),
        s if s < 500 => "the request could not be handled".to_owned(),
        _ => "the server could not handle this request".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, value.parse().expect("header"));
        headers
    }

    #[test]
    fn a_browser_navigation_prefers_html_and_api_clients_do_not() {
        assert!(prefers_html(&accept(
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        )));
        assert!(prefers_html(&accept("text/html")));
        assert!(prefers_html(&accept("application/json;q=0.5, text/*")));
        assert!(!prefers_html(&HeaderMap::new()));
        assert!(!prefers_html(&accept("*/*")));
        assert!(!prefers_html(&accept("application/json")));
        assert!(!prefers_html(&accept(
            "text/html;q=0.5, application/problem+json"
        )));
        assert!(!prefers_html(&accept("text/html, application/json")));
    }

    #[test]
    fn the_default_page_escapes_what_it_shows() {
        let info = ErrorInfo::new(StatusCode::BAD_REQUEST, "<script>alert('x')</script> & \"")
            .with_code("a<b");
        let page = default_page(&info);
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;"));
        assert!(page.contains("a&lt;b"));
        assert!(page.contains("400"));
    }

    #[test]
    fn axum_rejections_get_their_own_codes() {
        let get = Method::GET;
        let code = |status, text| describe(status, &get, "/", text).code;
        assert_eq!(
            code(
                StatusCode::BAD_REQUEST,
                "Failed to parse the request body as JSON: x"
            )
            .as_deref(),
            Some("bad_json")
        );
        assert_eq!(
            code(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Failed to deserialize form body: missing field `a`"
            )
            .as_deref(),
            Some("unprocessable_form")
        );
        assert_eq!(
            code(StatusCode::NOT_FOUND, "").as_deref(),
            Some("not_found")
        );
        assert_eq!(
            describe(StatusCode::NOT_FOUND, &get, "/x", " ").detail,
            "there is nothing at /x"
        );
    }
}
