//! `[rate_limit]`: how many requests a client may make, by rule.

use std::collections::BTreeMap;
use std::fmt;

use http::Method;
use serde::Deserialize;

use super::sections::Backend;

/// `[rate_limit]`: named rules, each a rate (`limit` requests per
/// `window_secs`, `burst` of them at once) for the routes it names, counted
/// per client (`by`).
///
/// ```
/// use autumn_core::config::{AutumnConfig, RateLimitBy};
///
/// let config = AutumnConfig::from_toml_str(
///     r#"
///     [rate_limit.rules.login]
///     limit = 10
///     window_secs = 60
///     routes = ["POST /login"]
///     "#,
/// )
/// .unwrap();
/// let rule = &config.rate_limit.rules["login"];
/// assert_eq!((rule.limit, rule.by.clone()), (10, RateLimitBy::ClientIp));
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct RateLimitConfig {
    /// Whether the rules are enforced at all.
    pub enabled: bool,
    /// Where the counts are kept: `"memory"` (this process) or `"redis"` (on
    /// `[idempotency.redis]`, shared by every replica). Unset: Redis when
    /// `idempotency.backend` is Redis, else memory.
    pub backend: Option<Backend>,
    /// Most clients the memory backend counts at once; clients whose count
    /// ran out are forgotten first. Past it, a new client is treated as the
    /// rule's `on_store_error` says.
    pub max_clients: usize,
    /// The rules, by name (`[rate_limit.rules.login]`). The name is what a
    /// route macro's `rate_limit = "login"` refers to, what the
    /// `RateLimit-Policy` header calls the rule, and a metrics label.
    pub rules: BTreeMap<String, RateLimitRule>,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            backend: None,
            max_clients: 100_000,
            rules: BTreeMap::new(),
        }
    }
}

impl RateLimitConfig {
    /// Where counts are kept: `backend` if set, else Redis when
    /// `idempotency` is on Redis, else this process's memory.
    #[must_use]
    pub fn effective_backend(&self, idempotency: Backend) -> Backend {
        self.backend.unwrap_or(match idempotency {
            Backend::Redis => Backend::Redis,
            _ => Backend::Memory,
        })
    }
}

/// One rule of `[rate_limit.rules]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RateLimitRule {
    /// Requests a client may make per window.
    pub limit: u32,
    /// The window, in seconds (60 unless set).
    #[serde(default = "default_window_secs")]
    pub window_secs: u64,
    /// Requests that may come at once; unset: `limit` (a client that was
    /// quiet for a window may spend it all at once).
    #[serde(default)]
    pub burst: Option<u32>,
    /// Who counts as one client (`"client_ip"` unless set).
    #[serde(default)]
    pub by: RateLimitBy,
    /// The routes the rule covers, as the app writes them: `"POST /login"`,
    /// `"/orders/{id}"` (every method), `"/api/*"` (`/api` and everything
    /// under it). Empty: only the routes that name the rule
    /// (`rate_limit = "login"`).
    #[serde(default)]
    pub routes: Vec<String>,
    /// What a request gets when its count cannot be read (Redis down, the
    /// memory backend full). Unset: a GET, HEAD or OPTIONS goes on, any
    /// other method is refused with 503.
    #[serde(default)]
    pub on_store_error: Option<OnStoreError>,
}

impl RateLimitRule {
    /// `limit` requests per `window_secs` (all of them at once, if need
    /// be), by client address, on the routes that name the rule; the
    /// `with_*` methods change the rest. For an app that adds a rule in
    /// code rather than in `autumn.toml`.
    ///
    /// ```
    /// use autumn_core::config::{AutumnConfig, RateLimitBy, RateLimitRule};
    ///
    /// let mut config = AutumnConfig::default();
    /// config.rate_limit.rules.insert(
    ///     "login".to_owned(),
    ///     RateLimitRule::new(20, 60).with_routes(["POST /login"]),
    /// );
    /// config
    ///     .rate_limit
    ///     .rules
    ///     .insert("login_account".to_owned(), RateLimitRule::new(10, 900).by(RateLimitBy::Global));
    /// assert!(config.validate().is_ok());
    /// ```
    #[must_use]
    pub fn new(limit: u32, window_secs: u64) -> Self {
        Self {
            limit,
            window_secs,
            burst: None,
            by: RateLimitBy::ClientIp,
            routes: Vec::new(),
            on_store_error: None,
        }
    }

    /// The same rule, letting `burst` requests come at once.
    #[must_use]
    pub fn with_burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// The same rule, counting clients as `by` says.
    #[must_use]
    pub fn by(mut self, by: RateLimitBy) -> Self {
        self.by = by;
        self
    }

    /// The same rule, covering `routes` (`"POST /login"`, `"/api/*"`).
    #[must_use]
    pub fn with_routes(mut self, routes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.routes = routes.into_iter().map(Into::into).collect();
        self
    }

    /// The same rule, answering as `mode` says when its count cannot be read.
    #[must_use]
    pub fn with_on_store_error(mut self, mode: OnStoreError) -> Self {
        self.on_store_error = Some(mode);
        self
    }
}

fn default_window_secs() -> u64 {
    60
}

/// Who counts as one client under a rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RateLimitBy {
    /// `"client_ip"`: the client's address, as `ClientIp` reads it (behind
    /// `[server] trusted_proxies`, the address they name). IPv6 clients
    /// count by their /64 network, which one subscriber usually holds whole.
    #[default]
    ClientIp,
    /// `"session"`: the signed-in or guest session the cookie names, when
    /// the store knows it; the client's address otherwise, so a forged
    /// cookie gets no count of its own.
    Session,
    /// `"tenant"`: the resolved tenant; the client's address without one.
    Tenant,
    /// `"principal"`: the API principal (`RequireApiToken`, or
    /// `AppBuilder::scope_by`); the client's address without one.
    Principal,
    /// `"global"`: one count for everyone.
    Global,
    /// `"key:NAME"`: what the function the app registered as NAME with
    /// `AppBuilder::rate_limit_key` returns; the client's address when it
    /// returns nothing.
    Key(String),
}

impl RateLimitBy {
    /// How the value is written in configuration.
    #[must_use]
    pub fn as_config(&self) -> String {
        match self {
            Self::ClientIp => "client_ip".to_owned(),
            Self::Session => "session".to_owned(),
            Self::Tenant => "tenant".to_owned(),
            Self::Principal => "principal".to_owned(),
            Self::Global => "global".to_owned(),
            Self::Key(name) => format!("key:{name}"),
        }
    }
}

impl fmt::Display for RateLimitBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_config())
    }
}

impl TryFrom<String> for RateLimitBy {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Ok(match value.as_str() {
            "client_ip" => Self::ClientIp,
            "session" => Self::Session,
            "tenant" => Self::Tenant,
            "principal" => Self::Principal,
            "global" => Self::Global,
            other => match other.strip_prefix("key:") {
                Some(name) if !name.is_empty() => Self::Key(name.to_owned()),
                _ => {
                    return Err(format!(
                        "`{value}` is not a client: expected one of `client_ip`, `session`, `tenant`, `principal`, `global`, `key:NAME`"
                    ));
                }
            },
        })
    }
}

impl<'de> Deserialize<'de> for RateLimitBy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = String::deserialize(deserializer)?;
        Self::try_from(value).map_err(serde::de::Error::custom)
    }
}

/// What a rule does with a request whose count cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnStoreError {
    /// `"open"`: the request goes on, uncounted.
    Open,
    /// `"closed"`: 503 `rate_limit_unavailable`, with `Retry-After`.
    Closed,
}

impl OnStoreError {
    /// How the value is written in configuration.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
        }
    }
}

/// Whether `name` can name a rule: it appears in a header's quoted string
/// and in a metrics label, so letters, digits, `_` and `-` only.
pub(crate) fn is_rule_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-'))
}

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
