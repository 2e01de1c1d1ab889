//! Signing in and out through the session layer, on the memory, Redis and
//! PostgreSQL stores: the id rotates on sign-in, a sign-out or a password
//! change ends sessions for good, and a session expires at its absolute
//! lifetime however active. Browsers are cookie jars of one cookie; time is
//! a `ManualClock`.

use crate::support::database;
use crate::support::redis_support;

use std::sync::Arc;
use std::time::Duration;

use autumn_core::session::{
    DbSessionStore, MemorySessionStore, RedisSessionStore, Session, SessionError, SessionLayer,
    SessionStore,
};
use autumn_idempotency::RedisConnection;
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::database::DbPool;
use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::routing::{get, post};
use http::{Request, header};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

const COOKIE: &str = "sid";

fn memory() -> Arc<dyn SessionStore> {
    Arc::new(MemorySessionStore::new(10_000))
}

fn redis() -> Arc<dyn SessionStore> {
    let url = redis_support::require_redis();
    let connection = RedisConnection::new(&url).expect("a Redis URL");
    Arc::new(RedisSessionStore::new(
        connection,
        &redis_support::unique_prefix(),
    ))
}

fn postgres() -> Arc<dyn SessionStore> {
    let url = database::fresh_postgres_schema().keep();
    let pool = DbPool::new(&url, 4, Duration::from_secs(5)).expect("pool");
    Arc::new(DbSessionStore::new(pool))
}

async fn whoami(session: Session) -> Result<String, SessionError> {
    let cart: Option<String> = session.get("cart").await?;
    Ok(format!(
        "{} cart={}",
        session
            .principal()
            .await?
            .unwrap_or_else(|| "nobody".to_owned()),
        cart.unwrap_or_default()
    ))
}

async fn fill_cart(session: Session, Path(item): Path<String>) -> Result<(), SessionError> {
    session.insert("cart", item).await
}

async fn sign_in(session: Session, Path(user): Path<String>) -> Result<(), SessionError> {
    session.sign_in(user).await
}

async fn sign_out(session: Session) -> Result<(), SessionError> {
    session.sign_out().await
}

async fn end_others(session: Session) -> Result<String, SessionError> {
    Ok(session.end_other_sessions().await?.to_string())
}

async fn everywhere(session: Session) -> Result<String, SessionError> {
    Ok(session.sign_out_everywhere().await?.to_string())
}

fn app(layer: SessionLayer) -> Router {
    Router::new()
        .route("/whoami", get(whoami))
        .route("/cart/{item}", post(fill_cart))
        .route("/sign-in/{user}", post(sign_in))
        .route("/sign-out", post(sign_out))
        .route("/end-others", post(end_others))
        .route("/everywhere", post(everywhere))
        .layer(layer)
}

fn layer(store: Arc<dyn SessionStore>, clock: &Arc<ManualClock>) -> SessionLayer {
    SessionLayer::new(store)
        .with_cookie_name(COOKIE)
        .with_secure(false)
        .with_ttl(Duration::from_secs(60 * 60))
        .with_absolute_ttl(None)
        .with_clock(clock.clone())
}

/// A browser: the one session cookie it holds.
#[derive(Default, Clone)]
struct Browser {
    cookie: Option<String>,
}

impl Browser {
    /// Sends `method path` with the cookie, keeps what `Set-Cookie` says,
    /// and returns the body (the status must be a success).
    async fn send(&mut self, app: &Router, method: &str, path: &str) -> String {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(cookie) = &self.cookie {
            request = request.header(header::COOKIE, format!("{COOKIE}={cookie}"));
        }
        let response = app
            .clone()
            .oneshot(request.body(Body::empty()).expect("a request"))
            .await
            .expect("infallible");
        assert!(
            response.status().is_success(),
            "{method} {path}: {}",
            response.status()
        );
        for set in response.headers().get_all(header::SET_COOKIE) {
            let set = set.to_str().expect("ASCII");
            let value = set
                .strip_prefix(&format!("{COOKIE}="))
                .and_then(|rest| rest.split(';').next())
                .expect("the session cookie");
            self.cookie = (!value.is_empty()).then(|| value.to_owned());
        }
        let body = response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        String::from_utf8(body.to_vec()).expect("UTF-8")
    }

    async fn whoami(&mut self, app: &Router) -> String {
        self.send(app, "GET", "/whoami").await
    }
}

async fn sign_in_rotates_the_id_and_keeps_the_guests_values(store: Arc<dyn SessionStore>) {
    let app = app(layer(store, &Arc::new(ManualClock::new())));
    let mut browser = Browser::default();
    browser.send(&app, "POST", "/cart/apples").await;
    let guest = browser.clone();
    assert!(guest.cookie.is_some(), "the guest got a session");
    browser.send(&app, "POST", "/sign-in/alice").await;
    assert_ne!(browser.cookie, guest.cookie, "signing in rotates the id");
    assert_eq!(browser.whoami(&app).await, "alice cart=apples");
    let mut planted = guest;
    assert_eq!(
        planted.whoami(&app).await,
        "nobody cart=",
        "the id from before sign-in grants nothing"
    );
}

async fn signing_in_as_someone_else_drops_the_values(store: Arc<dyn SessionStore>) {
    let app = app(layer(store, &Arc::new(ManualClock::new())));
    let mut browser = Browser::default();
    browser.send(&app, "POST", "/sign-in/alice").await;
    browser.send(&app, "POST", "/cart/alices-secret").await;
    browser.send(&app, "POST", "/sign-in/alice").await;
    assert_eq!(browser.whoami(&app).await, "alice cart=alices-secret");
    browser.send(&app, "POST", "/sign-in/bob").await;
    assert_eq!(browser.whoami(&app).await, "bob cart=");
}

async fn sign_out_removes_the_cookie_and_ends_the_session(store: Arc<dyn SessionStore>) {
    let app = app(layer(store, &Arc::new(ManualClock::new())));
    let mut browser = Browser::default();
    browser.send(&app, "POST", "/sign-in/alice").await;
    let signed_in = browser.clone();
    browser.send(&app, "POST", "/sign-out").await;
    assert_eq!(browser.cookie, None, "the cookie is removed");
    assert_eq!(browser.whoami(&app).await, "nobody cart=");
    let mut replayed = signed_in;
    assert_eq!(
        replayed.whoami(&app).await,
        "nobody cart=",
        "the old cookie is dead"
    );
    let mut other = Browser::default();
    other.send(&app, "POST", "/sign-in/alice").await;
    assert_eq!(
        other.send(&app, "POST", "/end-others").await,
        "0",
        "a signed-out session is no one's to end"
    );
}

async fn a_password_change_ends_the_users_other_sessions(store: Arc<dyn SessionStore>) {
    let app = app(layer(store, &Arc::new(ManualClock::new())));
    let (mut laptop, mut phone, mut tablet, mut bobs) = (
        Browser::default(),
        Browser::default(),
        Browser::default(),
        Browser::default(),
    );
    for (browser, user) in [
        (&mut laptop, "alice"),
        (&mut phone, "alice"),
        (&mut tablet, "alice"),
        (&mut bobs, "bob"),
    ] {
        browser
            .send(&app, "POST", &format!("/sign-in/{user}"))
            .await;
    }
    let kept = laptop.cookie.clone();
    assert_eq!(laptop.send(&app, "POST", "/end-others").await, "2");
    assert_eq!(laptop.cookie, kept, "this session keeps its id");
    assert_eq!(laptop.whoami(&app).await, "alice cart=");
    assert_eq!(phone.whoami(&app).await, "nobody cart=");
    assert_eq!(tablet.whoami(&app).await, "nobody cart=");
    assert_eq!(
        bobs.whoami(&app).await,
        "bob cart=",
        "another user's session"
    );
}

async fn sign_out_everywhere_ends_every_session_of_the_user(store: Arc<dyn SessionStore>) {
    let app = app(layer(store, &Arc::new(ManualClock::new())));
    let (mut laptop, mut phone) = (Browser::default(), Browser::default());
    laptop.send(&app, "POST", "/sign-in/alice").await;
    phone.send(&app, "POST", "/sign-in/alice").await;
    assert_eq!(phone.send(&app, "POST", "/everywhere").await, "2");
    assert_eq!(phone.cookie, None, "this browser is signed out too");
    assert_eq!(laptop.whoami(&app).await, "nobody cart=");
}

/// Sliding 1 h, absolute 3 h: a visitor seen every 50 minutes stays signed
/// in until 3 h after sign-in, and not a moment longer; signing in again
/// starts the 3 h again.
async fn a_session_expires_at_its_absolute_lifetime_however_active(store: Arc<dyn SessionStore>) {
    let clock = Arc::new(ManualClock::starting_at(1_000_000));
    let app = app(layer(store, &clock).with_absolute_ttl(Some(Duration::from_secs(3 * 60 * 60))));
    let mut browser = Browser::default();
    browser.send(&app, "POST", "/sign-in/alice").await;
    for _ in 0..3 {
        clock.advance(Duration::from_secs(50 * 60));
        assert_eq!(browser.whoami(&app).await, "alice cart=", "still active");
    }
    clock.advance(Duration::from_secs(29 * 60));
    assert_eq!(browser.whoami(&app).await, "alice cart=", "2 h 59 min");
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        browser.whoami(&app).await,
        "nobody cart=",
        "3 h after sign-in, however active"
    );
    browser.send(&app, "POST", "/sign-in/alice").await;
    clock.advance(Duration::from_secs(50 * 60));
    assert_eq!(
        browser.whoami(&app).await,
        "alice cart=",
        "a new sign-in starts the lifetime again"
    );
}

/// The same visits without an absolute lifetime: only the sliding one.
async fn without_an_absolute_lifetime_an_active_session_lives_on(store: Arc<dyn SessionStore>) {
    let clock = Arc::new(ManualClock::starting_at(1_000_000));
    let app = app(layer(store, &clock));
    let mut browser = Browser::default();
    browser.send(&app, "POST", "/sign-in/alice").await;
    for _ in 0..6 {
        clock.advance(Duration::from_secs(50 * 60));
        assert_eq!(browser.whoami(&app).await, "alice cart=");
    }
}

macro_rules! on_every_store {
    ($($check:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(super::memory()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(super::redis()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(super::postgres()).await;
                }
            )*
        }
    };
}

on_every_store!(
    sign_in_rotates_the_id_and_keeps_the_guests_values,
    signing_in_as_someone_else_drops_the_values,
    sign_out_removes_the_cookie_and_ends_the_session,
    a_password_change_ends_the_users_other_sessions,
    sign_out_everywhere_ends_every_session_of_the_user,
    a_session_expires_at_its_absolute_lifetime_however_active,
    without_an_absolute_lifetime_an_active_session_lives_on,
);
