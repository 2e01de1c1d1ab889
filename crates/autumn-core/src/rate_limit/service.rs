//! [`RateLimitService`]: decides every rule of the route in turn, then runs
//! the route and tells the client where it stands.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::extract::{MatchedPath, Request};
use axum::response::{IntoResponse, Response};
use tower::Service;

use super::RouteRules;
use super::future::ResponseFuture;
use super::gcra::Decision;
use super::metrics::Outcome;
use super::rejection::{RATELIMIT, RATELIMIT_POLICY, RateLimitRejection, ratelimit_item};
use super::rule::Rule;

/// The service [`RateLimitLayer`](super::RateLimitLayer) makes.
#[derive(Clone)]
pub struct RateLimitService<S> {
    pub(super) inner: S,
    pub(super) route: RouteRules,
}

impl<S> std::fmt::Debug for RateLimitService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("rules", &self.route.rules.len())
            .finish_non_exhaustive()
    }
}

impl<S> Service<Request> for RateLimitService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The clone that was made ready is the one that runs.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let route = self.route.clone();
        Box::pin(decide_then_run(route, inner, request))
    }
}

/// Each rule in turn (a refusal stops there: later rules count nothing),
/// then the route; its answer carries the tightest rule's headers.
async fn decide_then_run<S>(
    route: RouteRules,
    mut inner: S,
    mut request: Request,
) -> Result<Response, Infallible>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let limiter = &route.limiter;
    // The rule with the fewest requests left names the headers.
    let mut tightest: Option<(&Rule, Decision)> = None;
    for &index in route.rules.iter() {
        let Some(rule) = limiter.rules.get(index) else {
            continue;
        };
        if route.by_matched_path && !covers_matched(rule, &request) {
            continue;
        }
        let bucket = rule
            .by
            .bucket(&rule.name, &mut request, limiter.client_of)
            .await;
        match limiter.buckets.decide(&bucket, rule.rate).await {
            Ok(decision) if decision.allowed => {
                limiter.metrics.count(index, Outcome::Allowed);
                if tightest.is_none_or(|(_, kept)| decision.remaining < kept.remaining) {
                    tightest = Some((rule, decision));
                }
            }
            Ok(decision) => {
                limiter.metrics.count(index, Outcome::Limited);
                let mut response = RateLimitRejection::limited(rule, decision).into_response();
                add_headers(&mut response, rule, &decision);
                return Ok(response);
            }
            Err(reason) if rule.opens_on_error(request.method()) => {
                tracing::debug!(rule = %rule.name, %reason, "rate limit not checked; the request goes on");
                limiter.metrics.count(index, Outcome::Unchecked);
            }
            Err(reason) => {
                limiter.metrics.count(index, Outcome::Unavailable);
                let rule = std::sync::Arc::clone(&rule.name);
                return Ok(RateLimitRejection::Unavailable { rule, reason }.into_response());
            }
        }
    }
    let mut response = inner.call(request).await?;
    if let Some((rule, decision)) = tightest {
        add_headers(&mut response, rule, &decision);
    }
    Ok(response)
}

/// For a router merged whole: whether `rule` covers the route `request`
/// matched (none matched: the router's fallback, which no rule covers).
fn covers_matched(rule: &Rule, request: &Request) -> bool {
    request
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|path| rule.covers(request.method(), path.as_str()))
}

/// `RateLimit-Policy` and `RateLimit` for `rule` after `decision`, unless
/// the route set its own.
fn add_headers(response: &mut Response, rule: &Rule, decision: &Decision) {
    let headers = response.headers_mut();
    if headers.contains_key(&RATELIMIT_POLICY) {
        return;
    }
    headers.insert(RATELIMIT_POLICY.clone(), rule.policy.clone());
    if let Some(item) = ratelimit_item(rule, decision) {
        headers.insert(RATELIMIT.clone(), item);
    }
}
