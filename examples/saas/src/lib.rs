//! The saas example: a signup form that creates each account at most once.
//!
//! `GET /signup` renders a plain HTML form carrying a one-time submit token
//! in a hidden field; `POST /signup` validates it, creates the user and
//! answers `303 See Other` to `/welcome`. The submit-token layer, on by
//! default, runs that POST once per rendered form: a double-click, a reload
//! that resends the post or a browser retry gets the first answer again
//! (marked `x-submit-token-replayed: true`) and creates nothing.
//!
//! `GET /users` and `GET /users.json` list the accounts. Users live in the
//! app database (`[database] url`, PostgreSQL or SQLite); `main` uses
//! `sqlite://saas.db` when none is configured.

mod routes;
mod users;

use std::sync::Arc;
use std::time::Duration;

use autumn_web::AppBuilder;
use autumn_web::config::AutumnConfig;

pub use routes::auth::SignupForm;
pub use users::{User, Users};

/// The environment variable holding an artificial delay, in milliseconds,
/// that `POST /signup` waits before creating the user (0 by default). End-to-
/// end tests set it so that a double-click really sends two overlapping
/// posts.
pub const SIGNUP_DELAY_VAR: &str = "SAAS_SIGNUP_DELAY_MS";

/// The environment variable that makes `main` include the double-submit
/// guard script in its pages: `1` or `true` (off by default).
pub const GUARD_VAR: &str = "SAAS_DOUBLE_SUBMIT_GUARD";

/// How long a duplicate post waits for the first one when the configuration
/// does not say (see [`configure`]).
pub const DEFAULT_IN_FLIGHT_WAIT_MS: u64 = 5000;

/// The database `main` uses when `[database] url` is unset: a SQLite file in
/// the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://saas.db";

/// What the handlers read from the request extensions.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    /// Whether pages include the double-submit guard script.
    pub(crate) with_guard: bool,
    /// How long `POST /signup` waits before creating the user.
    pub(crate) signup_delay: Duration,
    /// Where `POST /signup` stops before creating the user, for tests.
    pub(crate) gate: Option<SignupGate>,
}

/// A point where `POST /signup` stops, once the form is valid and before it
/// creates the user, until the gate is opened: tests use it to order
/// requests by what the handler has done, not by time.
///
/// ```no_run
/// # async fn demo() {
/// let gate = saas::SignupGate::default();
/// let app = saas::app_with_gate(false, gate.clone());
/// // ... post the form on another task ...
/// gate.started().await; // the handler is running
/// gate.open(); // let it create the user
/// # let _ = app;
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct SignupGate {
    started: Arc<tokio::sync::Notify>,
    open: Arc<tokio::sync::Notify>,
}

impl SignupGate {
    /// Waits until a `POST /signup` has reached the gate (or returns at
    /// once if one already has, unseen).
    pub async fn started(&self) {
        self.started.notified().await;
    }

    /// Lets one handler waiting at the gate (or the next to reach it) go on.
    pub fn open(&self) {
        self.open.notify_one();
    }

    pub(crate) async fn pass(&self) {
        self.started.notify_one();
        self.open.notified().await;
    }
}

/// The app, with the signup delay read from [`SIGNUP_DELAY_VAR`].
///
/// With `with_guard`, pages include
/// [`double_submit_guard`](autumn_web::security::double_submit_guard), which
/// stops most double-clicks in the browser. Off, the server's submit token is
/// the only guard, which is what a browser without JavaScript gets anyway.
pub fn app(with_guard: bool) -> AppBuilder {
    app_with_delay(with_guard, signup_delay_from_env())
}

/// The app, with `POST /signup` waiting `signup_delay` before it creates the
/// user.
pub fn app_with_delay(with_guard: bool, signup_delay: Duration) -> AppBuilder {
    app_with_site(Site {
        with_guard,
        signup_delay,
        gate: None,
    })
}

/// The app, with `POST /signup` stopping at `gate` before it creates the
/// user.
pub fn app_with_gate(with_guard: bool, gate: SignupGate) -> AppBuilder {
    app_with_site(Site {
        with_guard,
        signup_delay: Duration::ZERO,
        gate: Some(gate),
    })
}

fn app_with_site(site: Site) -> AppBuilder {
    autumn_web::app()
        .routes(routes::all())
        .layer(axum::Extension(site))
        .layer(axum::Extension(users::UsersTable::default()))
}

/// [`SIGNUP_DELAY_VAR`] as a duration: zero when unset or not a number.
pub fn signup_delay_from_env() -> Duration {
    std::env::var(SIGNUP_DELAY_VAR)
        .ok()
        .and_then(|ms| ms.trim().parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis)
}

/// Whether [`GUARD_VAR`] asks for the guard script.
pub fn guard_from_env() -> bool {
    std::env::var(GUARD_VAR)
        .is_ok_and(|value| matches!(value.trim().to_ascii_lowercase().as_str(), "1" | "true"))
}

/// The example's defaults over a loaded configuration: the SQLite file
/// [`DEFAULT_DATABASE_URL`] when no database is configured, and a duplicate
/// submission waiting up to [`DEFAULT_IN_FLIGHT_WAIT_MS`] for the first when
/// `security.submit_token.in_flight_wait_ms` is unset (0).
pub fn configure(mut config: AutumnConfig) -> AutumnConfig {
    if config.database.url.is_none() {
        config.database.url = Some(DEFAULT_DATABASE_URL.to_owned());
    }
    // A double-click sends two posts, and the browser shows the answer to
    // the *last* one. Answered at once, that duplicate would get 409 and the
    // user would see an error page although the account was created. Made to
    // wait, it gets the first post's 303 replayed and lands on the welcome
    // page like the first one would have.
    let submit_token = &mut config.security.submit_token;
    if submit_token.in_flight_wait_ms == 0 {
        submit_token.in_flight_wait_ms = DEFAULT_IN_FLIGHT_WAIT_MS;
    }
    config
}
