//! [`RequireApiToken`]: the layer.

use std::any::Any;
use std::sync::Arc;

use tower::Layer;

use super::service::{RequireApiTokenService, Settings};
use super::tokens::ApiTokens;

/// Refuses requests without a valid API token, and tells handlers (through
/// [`ApiPrincipal`](super::ApiPrincipal)) and the idempotency layer who the
/// token acts for. See the [module docs](super).
///
/// ```
/// use std::sync::Arc;
/// use autumn_core::api_token::{ApiTokens, MemoryApiTokenStore, RequireApiToken};
///
/// let tokens = ApiTokens::new(Arc::new(MemoryApiTokenStore::new()));
/// let app = autumn_core::app().layer(RequireApiToken::new(tokens));
/// # let _ = app;
/// ```
#[derive(Clone, Debug)]
pub struct RequireApiToken {
    pub(crate) settings: Arc<Settings>,
}

impl RequireApiToken {
    /// Requires a token from `tokens` on every request.
    pub fn new(tokens: ApiTokens) -> Self {
        Self {
            settings: Arc::new(Settings {
                tokens,
                anonymous: false,
                registered: false,
            }),
        }
    }

    /// Lets requests that send no bearer token through, without an
    /// [`ApiPrincipal`](super::ApiPrincipal): for an app whose browsers use a
    /// session where agents use a token. A request that sends one still
    /// needs a valid one.
    #[must_use]
    pub fn allow_anonymous(self) -> Self {
        self.with(|settings| settings.anonymous = true)
    }

    fn with(self, change: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = Settings {
            tokens: self.settings.tokens.clone(),
            anonymous: self.settings.anonymous,
            registered: self.settings.registered,
        };
        change(&mut settings);
        Self {
            settings: Arc::new(settings),
        }
    }
}

/// Marks `layer` as mounted by `AppBuilder::layer` when it is a
/// [`RequireApiToken`] itself (not one wrapped in another layer).
pub(crate) fn register<L: Any>(layer: &mut L) {
    if let Some(require) = (layer as &mut dyn Any).downcast_mut::<RequireApiToken>() {
        *require = require.clone().with(|settings| settings.registered = true);
    }
}

impl<S> Layer<S> for RequireApiToken {
    type Service = RequireApiTokenService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequireApiTokenService::new(inner, self.settings.clone())
    }
}
