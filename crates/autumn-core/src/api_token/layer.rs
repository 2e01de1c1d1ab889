//! [`RequireApiTokenLayer`]: the layer.

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
/// use autumn_core::api_token::{ApiTokens, MemoryApiTokenStore, RequireApiTokenLayer};
///
/// let tokens = ApiTokens::new(Arc::new(MemoryApiTokenStore::new()));
/// let app = autumn_core::app().api_tokens(RequireApiTokenLayer::new(tokens));
/// # let _ = app;
/// ```
#[derive(Clone, Debug)]
pub struct RequireApiTokenLayer {
    pub(crate) settings: Arc<Settings>,
}

impl RequireApiTokenLayer {
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

impl RequireApiTokenLayer {
    /// The same layer, marked as mounted on the whole app by
    /// `AppBuilder::api_tokens`: its service then publishes who the token
    /// acts for, and the idempotency layer scopes a retry by that principal.
    pub(crate) fn registered(self) -> Self {
        self.with(|settings| settings.registered = true)
    }
}

/// Marks `layer` as mounted by `AppBuilder::layer` when it is a
/// [`RequireApiTokenLayer`] itself (not one wrapped in another layer): the
/// way before `AppBuilder::api_tokens`, kept because it is what many apps
/// (and the idempotency guide) do.
/// Whether it was one.
pub(crate) fn register<L: Any>(layer: &mut L) -> bool {
    if let Some(require) = (layer as &mut dyn Any).downcast_mut::<RequireApiTokenLayer>() {
        *require = require.clone().registered();
        return true;
    }
    false
}

impl<S> Layer<S> for RequireApiTokenLayer {
    type Service = RequireApiTokenService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequireApiTokenService::new(inner, self.settings.clone())
    }
}
