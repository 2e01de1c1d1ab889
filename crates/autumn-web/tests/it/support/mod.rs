//! What this crate's test files share: the backends a case runs on
//! ([`backend`], [`on_every_backend!`]), databases with the framework tables
//! ([`database`], `on_databases!`), and two small stores built on
//! autumn-idempotency's trait ([`stores`]). Redis and log capture are
//! `autumn_testkit`'s, under the names the files use. A test file says
//! `#[macro_use] mod support;` and `use support::{...};`.
#![allow(dead_code, unreachable_pub, unused_imports, unused_macros)]

#[macro_use]
pub mod backend;
#[macro_use]
pub mod database;
pub mod stores;

pub use autumn_testkit::logs;
pub use autumn_testkit::redis as redis_support;

/// A `[security] secret_key` for apps a test runs under a production
/// profile, which refuses to start without one.
pub const SECRET_KEY: &str = "a-test-secret-key-of-at-least-32-bytes-0123456789";

/// The submit token in `page`: the value of its first `_submit_token`
/// field, as a browser would post it back.
pub fn token_in(page: &str) -> String {
    let marker = "name=\"_submit_token\" value=\"";
    let start = page.find(marker).expect("a token field") + marker.len();
    page[start..]
        .split('"')
        .next()
        .expect("a closing quote")
        .to_owned()
}
