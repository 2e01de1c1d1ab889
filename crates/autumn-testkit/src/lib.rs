//! The Autumn workspace's own test support, one copy of each helper the
//! framework's tests, benches and examples share (apps use `autumn-test`):
//!
//! - [`free_port`]: a free loopback port;
//! - [`api_tools`]: the OpenAPI validator and Schemathesis, run as programs;
//! - [`eventually`] / [`eventually_async`]: a bounded wait for a condition,
//!   with a timeout and a panic message that names what never happened;
//! - [`logs`]: what a test logged through `tracing`;
//! - [`postgres`] (feature `postgres`): a schema of the test's own on the
//!   shared PostgreSQL ([`postgres::PgSchema`], dropped on drop), private
//!   servers, PgBouncer, a round-trip counting proxy;
//! - [`redis`] (feature `redis`): the shared Redis, a key prefix per test,
//!   private `redis-server`s, a six-node Redis Cluster, a `MONITOR` reader;
//! - [`tls`] (on with `redis` and `postgres`): a certificate authority of
//!   the test's own ([`tls::TestCa`]), certificates made at run time;
//! - [`smtp`] (feature `smtp`): a real SMTP server (`aiosmtpd`), with
//!   STARTTLS, AUTH, and a mail left unanswered on request;
//! - [`otlp`] (feature `otlp`): an OTLP/HTTP collector on a free loopback
//!   port, recording the spans posted to it;
//! - [`chromium`] (feature `chromium`): headless Chromium through
//!   chromedriver.
//!
//! Services are found through `TEST_REDIS_URL` and `TEST_DATABASE_URL`
//! (defaults `redis://127.0.0.1:6379` and
//! `postgres://postgres@127.0.0.1:5432/test`). A service that does not
//! answer fails the test with a message saying how to start it: a test never
//! passes without the service it is about.
//!
//! The kit depends on no `autumn-*` crate, so that the framework's own crates
//! can use it in their tests; fakes built on their types (counting or failing
//! stores) stay in each crate's `tests/it/support/`.

pub mod api_tools;
#[cfg(feature = "chromium")]
pub mod chromium;
#[cfg(feature = "framework")]
pub mod framework;
pub mod logs;
#[cfg(feature = "otlp")]
pub mod otlp;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "smtp")]
pub mod smtp;
#[cfg(feature = "tls")]
pub mod tls;
mod wait;

pub use wait::{Outcome, eventually, eventually_async};

/// A loopback port nothing listens on right now. Another process may take it
/// before the caller binds it: callers that start a server on it retry on a
/// new port when the bind fails.
///
/// # Panics
///
/// When the system has no free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Runs the future `work` makes on a runtime of its own, on a thread of its
/// own, and returns its output: a synchronous setup step (or a `Drop`) can
/// use async clients from inside an async test this way.
///
/// # Panics
///
/// When `work` panics (the panic is passed on).
pub fn on_own_runtime<T, F>(work: impl FnOnce() -> F + Send + 'static) -> T
where
    T: Send + 'static,
    F: Future<Output = T>,
{
    match std::thread::spawn(move || own_runtime().block_on(work())).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

fn own_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}
