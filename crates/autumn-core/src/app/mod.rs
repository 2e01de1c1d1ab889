//! [`AppBuilder`]: routes, layers and configuration in; a router or a
//! running server out.

mod compress;
mod error;
mod launch;
mod middleware;
#[cfg(feature = "database")]
mod migrate;
mod serve;
pub(crate) mod server;
mod startup_log;

pub(crate) use server::context::client_of;

use std::sync::Arc;

use autumn_base::clock::SharedClock;
use autumn_idempotency::IdempotencyStore;
use axum::Router;
use axum::extract::Request;
use axum::response::IntoResponse;

pub use error::{CommandError, LaunchError};

use crate::config::AutumnConfig;
use crate::route::Route;

type RouterLayer = Box<dyn FnOnce(Router) -> Router + Send>;

/// Starts an app. See [`AppBuilder`].
pub fn app() -> AppBuilder {
    AppBuilder::default()
}

/// Collects what an app is made of, then builds it with
/// [`run`](Self::run) (a server) or [`into_router`](Self::into_router).
///
/// ```no_run
/// # use autumn_core::{app, Route};
/// # use axum::routing::get;
/// # async fn demo() {
/// app()
///     .routes(vec![Route::new(http::Method::GET, "/", get(|| async { "hi" }))])
///     .idempotent()
///     .run()
///     .await;
/// # }
/// ```
#[derive(Default)]
#[must_use = "an AppBuilder does nothing until it is run or turned into a router"]
pub struct AppBuilder {
    pub(crate) routes: Vec<Route>,
    pub(crate) scoped: Vec<(String, Vec<Route>)>,
    pub(crate) raw: Vec<RawRouter>,
    pub(crate) layers: Vec<RouterLayer>,
    pub(crate) idempotent: bool,
    /// `api_tokens` was called: `Some(true)` when every request needs a
    /// token, `Some(false)` when anonymous requests pass. The OpenAPI
    /// document's bearer scheme says the same.
    pub(crate) bearer: Option<bool>,
    /// What `scope_by`'s resolver says of its credential, for the OpenAPI
    /// document.
    pub(crate) principal_scheme: Option<crate::openapi::SecurityScheme>,
    pub(crate) config: Option<AutumnConfig>,
    pub(crate) store: Option<Arc<dyn IdempotencyStore>>,
    pub(crate) session_store: Option<Arc<dyn crate::session::SessionStore>>,
    pub(crate) clock: Option<SharedClock>,
    pub(crate) tenant_resolver: Option<Arc<dyn crate::tenancy::TenantResolver>>,
    pub(crate) error_pages: crate::error_pages::ErrorPagesLayer,
    pub(crate) states: crate::state::States,
    /// `rate_limit_rule`'s rules, by name: defaults the configuration's own
    /// rules of the same name replace.
    pub(crate) rate_limit_rules: std::collections::BTreeMap<String, crate::config::RateLimitRule>,
    /// `rate_limit_key`'s functions, by name.
    pub(crate) rate_limit_keys:
        std::collections::HashMap<String, crate::rate_limit::RateLimitKeyFn>,
    #[cfg(feature = "database")]
    pub(crate) commit_hooks: Option<crate::jobs::CommitHooks>,
    /// The app's own migrations (`migrations`).
    #[cfg(feature = "database")]
    pub(crate) app_migrations: Option<autumn_base::database::AppMigrations>,
    /// `with_mail` or `mail_transport` was called.
    #[cfg(feature = "mail")]
    pub(crate) mail: Option<crate::mail::MailSetup>,
}

pub(crate) enum RawRouter {
    Merge(Router),
    Nest(String, Router),
}

impl std::fmt::Debug for AppBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppBuilder")
            .field("routes", &self.routes.len())
            .field("layers", &self.layers.len())
            .field("idempotent", &self.idempotent)
            .finish_non_exhaustive()
    }
}

impl AppBuilder {
    /// Adds routes, usually `routes![a, b]`.
    pub fn routes(mut self, routes: Vec<Route>) -> Self {
        self.routes.extend(routes);
        self
    }

    /// Adds routes under a path prefix: `.scoped("/admin", routes![users])`
    /// serves `users` at `/admin/...`.
    pub fn scoped(mut self, prefix: impl Into<String>, routes: Vec<Route>) -> Self {
        self.scoped.push((prefix.into(), routes));
        self
    }

    /// Merges a plain axum router. Its routes are opaque to Autumn: with
    /// `.idempotent()` their first success is recorded, but a retry gets 409
    /// rather than a replay (see the idempotency guide).
    pub fn merge(mut self, router: Router) -> Self {
        self.raw.push(RawRouter::Merge(router));
        self
    }

    /// Nests a plain axum router under `path`; opaque like [`merge`](Self::merge).
    pub fn nest(mut self, path: impl Into<String>, router: Router) -> Self {
        self.raw.push(RawRouter::Nest(path.into(), router));
        self
    }

    /// Defines the rate-limit rule `name` in code, as a default:
    /// `[rate_limit.rules.NAME]` in the configuration replaces it whole, so
    /// operators can tune a limit without a release. A route names it with
    /// `rate_limit = "NAME"`, a handler counts it with
    /// [`RateLimits::check`](crate::rate_limit::RateLimits::check).
    ///
    /// ```
    /// use autumn_core::config::RateLimitRule;
    ///
    /// // 20 sign-in attempts a minute from one address.
    /// let app = autumn_core::app().rate_limit_rule("login", RateLimitRule::new(20, 60));
    /// # drop(app);
    /// ```
    pub fn rate_limit_rule(
        mut self,
        name: impl Into<String>,
        rule: crate::config::RateLimitRule,
    ) -> Self {
        self.rate_limit_rules.insert(name.into(), rule);
        self
    }

    /// The rule unknown API tokens are counted under, per client address
    /// (30 a minute), unless the app defined one of that name already;
    /// `[rate_limit.rules.api_token_failures]` replaces it.
    fn with_token_failure_rule(mut self) -> Self {
        self.rate_limit_rules
            .entry(crate::rate_limit::API_TOKEN_FAILURES.to_owned())
            .or_insert_with(|| crate::config::RateLimitRule::new(30, 60));
        self
    }

    /// Names a way to tell clients apart for `[rate_limit.rules]`: a rule
    /// with `by = "key:NAME"` counts each request as the client `key`
    /// returns for it, and by the client's address when it returns `None`.
    /// Runs before the route's guards, on the request's head only.
    ///
    /// ```
    /// // [rate_limit.rules.per_account]
    /// // limit = 100
    /// // by = "key:account"
    /// let app = autumn_core::app().rate_limit_key("account", |parts| {
    ///     parts
    ///         .headers
    ///         .get("x-account-id")
    ///         .and_then(|value| value.to_str().ok())
    ///         .map(str::to_owned)
    /// });
    /// # drop(app);
    /// ```
    pub fn rate_limit_key(
        mut self,
        name: impl Into<String>,
        key: impl Fn(&http::request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.rate_limit_keys.insert(name.into(), Arc::new(key));
        self
    }

    /// Wraps the whole app in a tower layer. Layers added this way run after
    /// the cross-origin check, sessions and tenancy (the request's
    /// idempotency scope is set by then, so an `IdempotencyLayer` added here
    /// scopes like Autumn's), and before submit tokens and idempotency, so a
    /// retry passes through them again before it is replayed.
    ///
    /// A [`RequireApiTokenLayer`](crate::api_token::RequireApiTokenLayer)
    /// added here (itself, not wrapped in another layer) is registered as
    /// [`api_tokens`](Self::api_tokens) registers it; prefer that method,
    /// which says so in the code.
    pub fn layer<L>(mut self, mut layer: L) -> Self
    where
        L: tower::Layer<axum::routing::Route> + Clone + Send + Sync + 'static,
        L::Service: tower::Service<Request> + Clone + Send + Sync + 'static,
        <L::Service as tower::Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as tower::Service<Request>>::Error: Into<std::convert::Infallible> + 'static,
        <L::Service as tower::Service<Request>>::Future: Send + 'static,
    {
        if crate::api_token::register(&mut layer) {
            self = self.with_token_failure_rule();
        }
        self.layers
            .push(Box::new(move |router| router.layer(layer)));
        self
    }

    /// Requires an API token on every request, and tells the idempotency
    /// layer who the token acts for: a retry is scoped, and replayed, by the
    /// principal rather than the token, so an agent that refreshes its token
    /// between attempts still gets its first response back. Runs where
    /// [`layer`](Self::layer)'s layers run.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use autumn_core::api_token::{ApiTokens, MemoryApiTokenStore, RequireApiTokenLayer};
    ///
    /// let tokens = ApiTokens::new(Arc::new(MemoryApiTokenStore::new()));
    /// let app = autumn_core::app()
    ///     .api_tokens(RequireApiTokenLayer::new(tokens).allow_anonymous())
    ///     .idempotent();
    /// # let _ = app;
    /// ```
    pub fn api_tokens(mut self, tokens: crate::api_token::RequireApiTokenLayer) -> Self {
        let tokens = tokens.registered();
        self.bearer = Some(!tokens.settings.anonymous);
        self = self.with_token_failure_rule();
        self.layers
            .push(Box::new(move |router| router.layer(tokens)));
        self
    }

    /// Scopes the requests the guards act on by the principal `resolver`
    /// names, for apps that authenticate callers themselves (a JWT, an
    /// OAuth token, an `X-Api-Key`, a client certificate): a client that
    /// refreshes its credential between two attempts still gets the first
    /// one's answer. See [`principal`](crate::principal).
    pub fn scope_by(mut self, resolver: impl crate::principal::PrincipalResolver) -> Self {
        self.principal_scheme = resolver.security_scheme();
        let layer = crate::principal::PrincipalLayer::new(resolver);
        self.layers
            .push(Box::new(move |router| router.layer(layer)));
        self
    }

    /// Turns on the `Idempotency-Key` middleware, configured from
    /// `[idempotency]`.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Uses this configuration instead of loading `autumn.toml` and the
    /// environment.
    pub fn with_config(mut self, config: AutumnConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// The configuration given with [`with_config`](Self::with_config), if
    /// any (none means `autumn.toml` and the environment are read at
    /// launch).
    ///
    /// ```
    /// use autumn_core::config::AutumnConfig;
    ///
    /// let app = autumn_core::app();
    /// assert!(app.given_config().is_none());
    /// let app = app.with_config(AutumnConfig::default());
    /// assert!(app.given_config().is_some());
    /// ```
    pub fn given_config(&self) -> Option<&AutumnConfig> {
        self.config.as_ref()
    }

    /// Uses this store for idempotency keys instead of the one
    /// `[idempotency] backend` names.
    pub fn with_idempotency_store(mut self, store: Arc<dyn IdempotencyStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Keeps sessions in this store instead of the one `[session] backend`
    /// names (when `[session] enabled`).
    pub fn with_session_store(mut self, store: Arc<dyn crate::session::SessionStore>) -> Self {
        self.session_store = Some(store);
        self
    }

    /// Asks `resolver` whether each request's tenant exists (with
    /// `[tenancy] enabled`): an unknown one is answered 404
    /// `tenant_unknown` before any of the app's code runs.
    ///
    /// ```no_run
    /// # use autumn_core::app;
    /// use autumn_core::tenancy::TenantResolveError;
    ///
    /// # fn demo() -> autumn_core::AppBuilder {
    /// app().with_tenant_resolver(|id: String| async move {
    ///     Ok::<_, TenantResolveError>(id == "acme" || id == "globex")
    /// })
    /// # }
    /// ```
    pub fn with_tenant_resolver(mut self, resolver: impl crate::tenancy::TenantResolver) -> Self {
        self.tenant_resolver = Some(Arc::new(resolver));
        self
    }

    /// Shares `state` with every handler: a handler reads it with
    /// [`State<S>`](crate::state::State), getting its own clone, so a pool
    /// or a client (cheap to clone, shared inside) is registered once here.
    /// Several states of different types can be registered; registering a
    /// type again replaces the earlier value.
    ///
    /// The app's own layers (see [`layer`](Self::layer)) see the state too,
    /// in the request's extensions.
    ///
    /// ```
    /// # use autumn_core::app;
    /// use autumn_core::state::State;
    ///
    /// #[derive(Clone)]
    /// struct Greeting(&'static str);
    ///
    /// async fn hello(State(greeting): State<Greeting>) -> &'static str {
    ///     greeting.0
    /// }
    ///
    /// let app = app()
    ///     .with_state(Greeting("hello"))
    ///     .merge(axum::Router::new().route("/", axum::routing::get(hello)));
    /// ```
    pub fn with_state<S: Clone + Send + Sync + 'static>(mut self, state: S) -> Self {
        self.states.insert(state);
        self
    }

    /// Reads time from `clock` wherever locks and records expire (tests pass
    /// a `ManualClock`).
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Shows browsers `page` for errors with `status` instead of Autumn's
    /// default page; API clients still get the problem document. `page`
    /// returns HTML: a maud `Markup`, or a `String` that escapes what it
    /// takes from the [`ErrorInfo`](crate::error_pages::ErrorInfo).
    ///
    /// ```
    /// # use autumn_core::app;
    /// use http::StatusCode;
    ///
    /// let app = app().with_error_page(StatusCode::NOT_FOUND, |_info| {
    ///     "<h1>Nothing here</h1><p><a href=\"/\">Home</a></p>"
    /// });
    /// ```
    pub fn with_error_page<F, P>(mut self, status: http::StatusCode, page: F) -> Self
    where
        F: Fn(&crate::error_pages::ErrorInfo) -> P + Send + Sync + 'static,
        P: Into<String>,
    {
        self.error_pages = self.error_pages.with_page(status, page);
        self
    }

    /// Renders browsers' error pages with `renderer` for every status
    /// without a [`with_error_page`](Self::with_error_page) of its own
    /// (where it answers `None`, Autumn's default page).
    pub fn with_error_pages(
        mut self,
        renderer: impl crate::error_pages::ErrorPageRenderer,
    ) -> Self {
        self.error_pages = self.error_pages.with_renderer(renderer);
        self
    }

    /// Builds the app as a router, for embedding or for in-process tests.
    ///
    /// Without [`with_config`](Self::with_config), the configuration is
    /// loaded from `autumn.toml` and the environment, as [`run`](Self::run)
    /// does.
    ///
    /// Like `run()`, it first checks the services the configuration names
    /// (Redis answers, the database answers and has the framework tables),
    /// on a runtime of its own.
    ///
    /// # Errors
    ///
    /// [`LaunchError`] when the configuration or the routes are invalid, or a
    /// service is unreachable.
    pub fn into_router(self) -> Result<Router, LaunchError> {
        let launched = self.launch()?;
        launched.startup.check_blocking()?;
        Ok(launched.router)
    }

    /// The app's OpenAPI document, as `GET [openapi] path` would serve it,
    /// whatever the profile serves: the same bytes each time for the same
    /// app and configuration, to be written to a file, committed and
    /// diffed, or handed to a client generator. Nothing is served and no
    /// service is reached. The app's binary writes it with `openapi
    /// [FILE]` (see [`run_command`](Self::run_command)).
    ///
    /// ```
    /// use autumn_core::Route;
    ///
    /// async fn create_order() -> &'static str {
    ///     "created"
    /// }
    ///
    /// let route = Route::new(http::Method::POST, "/orders", axum::routing::post(create_order));
    /// let document = autumn_core::app()
    ///     .routes(vec![route])
    ///     .idempotent()
    ///     .with_config(autumn_core::config::AutumnConfig::default())
    ///     .openapi_document()
    ///     .expect("a valid app");
    /// let document: serde_json::Value = serde_json::from_slice(&document).unwrap();
    /// assert_eq!(document["openapi"], "3.1.0");
    /// assert!(document["paths"]["/orders"]["post"].is_object());
    /// ```
    ///
    /// # Errors
    ///
    /// [`LaunchError`] when the configuration or the routes are invalid.
    pub fn openapi_document(self) -> Result<bytes::Bytes, LaunchError> {
        self.launch_document()
    }
}
