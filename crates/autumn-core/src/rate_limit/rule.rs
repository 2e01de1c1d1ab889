//! A rule as the limiter runs it: its rate, who counts as one client, the
//! routes it covers, and its header values made once.

use std::sync::Arc;

use http::{HeaderValue, Method};

use super::gcra::Rate;
use super::key::ClientKey;
use crate::config::{OnStoreError, RateLimitRule, RoutePattern};

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
