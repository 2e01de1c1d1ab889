//! [`Route`]: one handler at one method and path, as the route macros make it.

use std::borrow::Cow;

use axum::routing::MethodRouter;
use http::Method;

/// How the idempotency layer treats a route when the app calls
/// `.idempotent()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RouteIdempotency {
    /// Made by a route macro: Autumn knows nothing runs between the layer and
    /// the handler, so a retry is replayed directly.
    Managed,
    /// A hand-built route, whose own layers Autumn cannot see: the first
    /// success is recorded, but a retry gets 409 rather than a replay that
    /// could skip a route-local check, or a second run.
    #[default]
    Opaque,
    /// The route installs an `IdempotencyReplayLayer` after its own checks:
    /// retries are forwarded into the route and replayed there.
    ReplayThroughInner,
    /// No idempotency layer on this route at all: it neither records nor
    /// replays, and its handler runs on every request.
    Off,
}

/// One handler, at one method and path.
///
/// The route macros (`#[post("/orders")]`) make these; a hand-built one is
/// [`RouteIdempotency::Opaque`] unless it says otherwise.
///
/// ```
/// use autumn_core::{Route, RouteIdempotency};
/// use axum::routing::post;
/// use http::Method;
///
/// let route = Route::new(Method::POST, "/webhooks", post(|| async { "ok" }))
///     .with_idempotency(RouteIdempotency::Off);
/// assert_eq!(route.idempotency, RouteIdempotency::Off);
/// ```
#[derive(Debug)]
pub struct Route {
    /// The method the handler answers.
    pub method: Method,
    /// The path, in axum's syntax (`/orders/{id}`).
    pub path: Cow<'static, str>,
    /// The handler (with any route-local layers).
    pub handler: MethodRouter,
    /// A name for logs and errors: the handler function's name for macro routes.
    pub name: Cow<'static, str>,
    /// How `.idempotent()` treats this route.
    pub idempotency: RouteIdempotency,
}

impl Route {
    /// A hand-built route: opaque to the idempotency layer (see
    /// [`RouteIdempotency::Opaque`]).
    pub fn new(method: Method, path: impl Into<Cow<'static, str>>, handler: MethodRouter) -> Self {
        let path = path.into();
        Self {
            method,
            name: path.clone(),
            path,
            handler,
            idempotency: RouteIdempotency::Opaque,
        }
    }

    /// The same route, treated by `.idempotent()` as `idempotency` says.
    #[must_use]
    pub fn with_idempotency(mut self, idempotency: RouteIdempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// The same route with a route-local layer around its handler (inside the
    /// idempotency layer).
    #[must_use]
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<axum::routing::Route> + Clone + Send + Sync + 'static,
        L::Service: tower::Service<axum::extract::Request> + Clone + Send + Sync + 'static,
        <L::Service as tower::Service<axum::extract::Request>>::Response:
            axum::response::IntoResponse + 'static,
        <L::Service as tower::Service<axum::extract::Request>>::Error:
            Into<std::convert::Infallible> + 'static,
        <L::Service as tower::Service<axum::extract::Request>>::Future: Send + 'static,
    {
        self.handler = self.handler.layer(layer);
        self
    }

    #[doc(hidden)]
    pub fn from_macro(
        method: Method,
        path: &'static str,
        name: &'static str,
        handler: MethodRouter,
        idempotent: bool,
    ) -> Self {
        Self {
            method,
            path: Cow::Borrowed(path),
            handler,
            name: Cow::Borrowed(name),
            idempotency: if idempotent {
                RouteIdempotency::Managed
            } else {
                RouteIdempotency::Off
            },
        }
    }
}
