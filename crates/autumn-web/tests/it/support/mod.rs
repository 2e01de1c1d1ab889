//! What this crate's test files share: the backends a case runs on
//! ([`backend`], [`on_every_backend!`]), databases with the framework tables
//! ([`database`], `on_databases!`), two small stores built on
//! autumn-idempotency's trait ([`stores`]), and what a browser test reads
//! and sends (a form's submit token, the session cookie). Redis and log
//! capture are `autumn_testkit`'s, under the names the files use. A test
//! file says `#[macro_use] mod support;` and `use support::{...};`.
#![allow(dead_code, unreachable_pub, unused_imports, unused_macros)]

#[macro_use]
pub mod backend;
#[macro_use]
pub mod database;
pub mod served;
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

/// The session's `Set-Cookie` line in `response`, if it sets one.
pub fn session_cookie(response: &autumn_web::test::TestResponse) -> Option<String> {
    let name = autumn_web::session::DEFAULT_SECURE_COOKIE_NAME;
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

/// The id a `Set-Cookie` line carries.
pub fn id_of(set_cookie: &str) -> String {
    set_cookie
        .split(';')
        .next()
        .and_then(|pair| pair.split_once('='))
        .map(|(_, id)| id.to_owned())
        .unwrap_or_default()
}

/// A request from a new browser of `client` that holds exactly this
/// session cookie.
pub fn with_cookie(
    client: &autumn_web::test::TestClient,
    method: &str,
    path: &str,
    id: &str,
) -> autumn_web::test::TestRequest {
    let request = match method {
        "GET" => client.new_browser().get(path),
        _ => client.new_browser().post(path),
    };
    let name = autumn_web::session::DEFAULT_SECURE_COOKIE_NAME;
    request.header("cookie", &format!("{name}={id}"))
}
