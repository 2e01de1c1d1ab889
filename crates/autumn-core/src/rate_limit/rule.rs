//! A rule as the limiter runs it: its rate, who counts as one client, the
//! routes it covers, and its header values made once.

use std::sync::Arc;

use http::{HeaderValue, Method};

use super::gcra::Rate;
use super::key::ClientKey;
use crate::config::{OnStoreError, RateLimitRule};

/// A route pattern of `rate_limit.rules.NAME.routes`: an optional method,
/// then a path as the app writes its routes, where a last segment `*`
/// covers the path before it and everything under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RoutePattern {
    method: Option<Method>,
    /// The path, without the `/*` of a prefix pattern.
    path: String,
    prefix: bool,
}

impl RoutePattern {
    /// `"POST /login"`, `"/orders/{id}"`, `"/api/*"`, `"*"`.
    pub(crate) fn parse(pattern: &str) -> Result<Self, String> {
        let (method, path) = match pattern.trim().split_once(' ') {
            Some((method, path)) => {
                let method = Method::from_bytes(method.as_bytes())
                    .ok()
                    .filter(|method| method.as_str().bytes().all(|b| b.is_ascii_uppercase()))
                    .ok_or_else(|| {
                        format!("{pattern:?}: `{method}` is not a method such as POST")
                    })?;
                (Some(method), path.trim())
            }
            None => (None, pattern.trim()),
        };
        let (path, prefix) = match path {
            "*" | "/*" => (String::new(), true),
            _ => match path.strip_suffix("/*") {
                Some(stem) => (stem.to_owned(), true),
                None => (path.to_owned(), false),
            },
        };
        // `*` alone is the empty stem of a prefix pattern: every path.
        let every_path = path.is_empty() && prefix;
        if !every_path && !path.starts_with('/') {
            return Err(format!(
                "{pattern:?}: a route is a path starting with `/`, after an optional method (\"POST /login\")"
            ));
        }
        if path.contains('*') {
            return Err(format!(
                "{pattern:?}: `*` may only be the last segment (\"/api/*\")"
            ));
        }
        Ok(Self {
            method,
            path,
            prefix,
        })
    }

    /// Whether a route at `method` and `path` (its template, as mounted)
    /// is covered.
    pub(crate) fn matches(&self, method: &Method, path: &str) -> bool {
        if self.method.as_ref().is_some_and(|own| own != method) {
            return false;
        }
        if !self.prefix {
            return path == self.path;
        }
        match path.strip_prefix(self.path.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/') || self.path.is_empty(),
            None => false,
        }
    }
}

/// A rule, built at launch from its configuration.
pub(crate) struct Rule {
    pub(crate) name: Arc<str>,
    pub(crate) rate: Rate,
    pub(crate) by: ClientKey,
    patterns: Vec<RoutePattern>,
    on_store_error: Option<OnStoreError>,
    /// `"name";q=LIMIT;w=WINDOW`, the rule's `RateLimit-Policy` item.
    pub(crate) policy: HeaderValue,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}

impl Rule {
    /// The rule `name` of the configuration; its patterns were checked when
    /// the configuration was.
    pub(crate) fn new(name: &str, config: &RateLimitRule, by: ClientKey) -> Result<Self, String> {
        let burst = config.burst.unwrap_or(config.limit);
        let rate = Rate::new(config.limit, config.window_secs, burst);
        let patterns = config
            .routes
            .iter()
            .map(|pattern| RoutePattern::parse(pattern))
            .collect::<Result<_, _>>()?;
        let policy = HeaderValue::try_from(format!(
            "\"{name}\";q={};w={}",
            config.limit, config.window_secs
        ))
        .map_err(|_| format!("{name:?} cannot be sent in a header"))?;
        Ok(Self {
            name: name.into(),
            rate,
            by,
            patterns,
            on_store_error: config.on_store_error,
            policy,
        })
    }

    /// Whether the rule's `routes` cover a route at `method` and `path`.
    pub(crate) fn covers(&self, method: &Method, path: &str) -> bool {
        self.patterns
            .iter()
            .any(|pattern| pattern.matches(method, path))
    }

    /// Whether the rule names any route itself (else only routes naming it
    /// get it).
    pub(crate) fn has_routes(&self) -> bool {
        !self.patterns.is_empty()
    }

    /// Whether a `method` request whose count cannot be read goes on: as
    /// the rule says, else only when it cannot change anything.
    pub(crate) fn opens_on_error(&self, method: &Method) -> bool {
        match self.on_store_error {
            Some(OnStoreError::Open) => true,
            Some(OnStoreError::Closed) => false,
            None => method.is_safe(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(pattern: &str, method: Method, path: &str) -> bool {
        RoutePattern::parse(pattern)
            .expect("a valid pattern")
            .matches(&method, path)
    }

    #[test]
    fn a_pattern_covers_its_method_and_path_only() {
        assert!(covers("POST /login", Method::POST, "/login"));
        assert!(!covers("POST /login", Method::GET, "/login"));
        assert!(!covers("POST /login", Method::POST, "/login/again"));
        assert!(covers("/orders/{id}", Method::DELETE, "/orders/{id}"));
    }

    #[test]
    fn a_star_covers_the_path_and_everything_under_it_by_whole_segments() {
        assert!(covers("/api/*", Method::GET, "/api"));
        assert!(covers("/api/*", Method::GET, "/api/orders/{id}"));
        assert!(!covers("/api/*", Method::GET, "/apiary"));
        assert!(covers("*", Method::PUT, "/anything"));
        assert!(covers("POST /*", Method::POST, "/"));
    }

    #[test]
    fn a_pattern_that_cannot_match_is_refused_with_what_to_write() {
        for (pattern, says) in [
            ("login", "starting with `/`"),
            ("post /login", "not a method"),
            ("/a/*/b", "last segment"),
            ("/a*", "last segment"),
        ] {
            let error = RoutePattern::parse(pattern).expect_err(pattern);
            assert!(error.contains(says), "{pattern}: {error}");
        }
    }
}
