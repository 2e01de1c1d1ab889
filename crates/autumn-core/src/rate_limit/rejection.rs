//! [`RateLimitRejection`]: a request a rule did not let through, and the
//! `RateLimit` header fields every answer of a limited route carries.

use std::borrow::Cow;
use std::sync::Arc;

use autumn_base::problem::{ProblemCode, ProblemDetails};
use http::{HeaderName, HeaderValue, StatusCode};

use super::gcra::Decision;
use super::rule::Rule;
use crate::codes;

/// `RateLimit-Policy`: the rule's quota and window (IETF httpapi draft).
pub(crate) static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: what is left of the rule's quota, and in how many seconds
/// it is whole again.
pub(crate) static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Why a rate-limited route refused a request; the handler did not run and
/// nothing was counted against any other rule after it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RateLimitRejection {
    /// 429 `rate_limited`, with `Retry-After`: the client used up what the
    /// rule allows for now.
    #[error(
        "too many requests: rule `{rule}` allows {limit} per {window_secs} s; retry in {retry_after_secs} s"
    )]
    Limited {
        /// The rule's name.
        rule: Arc<str>,
        /// Requests per window.
        limit: u32,
        /// The window, in seconds.
        window_secs: u64,
        /// Seconds until one more request is allowed.
        retry_after_secs: u32,
    },
    /// 503 `rate_limit_unavailable`, `Retry-After: 1`: the rule's count
    /// could not be read, and the rule refuses what it cannot count.
    #[error(
        "the rate limit of rule `{rule}` could not be checked, so nothing was done; retry shortly"
    )]
    Unavailable {
        /// The rule's name.
        rule: Arc<str>,
        /// Why, for the log only.
        #[source]
        reason: super::buckets::BucketError,
    },
    /// 500 `internal_error`: a handler counted under a rule the
    /// configuration does not define (logged with the rule's name).
    #[error("the rate limit of this request could not be checked")]
    UnknownRule {
        /// The name the handler gave.
        rule: Arc<str>,
    },
}

impl RateLimitRejection {
    pub(crate) fn limited(rule: &Rule, decision: Decision) -> Self {
        Self::Limited {
            rule: Arc::clone(&rule.name),
            limit: rule.rate.limit,
            window_secs: rule.rate.window_secs,
            retry_after_secs: seconds(decision.retry_after_ms).max(1),
        }
    }

    /// What the rule decided, for a refusal past it.
    pub(crate) fn decision(&self) -> Option<Decision> {
        match self {
            Self::Limited {
                retry_after_secs, ..
            } => Some(Decision {
                allowed: false,
                remaining: 0,
                retry_after_ms: u64::from(*retry_after_secs) * 1000,
                reset_ms: u64::from(*retry_after_secs) * 1000,
            }),
            _ => None,
        }
    }

    /// The rule that refused.
    #[must_use]
    pub fn rule(&self) -> &str {
        match self {
            Self::Limited { rule, .. }
            | Self::Unavailable { rule, .. }
            | Self::UnknownRule { rule } => rule,
        }
    }
}

impl ProblemDetails for RateLimitRejection {
    fn problem_status(&self) -> StatusCode {
        match self {
            Self::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::UnknownRule { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(match self {
            Self::Limited { .. } => codes::RATE_LIMITED,
            Self::Unavailable { .. } => codes::RATE_LIMIT_UNAVAILABLE,
            Self::UnknownRule { .. } => codes::INTERNAL_ERROR,
        })
    }

    fn problem_detail(&self) -> Cow<'_, str> {
        // The Display, without the store's error (which can name hosts).
        Cow::Owned(self.to_string())
    }

    fn problem_retry_after(&self) -> Option<u32> {
        match self {
            Self::Limited {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            Self::Unavailable { .. } => Some(1),
            Self::UnknownRule { .. } => None,
        }
    }

    fn problem_members(&self) -> Vec<(&'static str, serde_json::Value)> {
        match self {
            Self::UnknownRule { .. } => Vec::new(),
            _ => vec![("rule", serde_json::Value::from(self.rule()))],
        }
    }

    fn log_for_operators(&self) {
        match self {
            Self::UnknownRule { rule } => tracing::error!(
                rule = %rule,
                "RateLimits::check names a rule [rate_limit.rules] does not define; the request was answered 500"
            ),
            Self::Unavailable { rule, reason } => {
                tracing::debug!(rule = %rule, %reason, "a rate limit's count could not be read");
            }
            Self::Limited { .. } => {}
        }
    }
}

autumn_base::problem_into_response!(RateLimitRejection);

/// `"name";r=REMAINING;t=SECONDS`, the rule's `RateLimit` item after
/// `decision`.
pub(crate) fn ratelimit_item(rule: &Rule, decision: &Decision) -> Option<HeaderValue> {
    let reset = if decision.allowed {
        decision.reset_ms
    } else {
        decision.retry_after_ms
    };
    HeaderValue::try_from(format!(
        "\"{}\";r={};t={}",
        rule.name,
        decision.remaining,
        seconds(reset)
    ))
    .ok()
}

/// Whole seconds, rounded up: a client that waits that long is not early.
fn seconds(millis: u64) -> u32 {
    u32::try_from(millis.div_ceil(1000)).unwrap_or(u32::MAX)
}
