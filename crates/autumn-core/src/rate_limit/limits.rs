//! [`RateLimits`]: a rule counted by the handler, for a client only the
//! handler can name (the account a sign-in form posts, say).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use autumn_base::clock::SharedClock;

use axum::extract::FromRequestParts;
use http::request::Parts;
use sha2::{Digest, Sha256};

use super::Limiter;
use super::gcra::Decision;
use super::metrics::Outcome;
use super::rejection::RateLimitRejection;

/// The app's `[rate_limit.rules]`, for counting in a handler. A rule used
/// this way usually has no `routes`: the handler says when it counts and
/// who the client is.
///
/// An extension the layer stack puts on every request when the app defines
/// a rule; read by this extractor and by `RequireApiToken`, which counts
/// unknown tokens under `api_token_failures`.
///
/// ```
/// use autumn_core::rate_limit::{RateLimitRejection, RateLimits};
///
/// // [rate_limit.rules.login_account]
/// // limit = 10
/// // window_secs = 900
/// async fn login(limits: RateLimits /* , Form(form): Form<LoginForm> */) -> Result<&'static str, RateLimitRejection> {
///     let email = "ada@example.com"; // form.email
///     limits.check("login_account", email).await?;
///     // ... check the password
///     Ok("signed in")
/// }
/// # let _ = axum::Router::<()>::new().route("/login", axum::routing::post(login));
/// ```
#[derive(Clone)]
pub struct RateLimits {
    state: State,
}

#[derive(Clone)]
enum State {
    /// The app's rules, enforced.
    Enforced(Arc<Limiter>),
    /// `[rate_limit] enabled = false`: every check passes.
    Disabled,
    /// The app defines no rule at all.
    NoRules,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Enforced(_) => "enforced",
            State::Disabled => "disabled",
            State::NoRules => "no rules",
        };
        f.debug_struct("RateLimits").field("state", &state).finish()
    }
}

impl RateLimits {
    /// The app's rules: enforced, or (`limiter` none) disabled.
    pub(crate) fn new(limiter: Option<Arc<Limiter>>) -> Self {
        Self {
            state: limiter.map_or(State::Disabled, State::Enforced),
        }
    }

    /// Counts one request of `client` under the rule `rule`.
    ///
    /// # Errors
    ///
    /// [`RateLimitRejection::Limited`] (429) past the rule;
    /// [`RateLimitRejection::Unavailable`] (503) when the count cannot be
    /// read and the rule does not say `on_store_error = "open"`;
    /// [`RateLimitRejection::UnknownRule`] (500) when the configuration
    /// defines no rule of that name. With `[rate_limit] enabled = false`,
    /// never.
    pub async fn check(&self, rule: &str, client: &str) -> Result<(), RateLimitRejection> {
        self.count(rule, client).await.map(drop)
    }

    /// [`check`](Self::check), for a request that failed in a way only a
    /// guesser fails often (an unknown API token): past the rule, this
    /// process also holds the client back without asking the counts'
    /// backend (see [`held_back`](Self::held_back)). A rule the
    /// configuration does not define counts nothing.
    pub(crate) async fn count_failure(
        &self,
        rule: &str,
        client: &str,
    ) -> Result<(), RateLimitRejection> {
        match self.count(rule, client).await {
            Err(RateLimitRejection::UnknownRule { .. }) => Ok(()),
            Err(refused @ RateLimitRejection::Limited { .. }) => {
                if let (State::Enforced(limiter), Some(decision)) =
                    (&self.state, refused.decision())
                {
                    limiter
                        .held_back
                        .hold(bucket(rule, client), decision.retry_after_ms);
                }
                Err(refused)
            }
            counted => counted.map(drop),
        }
    }

    /// The client address `headers` count as (see `by = "client_ip"`),
    /// when rate limits are enforced.
    pub(crate) fn address_of(&self, headers: &http::HeaderMap) -> Option<String> {
        match &self.state {
            State::Enforced(limiter) => {
                Some(super::key::counted_address((limiter.client_of)(headers)).to_string())
            }
            State::Disabled | State::NoRules => None,
        }
    }

    /// The refusal for `client` under `rule` while this process holds it
    /// back after [`count_failure`](Self::count_failure) refused it: no
    /// round trip, and nothing counted.
    pub(crate) fn held_back(&self, rule: &str, client: &str) -> Option<RateLimitRejection> {
        let State::Enforced(limiter) = &self.state else {
            return None;
        };
        let found = limiter.rules.iter().find(|found| &*found.name == rule)?;
        let retry_after_ms = limiter.held_back.remaining(&bucket(rule, client))?;
        Some(RateLimitRejection::limited(
            found,
            Decision {
                allowed: false,
                remaining: 0,
                retry_after_ms,
                reset_ms: retry_after_ms,
            },
        ))
    }

    /// One request of `client` counted under `rule`: the decision when
    /// the rule let it through.
    async fn count(
        &self,
        rule: &str,
        client: &str,
    ) -> Result<Option<Decision>, RateLimitRejection> {
        let limiter = match &self.state {
            State::Enforced(limiter) => limiter,
            State::Disabled => return Ok(None),
            State::NoRules => return Err(RateLimitRejection::UnknownRule { rule: rule.into() }),
        };
        let Some((index, found)) = limiter
            .rules
            .iter()
            .enumerate()
            .find(|(_, found)| &*found.name == rule)
        else {
            return Err(RateLimitRejection::UnknownRule { rule: rule.into() });
        };
        match limiter
            .buckets
            .decide(&bucket(rule, client), found.rate)
            .await
        {
            Ok(decision) if decision.allowed => {
                limiter.metrics.count(index, Outcome::Allowed);
                Ok(Some(decision))
            }
            Ok(decision) => {
                limiter.metrics.count(index, Outcome::Limited);
                Err(RateLimitRejection::limited(found, decision))
            }
            // The handler counts what it is about to do: closed unless the
            // rule says otherwise.
            Err(reason) if found.opens_on_error(&http::Method::POST) => {
                tracing::debug!(rule, %reason, "rate limit not checked; the request goes on");
                limiter.metrics.count(index, Outcome::Unchecked);
                Ok(None)
            }
            Err(reason) => {
                limiter.metrics.count(index, Outcome::Unavailable);
                Err(RateLimitRejection::Unavailable {
                    rule: Arc::clone(&found.name),
                    reason,
                })
            }
        }
    }
}

/// The bucket of `client` under `rule`, as a handler names the client.
fn bucket(rule: &str, client: &str) -> String {
    let digest = Sha256::digest(client.as_bytes());
    format!("{rule}:c:{}", hex::encode(&digest[..16]))
}

/// The rule [`RequireApiToken`](crate::api_token::RequireApiTokenLayer)
/// counts unknown tokens under, per client address; `AppBuilder::api_tokens`
/// defines it (30 a minute) unless the app or its configuration does.
pub(crate) const API_TOKEN_FAILURES: &str = "api_token_failures";

/// Buckets this process saw refused, until when: at most `max` at once,
/// those whose time is up forgotten first.
pub(super) struct HeldBack {
    until: Mutex<HashMap<String, u64>>,
    max: usize,
    clock: SharedClock,
}

impl HeldBack {
    pub(super) fn new(max: usize, clock: SharedClock) -> Self {
        Self {
            until: Mutex::default(),
            max,
            clock,
        }
    }

    /// Holds `bucket` back for `millis`.
    fn hold(&self, bucket: String, millis: u64) {
        let now = self.clock.now_millis();
        let mut until = self
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if until.len() >= self.max {
            until.retain(|_, end| *end > now);
            if until.len() >= self.max {
                // Full of live holds: the shared count still refuses.
                return;
            }
        }
        until.insert(bucket, now.saturating_add(millis));
    }

    /// Milliseconds `bucket` is still held back, if it is.
    fn remaining(&self, bucket: &str) -> Option<u64> {
        let now = self.clock.now_millis();
        let until = self
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        until
            .get(bucket)
            .copied()
            .filter(|end| *end > now)
            .map(|end| end - now)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RateLimits {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<Self>().cloned().unwrap_or(Self {
            state: State::NoRules,
        }))
    }
}
