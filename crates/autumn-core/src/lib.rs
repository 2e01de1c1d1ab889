//! The core of Autumn: configuration, the app builder, routes, errors, the
//! server and its request pipeline.
//!
//! Users depend on the `autumn-web` facade, which re-exports what is here.

mod actuator;
mod admin_token;
pub mod api_token;
pub mod app;
mod catch_panic;
pub mod client_ip;
pub mod codes;
pub mod config;
pub mod cross_origin;
// Below both `config` (which checks `[jobs.schedule]` expressions) and
// `jobs` (which runs them, and re-exports it). Without a database there
// are no jobs to re-export it from, only the check.
#[cfg_attr(not(feature = "database"), allow(unreachable_pub, dead_code))]
mod cron;
#[cfg(feature = "database")]
pub mod db;
mod error;
pub mod error_pages;
mod extract;
#[cfg(feature = "database")]
pub mod idempotency_tx;
#[cfg(feature = "database")]
pub mod jobs;
mod key_admin;
#[cfg(feature = "mail")]
pub mod mail;
pub mod openapi;
mod pool;
pub mod principal;
pub mod rate_limit;
#[cfg(feature = "database")]
pub mod repository;
mod route;
mod scope;
mod security_headers;
pub mod session;
#[cfg(feature = "database")]
mod sql;
pub mod sse;
pub mod state;
pub mod telemetry;
pub mod tenancy;
mod timeout;
mod trusted_proxies;
pub mod ws;

pub use app::{AppBuilder, CommandError, LaunchError, app};
pub use config::AutumnConfig;
pub use error::{AutumnError, AutumnResult, ErrorKind};
pub use route::{Route, RouteIdempotency};
pub use telemetry::RequestId;
