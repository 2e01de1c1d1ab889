//! Error pages for browsers, in the site's layout.
//!
//! Autumn answers every error with a problem document for API clients and an
//! HTML page for browsers. This renderer replaces the default page with one
//! in the site's own layout, so that, say, a form submitted from another
//! session shows a page that says what happened, with the site's menu.

use autumn_web::error_pages::{ErrorInfo, ErrorPageRenderer};

use crate::Site;
use crate::routes::page;

/// The site's error page, for any status.
pub(crate) struct SitePages(pub(crate) Site);

impl ErrorPageRenderer for SitePages {
    fn render(&self, info: &ErrorInfo) -> Option<String> {
        let title = info.title();
        let html = page(
            &self.0,
            None,
            title,
            maud::html! {
                h1 { (title) }
                p role="alert" { (capitalized(info.detail())) "." }
                @if let Some(code) = info.code() {
                    p { small { "Error code: " code { (code) } } }
                }
                p { a href="/account" { "Back to your account" } " · " a href="/" { "Home" } }
            },
        );
        Some(html.into_string())
    }
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
