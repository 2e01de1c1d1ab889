//! Shared fixtures for the idempotency tests.
#![allow(dead_code, unreachable_pub)]

pub mod app;
pub mod conformance;
pub mod faulty;
