//! The saas example: accounts (sign up, log in, log out, a profile with a
//! picture) whose every form runs at most once.
//!
//! Each form page renders a one-time submit token in a hidden field; the
//! submit-token layer, on by default, runs each POST once per rendered form.
//! A double-click, a reload that resends the post or a browser retry gets
//! the first answer again (marked `x-submit-token-replayed: true`),
//! including the session cookie it set, and changes nothing.
//!
//! - `POST /signup` creates the user, signs them in on a new session id and
//!   answers 303 to `/account`, which greets them once ("Welcome, NAME!");
//! - `POST /login` checks the password (Argon2), counts the login, signs
//!   the user in on a new session id, 303 to `/account`;
//! - `POST /logout` forgets the session, 303 to `/`;
//! - `GET /account` is for a signed-in user only (else 303 to `/login`),
//!   with the profile form: a display name and a picture, posted as
//!   multipart and stored in the database, served at `/account/avatar`.
//!
//! `GET /users`, `/users.json` and `/stats.json` list the accounts and count
//! logins and uploads. Everything lives in the app database (`[database]
//! url`, PostgreSQL or SQLite); `main` uses `sqlite://saas.db` when none is
//! configured. Sessions live where `[session] backend` says.

mod html_errors;
pub mod invoices;
pub mod mails;
mod password;
mod routes;
mod signed_in;
mod users;

use std::sync::Arc;
use std::time::Duration;

use autumn_web::AppBuilder;
use autumn_web::config::{AutumnConfig, Backend, RateLimitRule};

pub use routes::account::{MAX_AVATAR_BYTES, MAX_NAME_CHARS};
pub use routes::auth::{LoginForm, MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS, SignupForm};
pub use routes::invoices::{InvoiceInput, LineInput, MAX_LINES};
pub use users::{Avatar, Stats, User, Users};

/// The environment variable holding an artificial delay, in milliseconds,
/// that the form posts that change something (sign-up, log-in, the profile)
/// wait, once the form is valid, before they do it (0 by default). End-to-
/// end tests set it so that a double-click really sends two overlapping
/// posts.
pub const POST_DELAY_VAR: &str = "SAAS_POST_DELAY_MS";

/// The environment variable that makes `main` include the double-submit
/// guard script in its pages: `1` or `true` (off by default).
pub const GUARD_VAR: &str = "SAAS_DOUBLE_SUBMIT_GUARD";

/// How long a duplicate post waits for the first one when the configuration
/// does not say (see [`configure`]).
pub const DEFAULT_IN_FLIGHT_WAIT_MS: u64 = 5000;

/// The rule `POST /login` counts attempts under per email address, so that
/// one account is not guessed at from many addresses.
pub const LOGIN_ACCOUNT_RULE: &str = "login_account";

/// The database `main` uses when `[database] url` is unset: a SQLite file in
/// the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://saas.db";

/// The environment variable that keeps this process from running the
/// invoice email hook (`1` or `true`): its queue rows wait for a process
/// without it. The crash test uses it to kill the app after the commit and
/// before the hook ran.
pub const JOBS_PAUSED_VAR: &str = "SAAS_JOBS_PAUSED";

/// What the handlers read from the request extensions.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    /// Whether pages include the double-submit guard script.
    pub(crate) with_guard: bool,
    /// How long a valid form post waits before it changes anything.
    pub(crate) post_delay: Duration,
    /// Where `POST /signup` stops before creating the user, for tests.
    pub(crate) gate: Option<SignupGate>,
}

impl Site {
    /// Waits [`POST_DELAY_VAR`]'s delay, if any: long enough for a
    /// double-click to send a second post while this one still runs.
    pub(crate) async fn hold(&self) {
        if !self.post_delay.is_zero() {
            tokio::time::sleep(self.post_delay).await;
        }
    }
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

/// The app, with the form-post delay read from [`POST_DELAY_VAR`].
///
/// With `with_guard`, pages include
/// [`double_submit_guard`](autumn_web::security::double_submit_guard), which
/// stops most double-clicks in the browser. Off, the server's submit token is
/// the only guard, which is what a browser without JavaScript gets anyway.
pub fn app(with_guard: bool) -> AppBuilder {
    app_with_delay(with_guard, post_delay_from_env())
}

/// The app, with each valid form post waiting `post_delay` before it changes
/// anything.
pub fn app_with_delay(with_guard: bool, post_delay: Duration) -> AppBuilder {
    app_with_site(Site {
        with_guard,
        post_delay,
        gate: None,
    })
}

/// The app, with `POST /signup` stopping at `gate` before it creates the
/// user.
pub fn app_with_gate(with_guard: bool, gate: SignupGate) -> AppBuilder {
    app_with_site(Site {
        with_guard,
        post_delay: Duration::ZERO,
        gate: Some(gate),
    })
}

fn app_with_site(site: Site) -> AppBuilder {
    autumn_web::app()
        .routes(routes::all())
        // Sign-in and sign-up are where guessing and account floods
        // happen; `[rate_limit.rules.NAME]` in autumn.toml replaces each.
        // 20 attempts a minute from one address, then one every 3 s.
        .rate_limit_rule("login", RateLimitRule::new(20, 60))
        // 10 attempts at one account every 15 minutes, whatever the address.
        .rate_limit_rule(LOGIN_ACCOUNT_RULE, RateLimitRule::new(10, 900))
        // 20 accounts an hour from one address.
        .rate_limit_rule("signup", RateLimitRule::new(20, 3600))
        .with_error_pages(html_errors::SitePages(site.clone()))
        .layer(axum::Extension(site))
        .layer(axum::Extension(users::UsersTable::default()))
        // The JSON API (`POST /api/invoices`) takes an `Idempotency-Key`;
        // requests without one, the forms among them, pass through.
        .idempotent()
        // A confirmation per sign-up and a copy of each invoice, sent once:
        // `[mail]` says how (files under dev, SMTP in production).
        .mail_from(mails::DEFAULT_FROM)
        .with_commit_hooks(
            invoices::Invoices::commit_hooks()
                .paused(jobs_paused_from_env())
                .lease(job_lease_from_env()),
        )
}

/// The environment variable holding how long, in milliseconds, a job stays
/// claimed by a worker that stopped renewing it (60 s by default): the
/// crash tests shorten it so a restarted process takes over soon.
pub const JOB_LEASE_VAR: &str = "SAAS_JOB_LEASE_MS";

/// [`JOB_LEASE_VAR`] as a duration: 60 s when unset or not a number.
pub fn job_lease_from_env() -> Duration {
    std::env::var(JOB_LEASE_VAR)
        .ok()
        .and_then(|ms| ms.trim().parse().ok())
        .map_or(Duration::from_secs(60), Duration::from_millis)
}

/// Whether [`JOBS_PAUSED_VAR`] asks this process not to run hooks.
pub fn jobs_paused_from_env() -> bool {
    std::env::var(JOBS_PAUSED_VAR)
        .is_ok_and(|value| matches!(value.trim().to_ascii_lowercase().as_str(), "1" | "true"))
}

/// [`POST_DELAY_VAR`] as a duration: zero when unset or not a number.
pub fn post_delay_from_env() -> Duration {
    std::env::var(POST_DELAY_VAR)
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
    // The API's records live in the app database, committed with the
    // invoice they answer (`IdempotencyTx`), so a retry after a restart is
    // still a replay. Submit tokens stay where they were.
    if config.idempotency.backend == Backend::Memory {
        if config.security.submit_token.backend.is_none() {
            config.security.submit_token.backend = Some(Backend::Memory);
        }
        config.idempotency.backend = Backend::Database;
    }
    let submit_token = &mut config.security.submit_token;
    if submit_token.in_flight_wait_ms == 0 {
        submit_token.in_flight_wait_ms = DEFAULT_IN_FLIGHT_WAIT_MS;
    }
    config
}
