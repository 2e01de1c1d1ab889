//! [`SessionLayer`]: gives every request its [`Session`](super::Session).

use std::sync::Arc;
use std::time::Duration;

use autumn_base::clock::{SharedClock, SystemClock};
use tower::Layer;

use super::cookie::{CookieSettings, SameSite};
use super::service::{SessionService, Settings};
use super::store::SessionStore;

/// The default session lifetime: 14 days since the visitor was last seen.
pub const DEFAULT_TTL: Duration = Duration::from_secs(14 * 24 * 60 * 60);

/// The default name of the session cookie.
pub const DEFAULT_COOKIE_NAME: &str = "autumn_session";

/// Reads the session cookie, hands handlers a [`Session`](super::Session),
/// and on the way out saves what changed and sets the cookie.
///
/// Autumn's app builder installs it from `[session]`; build one yourself to
/// use sessions on a plain axum router.
///
/// ```
/// use std::sync::Arc;
/// use autumn_core::session::{MemorySessionStore, Session, SessionLayer};
/// use axum::{Router, routing::post};
///
/// async fn sign_in(session: Session) -> Result<&'static str, autumn_core::session::SessionError> {
///     session.cycle_id().await?;
///     session.insert("user_id", 7).await?;
///     Ok("signed in")
/// }
///
/// let app: Router = Router::new()
///     .route("/sign-in", post(sign_in))
///     .layer(SessionLayer::new(Arc::new(MemorySessionStore::new(10_000))).with_secure(true));
/// ```
#[derive(Clone)]
pub struct SessionLayer {
    settings: Settings,
}

impl std::fmt::Debug for SessionLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLayer")
            .field("cookie", &self.settings.cookie)
            .finish_non_exhaustive()
    }
}

impl SessionLayer {
    /// Sessions kept in `store`, with the defaults: cookie `autumn_session`,
    /// `HttpOnly`, `SameSite=Lax`, `Path=/`, not `Secure`, 14 days sliding.
    pub fn new(store: Arc<dyn SessionStore>) -> Self {
        Self {
            settings: Settings {
                store,
                clock: Arc::new(SystemClock),
                cookie: Arc::new(CookieSettings {
                    name: DEFAULT_COOKIE_NAME.to_owned(),
                    ttl: DEFAULT_TTL,
                    same_site: SameSite::Lax,
                    secure: false,
                }),
            },
        }
    }

    /// The cookie's name.
    #[must_use]
    pub fn with_cookie_name(mut self, name: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.settings.cookie).name = name.into();
        self
    }

    /// How long a session lives after the visitor was last seen.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        Arc::make_mut(&mut self.settings.cookie).ttl = ttl;
        self
    }

    /// The cookie's `SameSite` attribute.
    #[must_use]
    pub fn with_same_site(mut self, same_site: SameSite) -> Self {
        Arc::make_mut(&mut self.settings.cookie).same_site = same_site;
        self
    }

    /// Whether the cookie is sent over HTTPS only (`Secure`).
    #[must_use]
    pub fn with_secure(mut self, secure: bool) -> Self {
        Arc::make_mut(&mut self.settings.cookie).secure = secure;
        self
    }

    /// The clock expiry is measured on (tests inject a manual one).
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.settings.clock = clock;
        self
    }
}

impl<S> Layer<S> for SessionLayer {
    type Service = SessionService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SessionService::new(inner, self.settings.clone())
    }
}
