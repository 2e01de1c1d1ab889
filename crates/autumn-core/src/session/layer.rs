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

/// How long a session may live at most, from its creation or last sign-in,
/// by default (`[session] absolute_ttl_secs`): 30 days, so a stolen cookie
/// of a visitor who keeps coming back does not work forever.
pub const DEFAULT_ABSOLUTE_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// The default configured name of the session cookie (`[session]
/// cookie_name`), before the `__Host-` prefix a `Secure` cookie gets.
pub const DEFAULT_COOKIE_NAME: &str = "autumn_session";

/// The name the session cookie is sent under by default:
/// [`DEFAULT_COOKIE_NAME`] with the `__Host-` prefix, since the cookie is
/// `Secure` by default. What the default `[session]` gives
/// (`SessionConfig::default().effective_cookie_name()`) and a
/// [`SessionLayer::new`] without `with_*` calls writes and reads.
pub const DEFAULT_SECURE_COOKIE_NAME: &str = "__Host-autumn_session";

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
///     .layer(SessionLayer::new(Arc::new(MemorySessionStore::new(10_000))));
/// ```
#[derive(Clone)]
pub struct SessionLayer {
    settings: Settings,
    /// The name given to [`with_cookie_name`](Self::with_cookie_name),
    /// before the prefix: kept so `with_secure` can recompute the name
    /// whichever is called first.
    configured_name: String,
}

impl std::fmt::Debug for SessionLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLayer")
            .field("cookie", &self.settings.cookie)
            .finish_non_exhaustive()
    }
}

impl SessionLayer {
    /// Sessions kept in `store`, with the defaults of `[session]`: cookie
    /// `__Host-autumn_session`, `Secure`, `HttpOnly`, `SameSite=Lax`,
    /// `Path=/`, no `Domain`, 14 days sliding, 30 days at most.
    pub fn new(store: Arc<dyn SessionStore>) -> Self {
        let mut layer = Self {
            settings: Settings {
                store,
                clock: Arc::new(SystemClock),
                cookie: Arc::new(CookieSettings {
                    name: String::new(),
                    ttl: DEFAULT_TTL,
                    absolute_ttl: Some(DEFAULT_ABSOLUTE_TTL),
                    same_site: SameSite::Lax,
                    secure: true,
                }),
            },
            configured_name: DEFAULT_COOKIE_NAME.to_owned(),
        };
        layer.name_cookie();
        layer
    }

    /// The cookie's name, as `[session] cookie_name` takes it: while the
    /// cookie is `Secure`, a name without a `__Host-` or `__Secure-` prefix
    /// is written and read as `__Host-{name}` (the browser then refuses
    /// such a cookie from a sibling subdomain or a plain-HTTP page); a
    /// prefixed name, or any name without `Secure`, is used as is.
    #[must_use]
    pub fn with_cookie_name(mut self, name: impl Into<String>) -> Self {
        self.configured_name = name.into();
        self.name_cookie();
        self
    }

    /// The name the cookie is written and read under, by the same rule as
    /// `SessionConfig::effective_cookie_name`.
    fn name_cookie(&mut self) {
        let cookie = Arc::make_mut(&mut self.settings.cookie);
        cookie.name = crate::config::session_cookie_name(&self.configured_name, cookie.secure);
    }

    /// How long a session lives after the visitor was last seen.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        Arc::make_mut(&mut self.settings.cookie).ttl = ttl;
        self
    }

    /// How long a session may live at most, from its creation or its last
    /// [`sign_in`](super::Session::sign_in), however active the visitor
    /// (`[session] absolute_ttl_secs`); `None` for no limit. By default
    /// [`DEFAULT_ABSOLUTE_TTL`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use autumn_core::session::{MemorySessionStore, SessionLayer};
    ///
    /// let layer = SessionLayer::new(Arc::new(MemorySessionStore::new(10_000)))
    ///     .with_ttl(Duration::from_secs(30 * 60))
    ///     .with_absolute_ttl(Some(Duration::from_secs(12 * 60 * 60)));
    /// # let _ = layer;
    /// ```
    #[must_use]
    pub fn with_absolute_ttl(mut self, absolute_ttl: Option<Duration>) -> Self {
        Arc::make_mut(&mut self.settings.cookie).absolute_ttl = absolute_ttl;
        self
    }

    /// The cookie's `SameSite` attribute.
    #[must_use]
    pub fn with_same_site(mut self, same_site: SameSite) -> Self {
        Arc::make_mut(&mut self.settings.cookie).same_site = same_site;
        self
    }

    /// Whether the cookie is sent over HTTPS only (`Secure`); on by
    /// default. Browsers keep a `Secure` cookie on `http://localhost` and
    /// `http://127.0.0.1` too; turn it off only for plain HTTP at another
    /// address, which also drops the `__Host-` prefix (see
    /// [`with_cookie_name`](Self::with_cookie_name)).
    #[must_use]
    pub fn with_secure(mut self, secure: bool) -> Self {
        Arc::make_mut(&mut self.settings.cookie).secure = secure;
        self.name_cookie();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SessionConfig;
    use crate::session::MemorySessionStore;

    fn name(layer: &SessionLayer) -> &str {
        &layer.settings.cookie.name
    }

    #[test]
    fn the_default_cookie_is_secure_under_the_host_prefix_like_the_config() {
        let layer = SessionLayer::new(Arc::new(MemorySessionStore::new(1)));
        assert!(layer.settings.cookie.secure);
        assert_eq!(name(&layer), DEFAULT_SECURE_COOKIE_NAME);
        assert_eq!(
            SessionConfig::default().effective_cookie_name(),
            DEFAULT_SECURE_COOKIE_NAME
        );
    }

    #[test]
    fn the_prefix_follows_secure_whichever_is_set_first() {
        let store = || SessionLayer::new(Arc::new(MemorySessionStore::new(1)));
        assert_eq!(name(&store().with_cookie_name("sid")), "__Host-sid");
        assert_eq!(
            name(&store().with_secure(false).with_cookie_name("sid")),
            "sid"
        );
        assert_eq!(
            name(&store().with_cookie_name("sid").with_secure(false)),
            "sid"
        );
        assert_eq!(
            name(&store().with_secure(false).with_secure(true)),
            DEFAULT_SECURE_COOKIE_NAME
        );
        for prefixed in ["__Host-sid", "__Secure-sid", "__host-sid"] {
            assert_eq!(name(&store().with_cookie_name(prefixed)), prefixed);
        }
    }
}
