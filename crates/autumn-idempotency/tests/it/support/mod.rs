//! Shared fixtures for the idempotency tests: the store fakes and the app
//! fixture built on this crate's types; the generic helpers (logs, Redis)
//! are `autumn_testkit`'s, re-exported here under their old names.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod app;
pub mod clocks;
pub mod conformance;
pub mod counting;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod database;
pub mod faulty;
pub use autumn_testkit::logs;
#[cfg(feature = "redis")]
pub use autumn_testkit::redis;
