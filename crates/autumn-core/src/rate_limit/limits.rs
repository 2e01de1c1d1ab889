//! [`RateLimits`]: a rule counted by the handler, for a client only the
//! handler can name (the account a sign-in form posts, say).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use http::request::Parts;
use sha2::{Digest, Sha256};

use super::Limiter;
use super::metrics::Outcome;
use super::rejection::RateLimitRejection;

/// The app's `[rate_limit.rules]`, for counting in a handler. A rule used
/// this way usually has no `routes`: the handler says when it counts and
/// who the client is.
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
        let limiter = match &self.state {
            State::Enforced(limiter) => limiter,
            State::Disabled => return Ok(()),
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
        let digest = Sha256::digest(client.as_bytes());
        let bucket = format!("{rule}:c:{}", hex::encode(&digest[..16]));
        match limiter.buckets.decide(&bucket, found.rate).await {
            Ok(decision) if decision.allowed => {
                limiter.metrics.count(index, Outcome::Allowed);
                Ok(())
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
                Ok(())
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

impl<S: Send + Sync> FromRequestParts<S> for RateLimits {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<Self>().cloned().unwrap_or(Self {
            state: State::NoRules,
        }))
    }
}
