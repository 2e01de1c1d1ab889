//! Error pages for browsers.
//!
//! Autumn answers every error with a problem document
//! (`application/problem+json`), which a script reads well and a person in
//! a browser does not. This layer turns such an answer into an HTML page
//! with the same status and headers when the request asked for HTML (a
//! browser's `Accept` names `text/html`), so that, say, a form submitted
//! from another session shows a page that says what happened instead of
//! JSON. Clients that do not ask for HTML get the problem document as is.

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::{HeaderValue, header};
use serde::Deserialize;

use crate::Site;
use crate::routes::page;

/// The largest problem document read; Autumn's are a few hundred bytes.
const MAX_PROBLEM_BYTES: usize = 64 * 1024;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Problem {
    title: Option<String>,
    detail: Option<String>,
    code: Option<String>,
}

/// The middleware: see the module docs.
pub(crate) async fn html_errors(request: Request, next: Next) -> Response {
    let wants_html = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"));
    let site = request.extensions().get::<Site>().cloned();
    let response = next.run(request).await;
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/problem+json"));
    let Some(site) = site.filter(|_| wants_html && is_problem) else {
        return response;
    };
    let (mut parts, body) = response.into_parts();
    let problem = match axum::body::to_bytes(body, MAX_PROBLEM_BYTES).await {
        Ok(bytes) => autumn_web::reexports::serde_json::from_slice(&bytes).unwrap_or_default(),
        Err(_) => Problem::default(),
    };
    let title = problem
        .title
        .or_else(|| parts.status.canonical_reason().map(str::to_owned))
        .unwrap_or_else(|| "Error".to_owned());
    let html = page(
        &site,
        None,
        &title,
        maud::html! {
            h1 { (title) }
            @if let Some(detail) = &problem.detail {
                p role="alert" { (capitalized(detail)) "." }
            }
            @if let Some(code) = &problem.code {
                p { small { "Error code: " code { (code) } } }
            }
            p { a href="/account" { "Back to your account" } " · " a href="/" { "Home" } }
        },
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // The other headers (`Retry-After`, a `Set-Cookie`) stay as they were.
    Response::from_parts(parts, Body::from(html.into_string()))
}

/// `detail` with its first letter upper-case: problem details are written
/// as clauses ("this form was already submitted ...").
fn capitalized(detail: &str) -> String {
    let detail = detail.trim_end_matches('.');
    let mut chars = detail.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
