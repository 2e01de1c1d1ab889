//! Autumn's foundation: what every other Autumn crate builds on, and knows
//! nothing of idempotency keys, sessions or apps.
//!
//! - [`clock`]: the [`Clock`](clock::Clock) that decides when things
//!   expire, and [`ManualClock`](clock::ManualClock) for tests;
//! - [`problem`]: RFC 7807 problem documents, the one shape every error
//!   Autumn sends takes: [`ProblemCode`] and the status codes
//!   ([`problem::codes`]), [`ProblemDetails`], the one renderer
//!   ([`render_problem`], [`problem_into_response!`]) and [`Problem`];
//! - [`redact`]: [`redact_passwords`], keeping secrets out of logs and
//!   error messages;
//! - [`seal`]: [`SecretKeys`](seal::SecretKeys), sealing what a store
//!   keeps (recorded cookies and bodies) under the app's secret key;
//! - [`address`]: the address one client counts as (an IPv6 client by
//!   its /64);
//! - [`body`]: reading a request or response body whole, up to a limit;
//! - [`log_summary`]: [`LogSummary`](log_summary::LogSummary), one warning
//!   per interval for what a flood of requests would log each time;
//! - [`paths`]: [`ExemptPaths`], the path prefixes a guard skips;
//! - `database` (features `postgres`, `sqlite`): the app's connection pool
//!   (`DbPool`), its connections, the SQL helpers every framework table
//!   uses, and the framework's migrations (`FRAMEWORK_MIGRATIONS`);
//! - `redis` (feature `redis`): the `RedisConnection` every Redis store of an
//!   app shares, on one server or a Redis Cluster, and its `RedisError`.
//!
//! Apps reach all of it through `autumn_web`; this crate depends on no other
//! Autumn crate.

pub mod address;
pub mod body;
pub mod clock;
#[cfg(feature = "database")]
pub mod database;
pub mod log_summary;
pub mod paths;
pub mod problem;
pub mod redact;
#[cfg(feature = "redis")]
pub mod redis;
pub mod seal;
pub mod tls;

#[cfg(feature = "database")]
pub use self::database::{DbPool, FRAMEWORK_MIGRATIONS};
pub use self::paths::ExemptPaths;
pub use self::problem::{Problem, ProblemCode, ProblemDetails, problem_response, render_problem};
pub use self::redact::redact_passwords;
#[cfg(feature = "redis")]
pub use self::redis::{RedisConnection, RedisError, RedisLink};

/// What [`problem_into_response!`] expands to names, so that a crate using
/// the macro needs no dependency of its own on axum. Not an API.
#[doc(hidden)]
pub mod __private {
    pub use axum::response::{IntoResponse, Response};
}
