//! Shared fixtures for the idempotency tests.
#![allow(dead_code, unreachable_pub)]

pub mod app;
pub mod conformance;
pub mod counting;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod database;
pub mod faulty;
pub mod logs;
#[cfg(feature = "redis")]
pub mod redis;
