//! [`Route`]: one handler at one method and path, as the route macros make it.

mod stack;

use std::borrow::Cow;

use autumn_idempotency::layer::IdempotencyPolicy;
use axum::handler::Handler;
use axum::routing::{MethodFilter, MethodRouter};
use http::Method;
use tower::Layer as _;

pub(crate) use stack::{RouteStack, SharedLayers};

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

/// A route-local layer, applied when the app mounts the route.
type RouteLayer = Box<dyn FnOnce(MethodRouter) -> MethodRouter + Send + Sync>;

/// What a route runs, as the app mounts it.
#[expect(
    clippy::large_enum_variant,
    reason = "one per route, made once at startup and moved a few times"
)]
enum Endpoint {
    /// A hand-built route's `MethodRouter`, already boxed by axum.
    Boxed(MethodRouter),
    /// A macro route's handler function, boxed only when the app mounts it:
    /// with the app's layers inside that box when given them (see
    /// [`RouteStack`]), bare otherwise.
    Function(Box<dyn FnOnce(Option<RouteStack>) -> MethodRouter + Send + Sync>),
}

impl Endpoint {
    /// The endpoint as axum boxes it, nothing around it.
    fn into_boxed(self) -> MethodRouter {
        match self {
            Self::Boxed(handler) => handler,
            Self::Function(mount) => mount(None),
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Boxed(handler) => handler.fmt(f),
            Self::Function(_) => f.write_str("handler function"),
        }
    }
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
///
/// Layers added with [`Route::layer`] are kept apart from the handler until
/// the app mounts the route, so the app can put its replay guard directly in
/// front of the handler, beneath them.
pub struct Route {
    /// The method the handler answers.
    pub method: Method,
    /// The path, in axum's syntax (`/orders/{id}`).
    pub path: Cow<'static, str>,
    /// The handler, without the layers added with [`Route::layer`].
    endpoint: Endpoint,
    /// A name for logs and errors: the handler function's name for macro routes.
    pub name: Cow<'static, str>,
    /// How `.idempotent()` treats this route.
    pub idempotency: RouteIdempotency,
    /// The route's own idempotency policy: what it leaves unset comes from
    /// `[idempotency]`.
    pub policy: IdempotencyPolicy,
    /// The `[rate_limit.rules]` rule the route names itself (a macro's
    /// `rate_limit = "login"`), besides those whose `routes` cover it.
    pub rate_limit: Option<Cow<'static, str>>,
    /// Added with [`Route::layer`], innermost first.
    layers: Vec<RouteLayer>,
    /// What the OpenAPI document says of the route beyond its method and
    /// path (see [`Route::describe`]).
    pub(crate) describe: Option<crate::openapi::Describe>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("endpoint", &self.endpoint)
            .field("name", &self.name)
            .field("idempotency", &self.idempotency)
            .field("policy", &self.policy)
            .field("rate_limit", &self.rate_limit)
            .field("layers", &self.layers.len())
            .finish()
    }
}

impl Route {
    /// A hand-built route: opaque to the idempotency layer (see
    /// [`RouteIdempotency::Opaque`]).
    ///
    /// `handler` should be the bare handler: add the route's own layers with
    /// [`Route::layer`]. A layer already on `handler` sits beneath the app's
    /// replay guard, so an `IdempotencyReplayLayer` there is not used.
    pub fn new(method: Method, path: impl Into<Cow<'static, str>>, handler: MethodRouter) -> Self {
        let path = path.into();
        Self {
            method,
            name: path.clone(),
            path,
            endpoint: Endpoint::Boxed(handler),
            idempotency: RouteIdempotency::Opaque,
            policy: IdempotencyPolicy::new(),
            rate_limit: None,
            layers: Vec::new(),
            describe: None,
        }
    }

    /// The same route under the `[rate_limit.rules]` rule `name` (besides
    /// any rule whose `routes` cover it); the app refuses to start when no
    /// rule has that name.
    ///
    /// ```
    /// use autumn_core::Route;
    /// use axum::routing::post;
    /// use http::Method;
    ///
    /// let route = Route::new(Method::POST, "/login", post(|| async { "in" })).with_rate_limit("login");
    /// assert_eq!(route.rate_limit.as_deref(), Some("login"));
    /// ```
    #[must_use]
    pub fn with_rate_limit(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.rate_limit = Some(name.into());
        self
    }

    /// The same route, described in the OpenAPI document by `describe`: a
    /// summary, parameters, a request body or responses its handler's types
    /// do not say. A route macro describes its handler this way from the
    /// handler's signature; a hand-built route is described only as its
    /// app says (its method and path otherwise).
    ///
    /// ```
    /// use autumn_core::Route;
    /// use autumn_core::openapi::Operation;
    /// use axum::routing::post;
    /// use http::Method;
    ///
    /// fn describe(operation: &mut Operation) {
    ///     operation.summary = Some("Receive a payment provider's webhook".to_owned());
    /// }
    ///
    /// let route = Route::new(Method::POST, "/hooks", post(|| async { "ok" })).describe(describe);
    /// # let _ = route;
    /// ```
    #[must_use]
    pub fn describe(mut self, describe: crate::openapi::Describe) -> Self {
        self.describe = Some(describe);
        self
    }

    /// The same route under its own idempotency policy: a required key, its
    /// own TTLs, a JSON fingerprint that leaves out volatile fields. What
    /// `policy` leaves unset comes from `[idempotency]`; the app checks it at
    /// startup and refuses to start, naming the route, when it is invalid.
    ///
    /// ```
    /// use std::time::Duration;
    /// use autumn_core::Route;
    /// use autumn_idempotency::IdempotencyPolicy;
    /// use axum::routing::post;
    /// use http::Method;
    ///
    /// let route = Route::new(Method::POST, "/payments", post(|| async { "paid" })).with_policy(
    ///     IdempotencyPolicy::new()
    ///         .required()
    ///         .with_ttl(Duration::from_secs(48 * 3600))
    ///         .ignoring(["/client_ts"]),
    /// );
    /// assert!(route.policy.validate().is_ok());
    /// ```
    #[must_use]
    pub fn with_policy(mut self, policy: IdempotencyPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The same route, treated by `.idempotent()` as `idempotency` says.
    #[must_use]
    pub fn with_idempotency(mut self, idempotency: RouteIdempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// The same route with a route-local layer around its handler (inside the
    /// idempotency layer). The first layer added is the innermost.
    ///
    /// A retry is never replayed around a route-local layer: a route a macro
    /// made is replayed directly only while it has none; with one, it is
    /// treated as [`RouteIdempotency::Opaque`] (a retry gets 409) unless it
    /// opts into [`RouteIdempotency::ReplayThroughInner`].
    ///
    /// A [`RouteIdempotency::ReplayThroughInner`] route installs its
    /// `IdempotencyReplayLayer` here, before (so beneath) the checks that
    /// must run on every retry:
    ///
    /// ```
    /// use autumn_core::{Route, RouteIdempotency};
    /// use autumn_idempotency::IdempotencyReplayLayer;
    /// use axum::extract::Request;
    /// use axum::middleware::{self, Next};
    /// use axum::response::Response;
    /// use axum::routing::post;
    /// use http::Method;
    ///
    /// async fn authenticate(request: Request, next: Next) -> Response {
    ///     next.run(request).await
    /// }
    ///
    /// let route = Route::new(Method::POST, "/transfers", post(|| async { "done" }))
    ///     .layer(IdempotencyReplayLayer::new())
    ///     .layer(middleware::from_fn(authenticate))
    ///     .with_idempotency(RouteIdempotency::ReplayThroughInner);
    /// assert_eq!(route.layer_count(), 2);
    /// ```
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
        self.layers
            .push(Box::new(move |handler: MethodRouter| handler.layer(layer)));
        self
    }

    /// How many layers were added with [`Route::layer`].
    pub fn layer_count(&self) -> usize {
        self.layers.len()
    }

    /// The handler with the app's `stack` around it, for a route without
    /// layers of its own (see [`Route::layer_count`]): a macro route's in the
    /// same box as its handler function.
    pub(crate) fn into_stacked(self, stack: RouteStack) -> MethodRouter {
        match self.endpoint {
            Endpoint::Function(mount) => mount(Some(stack)),
            Endpoint::Boxed(handler) => handler.layer(stack),
        }
    }

    /// The handler with the app's `stack` around it and the route's own
    /// layers between `stack`'s inner guard, directly in front of the
    /// handler, and the rest of it; the route's layers in the order they
    /// were added.
    pub(crate) fn into_layered(self, stack: RouteStack) -> MethodRouter {
        let outer = stack.outer();
        self.layers
            .into_iter()
            .fold(
                self.endpoint.into_boxed().layer(stack.inner_guard),
                |handler, layer| layer(handler),
            )
            .layer(outer)
    }

    #[doc(hidden)]
    pub fn from_macro<H, T>(
        method: Method,
        filter: MethodFilter,
        path: &'static str,
        name: &'static str,
        handler: H,
        idempotent: bool,
    ) -> Self
    where
        H: Handler<T, ()>,
        T: 'static,
    {
        let mount = move |stack: Option<RouteStack>| match stack {
            Some(stack) => axum::routing::on_service(filter, stack.layer(handler.with_state(()))),
            None => axum::routing::on(filter, handler),
        };
        Self {
            method,
            path: Cow::Borrowed(path),
            endpoint: Endpoint::Function(Box::new(mount)),
            name: Cow::Borrowed(name),
            layers: Vec::new(),
            policy: IdempotencyPolicy::new(),
            rate_limit: None,
            describe: None,
            idempotency: if idempotent {
                RouteIdempotency::Managed
            } else {
                RouteIdempotency::Off
            },
        }
    }
}
