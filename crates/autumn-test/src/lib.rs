//! `TestApp`: build an Autumn app in-process and talk to it like a browser
//! would (cookies kept), without opening a socket. `ServerProcess` runs the
//! app's real binary, with the same client over a socket, and
//! `TestDatabase` gives each test a database of its own.
//!
//! It runs the same launch path as `run()`: the same configuration checks,
//! the same stores, the same middleware, in the `test` profile.
//!
//! ```
//! use autumn_core::Route;
//! use autumn_test::TestApp;
//! use axum::routing::post;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let client = TestApp::new()
//!     .routes(vec![Route::new(http::Method::POST, "/orders", post(|| async { "created" }))])
//!     .build();
//! let response = client.post("/orders").send().await;
//! response.assert_ok();
//! assert_eq!(response.text(), "created");
//! # }
//! ```

mod app;
mod client;
mod cookies;
mod database;
mod process;
mod response;

pub use app::TestApp;
pub use client::{DEFAULT_HOST, TestClient, TestRequest};
pub use database::TestDatabase;
pub use process::ServerProcess;
pub use response::TestResponse;
