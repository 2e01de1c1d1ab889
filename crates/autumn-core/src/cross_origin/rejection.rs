//! [`CrossOriginRejection`]: why a request was refused as cross-origin.

use autumn_base::problem::{ProblemCode, ProblemDetails};
use http::StatusCode;

use crate::codes;

/// Why [`CrossOriginLayer`](super::CrossOriginLayer) answered instead of the
/// app: 403 with a problem document whose `code` is
/// `cross_origin_request_refused` and whose `detail` (the `Display`) names
/// the refused origin and how to trust it.
///
/// ```
/// use autumn_core::cross_origin::CrossOriginRejection;
/// use axum::response::IntoResponse;
///
/// let rejection = CrossOriginRejection::CrossSite {
///     origin: Some("https://evil.example".to_owned()),
///     fetch_site: "cross-site".to_owned(),
/// };
/// assert_eq!(rejection.code(), "cross_origin_request_refused");
/// assert!(rejection.to_string().contains("https://evil.example"));
/// let response = rejection.into_response();
/// assert_eq!(response.status(), 403);
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CrossOriginRejection {
    /// The browser said the request was sent by a page of another site
    /// (`Sec-Fetch-Site: cross-site` or `same-site`), and its `Origin` is
    /// not trusted.
    #[error(
        "cross-origin request refused: {} sent it (Sec-Fetch-Site: {fetch_site}), and a request that changes something is only taken from this site's own pages; if that origin is yours, add it to [security.cross_origin] trusted_origins",
        described(origin.as_deref())
    )]
    CrossSite {
        /// The `Origin` header, if the request had one.
        origin: Option<String>,
        /// The `Sec-Fetch-Site` header.
        fetch_site: String,
    },
    /// The request had no `Sec-Fetch-Site` (an older browser), and its
    /// `Origin` is neither this server's (`Host`) nor trusted.
    #[error(
        "cross-origin request refused: it was sent by a page at `{origin}`, which is not this server ({}), and a request that changes something is only taken from this site's own pages; if that origin is yours, add it to [security.cross_origin] trusted_origins",
        host.as_deref().map_or_else(|| "no Host header".to_owned(), |host| format!("Host `{host}`"))
    )]
    OriginMismatch {
        /// The `Origin` header.
        origin: String,
        /// The `Host` header (or the request target's authority), if any.
        host: Option<String>,
    },
}

fn described(origin: Option<&str>) -> String {
    origin.map_or_else(
        || "a page of another site".to_owned(),
        |origin| format!("a page at `{origin}`"),
    )
}

impl CrossOriginRejection {
    /// 403 Forbidden.
    pub fn status(&self) -> StatusCode {
        StatusCode::FORBIDDEN
    }

    /// `cross_origin_request_refused`, whichever header gave the request
    /// away.
    pub fn code(&self) -> &'static str {
        codes::CROSS_ORIGIN_REQUEST_REFUSED.as_str()
    }
}

/// The detail names the refused origin: it is the client's own header,
/// and says what to trust if the origin is the app's.
impl ProblemDetails for CrossOriginRejection {
    fn problem_status(&self) -> StatusCode {
        self.status()
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(codes::CROSS_ORIGIN_REQUEST_REFUSED)
    }
}

autumn_base::problem_into_response!(CrossOriginRejection);
