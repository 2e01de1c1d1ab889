//! What the macros expand to. Not public API: names here may change in any
//! release.

use std::future::Future;

pub use autumn_idempotency::layer::{FingerprintPolicy, IdempotencyPolicy, KeyRequirement};
pub use axum;
pub use http;
pub use maud;

use crate::{AutumnConfig, Route};

/// Implemented by the marker struct a route macro generates next to its
/// handler function (same name, type namespace).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a route",
    note = "annotate an async fn with #[get(\"/path\")], #[post(..)], #[put(..)], #[patch(..)] or #[delete(..)] to list it in routes![]"
)]
pub trait RouteDef {
    /// The route the macro describes.
    fn route() -> Route;
}

/// `routes![a]` calls this for each listed handler.
pub fn route_of<T: RouteDef>() -> Route {
    T::route()
}

/// A route as the macros make it: known to the framework, so a retry is
/// replayed unless `idempotent = false`.
pub fn macro_route(
    method: http::Method,
    path: &'static str,
    name: &'static str,
    handler: axum::routing::MethodRouter,
    idempotent: bool,
) -> Route {
    Route::from_macro(method, path, name, handler, idempotent)
}

/// The body of `#[autumn_web::main]`: logging as `[log]` says (or `RUST_LOG`),
/// then a multi-threaded tokio runtime running `main`.
pub fn run_main<F: Future>(main: F) -> F::Output {
    // A configuration error is reported by `run()` with the key to fix; here
    // it only means logging starts at the default level.
    let log = AutumnConfig::load().map(|c| c.log).unwrap_or_default();
    autumn_core::telemetry::init_logging(&log);
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(main),
        Err(error) => {
            eprintln!("autumn: cannot start the tokio runtime: {error}");
            std::process::exit(1);
        }
    }
}

/// The runtime `#[autumn_web::test]` runs a test on: current-thread, time
/// and I/O enabled, as `#[tokio::test]` builds it.
pub fn test_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("autumn: cannot start the tokio runtime for the test")
}
