//! [`CrossOriginLayer`]: the settings and the check. The service it makes,
//! and its `Layer` impl, are in `service.rs`.

use std::sync::Arc;

use autumn_base::ExemptPaths;
use http::{HeaderMap, HeaderValue, Method, Request, Uri, header};

use super::origin::TrustedOrigin;
use super::rejection::CrossOriginRejection;

/// Made once: a header name given as text is parsed on every lookup.
const SEC_FETCH_SITE: http::HeaderName = http::HeaderName::from_static("sec-fetch-site");

/// Refuses mutating requests that a browser sends on behalf of another
/// site. See the [module docs](super) for the rules and an example.
///
/// By default no origin is trusted and no path is exempt.
#[derive(Debug, Clone, Default)]
pub struct CrossOriginLayer {
    settings: Arc<Settings>,
}

#[derive(Debug, Clone, Default)]
struct Settings {
    trusted: Vec<TrustedOrigin>,
    exempt: ExemptPaths,
}

impl CrossOriginLayer {
    /// A layer trusting no other origin and exempting no path.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(mut self, f: impl FnOnce(&mut Settings)) -> Self {
        f(Arc::make_mut(&mut self.settings));
        self
    }

    /// Also takes mutating requests sent from pages at `origin`: a site of
    /// your own on another host, such as an admin front end.
    #[must_use]
    pub fn with_trusted_origin(self, origin: TrustedOrigin) -> Self {
        self.map(|s| s.trusted.push(origin))
    }

    /// Also takes mutating requests sent from pages at any of `origins`.
    #[must_use]
    pub fn with_trusted_origins(self, origins: impl IntoIterator<Item = TrustedOrigin>) -> Self {
        self.map(|s| s.trusted.extend(origins))
    }

    /// Path prefixes that are not checked, matched by whole segments: `/api`
    /// covers `/api` and `/api/x`, not `/apiary`. For routes that other
    /// sites' pages are meant to post to, such as a payment provider's
    /// browser redirect back with a form post.
    #[must_use]
    pub fn with_exempt_paths(self, prefixes: Vec<String>) -> Self {
        self.map(|s| s.exempt = ExemptPaths::from(prefixes))
    }

    /// The check on its own, for code that wants the decision without the
    /// layer: `Ok` when the request may go on.
    ///
    /// ```
    /// use autumn_core::cross_origin::CrossOriginLayer;
    /// use http::Request;
    ///
    /// let forged = Request::post("/transfer")
    ///     .header("host", "bank.example")
    ///     .header("origin", "https://evil.example")
    ///     .body(())
    ///     .unwrap();
    /// assert!(CrossOriginLayer::new().check(&forged).is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// The [`CrossOriginRejection`] to answer with.
    pub fn check<B>(&self, request: &Request<B>) -> Result<(), CrossOriginRejection> {
        self.check_parts(request.method(), request.uri(), request.headers())
    }

    fn check_parts(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<(), CrossOriginRejection> {
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
            || self.settings.exempt.covers(uri.path())
        {
            return Ok(());
        }
        let origin = headers.get(header::ORIGIN);
        let trusted = origin.is_some_and(|origin| {
            self.settings
                .trusted
                .iter()
                .any(|trusted| trusted.as_str().as_bytes() == origin.as_bytes())
        });
        if let Some(site) = headers.get(&SEC_FETCH_SITE) {
            // Set by the browser itself; a page cannot forge it.
            if site == "same-origin" || site == "none" || trusted {
                return Ok(());
            }
            return Err(CrossOriginRejection::CrossSite {
                origin: origin.map(text),
                fetch_site: text(site),
            });
        }
        let Some(origin) = origin else {
            // Not a browser (curl, a server, an app), or one too old to send
            // either header.
            return Ok(());
        };
        let host = headers
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
            .or_else(|| uri.authority().map(|authority| authority.as_str()));
        let same_host = host.is_some_and(|host| {
            // `Host` has no scheme, so http and https pages of one host look
            // alike here; browsers that old are rare, and HSTS covers them.
            origin
                .to_str()
                .ok()
                .and_then(|origin| origin.split_once("://"))
                .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host))
        });
        if same_host || trusted {
            return Ok(());
        }
        Err(CrossOriginRejection::OriginMismatch {
            origin: text(origin),
            host: host.map(str::to_owned),
        })
    }
}

/// A header's value for a message; headers need not be UTF-8.
fn text(value: &HeaderValue) -> String {
    String::from_utf8_lossy(value.as_bytes()).into_owned()
}
