//! Rate limits: `[rate_limit.rules]`, each a rate for the routes it names,
//! counted per client, in this process's memory or in Redis so that a limit
//! of N holds for the whole fleet rather than per replica.
//!
//! A rule is GCRA, the generic cell rate algorithm that `governor`
//! implements: one number per client (when its quota is whole again), so a
//! decision is one read-modify-write, on Redis one script touching one key
//! (a Redis Cluster runs it on that key's slot). Redis decides by its own
//! clock, so replicas with skewed clocks agree.
//!
//! Where it runs: first on each route it covers, before the submit-token
//! and idempotency guards, so a refused request costs no store round trip
//! of theirs and a retry counts like any request. What a refusal looks
//! like: 429 problem+json `rate_limited` with `Retry-After`, and on every
//! answer of a limited route the `RateLimit-Policy` and `RateLimit` fields
//! of the IETF httpapi draft. When a rule's count cannot be read (Redis
//! down, the memory backend full), the rule's `on_store_error` decides:
//! by default a GET, HEAD or OPTIONS goes on and anything else gets 503
//! `rate_limit_unavailable`.
//!
//! ```toml
//! [rate_limit.rules.login]
//! limit = 10
//! window_secs = 60
//! routes = ["POST /login"]
//! ```
//!
//! A route macro can name a rule too: `#[post("/login", rate_limit =
//! "login")]`. See `docs/security.md` for what to set in production.

mod buckets;
mod future;
mod gcra;
mod key;
mod layer;
mod limits;
mod metrics;
mod rejection;
mod rule;
mod service;

use std::collections::HashMap;
use std::sync::Arc;

use autumn_base::clock::SharedClock;
use http::Method;

pub use buckets::BucketError;
#[cfg(feature = "redis")]
pub(crate) use buckets::RedisBuckets;
pub(crate) use buckets::{Buckets, MemoryBuckets};
pub use future::ResponseFuture;
pub use key::RateLimitKeyFn;
pub use layer::RateLimitLayer;
pub(crate) use limits::API_TOKEN_FAILURES;
pub use limits::RateLimits;
pub(crate) use metrics::RateLimitMetrics;
pub use rejection::RateLimitRejection;
pub use service::RateLimitService;

use crate::config::RateLimitConfig;
use key::ClientKey;
use rule::Rule;

/// One route's rules, shared by its [`RateLimitLayer`] and the services it
/// makes.
#[derive(Clone)]
pub(crate) struct RouteRules {
    limiter: Arc<Limiter>,
    /// Indexes into `limiter`'s rules: this route's, fixed at launch.
    rules: Arc<[usize]>,
    /// A router merged whole: its routes are only known per request, by
    /// the path each one matched, so `rules` are matched then.
    by_matched_path: bool,
}

/// The app's rules and where their counts live, shared by every route's
/// [`RateLimitLayer`].
pub(crate) struct Limiter {
    buckets: Arc<dyn Buckets>,
    /// In the configuration's order (by name); the metrics use the index.
    rules: Vec<Rule>,
    metrics: Arc<RateLimitMetrics>,
    /// Clients this process saw go past a rule counted by
    /// [`RateLimits::count_failure`], held back without a round trip.
    held_back: limits::HeldBack,
    /// A request's client address, as `ClientIp` reads it.
    client_of: key::ClientOf,
}

impl Limiter {
    /// The rules of `config`, counted in `buckets`; `Err` names the rule
    /// whose `by` names a function the app did not register.
    pub(crate) fn new(
        config: &RateLimitConfig,
        functions: &HashMap<String, RateLimitKeyFn>,
        buckets: Arc<dyn Buckets>,
        clock: SharedClock,
        client_of: fn(&http::HeaderMap) -> std::net::IpAddr,
    ) -> Result<Self, (String, String)> {
        let rules = config
            .rules
            .iter()
            .map(|(name, rule)| {
                let by = ClientKey::new(&rule.by, functions)
                    .map_err(|message| (format!("rate_limit.rules.{name}.by"), message))?;
                Rule::new(name, rule, by)
                    .map_err(|message| (format!("rate_limit.rules.{name}"), message))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let metrics = Arc::new(RateLimitMetrics::new(
            rules.iter().map(|rule| Arc::clone(&rule.name)),
            clock.clone(),
        ));
        Ok(Self {
            buckets,
            rules,
            metrics,
            held_back: limits::HeldBack::new(config.max_clients, clock),
            client_of,
        })
    }

    /// The counters, for the actuator.
    pub(crate) fn metrics(&self) -> Arc<RateLimitMetrics> {
        Arc::clone(&self.metrics)
    }

    /// Where the counts live (`memory` or `redis`), for the startup log.
    pub(crate) fn backend(&self) -> &'static str {
        self.buckets.backend()
    }

    /// The layer of a route at `method` and `path` (its template), with
    /// every rule whose `routes` cover it and the rule it names itself;
    /// none when no rule applies. `Err`: the named rule does not exist.
    pub(crate) fn for_route(
        self: &Arc<Self>,
        method: &Method,
        path: &str,
        named: Option<&str>,
    ) -> Result<Option<RateLimitLayer>, String> {
        if let Some(name) = named
            && !self.rules.iter().any(|rule| &*rule.name == name)
        {
            let defined: Vec<&str> = self.rules.iter().map(|rule| &*rule.name).collect();
            return Err(format!(
                "the route {method} {path} names rate_limit = \"{name}\", but [rate_limit.rules] defines {}",
                if defined.is_empty() {
                    "no rule".to_owned()
                } else {
                    format!("only {}", defined.join(", "))
                }
            ));
        }
        let rules: Vec<usize> = self
            .rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| named == Some(&*rule.name) || rule.covers(method, path))
            .map(|(index, _)| index)
            .collect();
        Ok((!rules.is_empty()).then(|| RateLimitLayer {
            route: RouteRules {
                limiter: Arc::clone(self),
                rules: rules.into(),
                by_matched_path: false,
            },
        }))
    }

    /// The layer of a router merged or nested whole, whose routes are known
    /// only per request: every rule with `routes`, matched against the path
    /// each request matched.
    pub(crate) fn for_router(self: &Arc<Self>) -> Option<RateLimitLayer> {
        let rules: Vec<usize> = self
            .rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| rule.has_routes())
            .map(|(index, _)| index)
            .collect();
        (!rules.is_empty()).then(|| RateLimitLayer {
            route: RouteRules {
                limiter: Arc::clone(self),
                rules: rules.into(),
                by_matched_path: true,
            },
        })
    }
}
