//! [`RouteLabelLayer`]: tells the metrics layer which route template a
//! request reached. Launch puts it on each route it mounts (inside the
//! route's one box, see `route/stack.rs`), around the static files and
//! around routers mounted whole.
//!
//! One file rather than a middleware module of its own: it has no future
//! (the inner service's is returned as it is) and no state but the entry
//! it hands on.

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::MatchedPath;
use http::Request;
use tower::{Layer, Service};

use super::slot;
use super::state::{HttpMetrics, RouteMetrics};

/// Where the label comes from.
#[derive(Debug, Clone)]
enum Label {
    /// Known when the route was mounted: no lookup per request.
    Fixed(Arc<RouteMetrics>),
    /// The request's `MatchedPath`, for routers whose routes launch cannot
    /// list (those the app merged or nested whole, the actuator's); a
    /// request without one (a router's fallback) says nothing.
    Matched(Arc<HttpMetrics>),
}

/// Labels requests with a route template for the metrics layer.
#[derive(Debug, Clone)]
pub(crate) struct RouteLabelLayer {
    label: Label,
}

impl RouteLabelLayer {
    /// Every request is `route`'s.
    pub(crate) fn fixed(route: Arc<RouteMetrics>) -> Self {
        Self {
            label: Label::Fixed(route),
        }
    }

    /// Each request is its `MatchedPath`'s, counted in `metrics`.
    pub(crate) fn matched(metrics: Arc<HttpMetrics>) -> Self {
        Self {
            label: Label::Matched(metrics),
        }
    }
}

impl<S> Layer<S> for RouteLabelLayer {
    type Service = RouteLabel<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RouteLabel {
            inner,
            label: self.label.clone(),
        }
    }
}

/// The service [`RouteLabelLayer`] makes: says the route, then calls the
/// inner service.
#[derive(Debug, Clone)]
pub(crate) struct RouteLabel<S> {
    inner: S,
    label: Label,
}

impl<S, B> Service<Request<B>> for RouteLabel<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        match &self.label {
            Label::Fixed(route) => slot::say(route),
            Label::Matched(metrics) => {
                if slot::listening()
                    && let Some(path) = request.extensions().get::<MatchedPath>()
                {
                    slot::say(&metrics.route(path.as_str()));
                }
            }
        }
        self.inner.call(request)
    }
}
