use std::sync::Arc;

use autumn_base::clock::SharedClock;
use autumn_core::config::{AutumnConfig, Profile};
use autumn_core::{AppBuilder, LaunchError, Route};
use autumn_idempotency::MemoryIdempotencyStore;
use axum::Router;

use crate::client::TestClient;

/// Builds an app for a test. See the [crate docs](crate).
#[derive(Default)]
#[must_use = "call .build() to get a client"]
pub struct TestApp {
    builder: AppBuilder,
    config: Option<AutumnConfig>,
    idempotent: bool,
    clock: Option<SharedClock>,
}

impl std::fmt::Debug for TestApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApp")
            .field("builder", &self.builder)
            .field("idempotent", &self.idempotent)
            .finish_non_exhaustive()
    }
}

impl TestApp {
    /// An empty app in the `test` profile with the default configuration
    /// (no `autumn.toml` is read, so tests do not depend on the directory
    /// they run in).
    pub fn new() -> Self {
        Self::default()
    }

    /// Tests an app the way `main` assembles it.
    pub fn from_builder(builder: AppBuilder) -> Self {
        Self {
            builder,
            ..Self::default()
        }
    }

    /// Adds routes, usually `routes![a, b]`.
    pub fn routes(mut self, routes: Vec<Route>) -> Self {
        self.builder = self.builder.routes(routes);
        self
    }

    /// Adds routes under a path prefix.
    pub fn scoped(mut self, prefix: impl Into<String>, routes: Vec<Route>) -> Self {
        self.builder = self.builder.scoped(prefix, routes);
        self
    }

    /// Merges a plain axum router.
    pub fn merge(mut self, router: Router) -> Self {
        self.builder = self.builder.merge(router);
        self
    }

    /// Nests a plain axum router under `path`.
    pub fn nest(mut self, path: impl Into<String>, router: Router) -> Self {
        self.builder = self.builder.nest(path, router);
        self
    }

    /// Uses this configuration (its profile is kept unless it is the default
    /// `dev`, which becomes `test`). Without it, the configuration given to
    /// the builder with `AppBuilder::with_config` is used, else the default.
    pub fn with_config(mut self, config: AutumnConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Uses this configuration.
    #[deprecated(note = "use `with_config`, named as on `AppBuilder`")]
    pub fn config(self, config: AutumnConfig) -> Self {
        self.with_config(config)
    }

    /// Turns on the `Idempotency-Key` middleware with a fresh in-process
    /// memory store, whatever backend the configuration names.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Reads time from `clock` wherever locks and records expire, so a test
    /// moves time forward instead of sleeping.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Reads time from `clock`.
    #[deprecated(note = "use `with_clock`, named as on `AppBuilder` and the stores")]
    pub fn clock(self, clock: SharedClock) -> Self {
        self.with_clock(clock)
    }

    /// Builds the app and returns a client for it.
    ///
    /// # Panics
    ///
    /// When the app cannot launch, with the launch error's message.
    #[track_caller]
    pub fn build(self) -> TestClient {
        match self.try_build() {
            Ok(client) => client,
            Err(error) => panic!("TestApp failed to launch: {error}"),
        }
    }

    /// Builds the app, returning the launch error instead of panicking.
    ///
    /// # Errors
    ///
    /// [`LaunchError`] when the configuration or routes are invalid.
    pub fn try_build(self) -> Result<TestClient, LaunchError> {
        // The builder's own configuration counts too: an app assembled
        // with `AppBuilder::with_config` is tested with it.
        let mut config = self
            .config
            .or_else(|| self.builder.given_config().cloned())
            .unwrap_or_default();
        if config.profile == Profile::default() {
            config.profile = Profile::new("test");
        }
        let mut builder = self.builder.with_config(config.clone());
        if let Some(clock) = &self.clock {
            builder = builder.with_clock(clock.clone());
        }
        if self.idempotent {
            let clock = self
                .clock
                .unwrap_or_else(|| Arc::new(autumn_base::clock::SystemClock));
            let limits = &config.idempotency.memory;
            let store = MemoryIdempotencyStore::new(config.idempotency.ttl())
                .with_clock(clock)
                .with_max_entries(limits.max_entries)
                .with_max_bytes(limits.max_bytes);
            builder = builder.idempotent().with_idempotency_store(Arc::new(store));
        }
        Ok(TestClient::new(builder.into_router()?))
    }
}
