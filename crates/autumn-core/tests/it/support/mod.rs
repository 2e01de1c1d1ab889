//! What this crate's test files share: databases with the framework tables
//! ([`database`]); Redis helpers are `autumn_testkit`'s, under the name the
//! files use. A test file says `#[macro_use] mod support;`.
#![allow(dead_code, unreachable_pub, unused_imports, unused_macros)]

#[macro_use]
pub mod database;
pub use autumn_testkit::redis as redis_support;
