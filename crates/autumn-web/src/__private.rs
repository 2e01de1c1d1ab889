//! What the macros expand to. Not public API: names here may change in any
//! release.

use std::future::Future;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use autumn_base::database::{AppMigrations, Migration};
pub use autumn_idempotency::layer::{
    AnonymousKeys, FingerprintPolicy, IdempotencyPolicy, KeyRequirement, RecordErrors,
};
pub use axum;
pub use http;
pub use maud;

/// What a route macro's description of its handler names.
pub mod openapi {
    pub use autumn_core::openapi::Operation;
    pub use autumn_core::openapi::probe::{
        DescribeInput, DescribeOutput, DescribePathValues, Probe, SkipInput, SkipOutput,
        SkipPathValues,
    };
}

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
/// replayed unless `idempotent = false`. The handler function itself, not a
/// `MethodRouter`: the app puts its layers around it before axum boxes it.
pub fn macro_route<H, T>(
    method: http::Method,
    filter: axum::routing::MethodFilter,
    path: &'static str,
    name: &'static str,
    handler: H,
    idempotent: bool,
) -> Route
where
    H: axum::handler::Handler<T, ()>,
    T: 'static,
{
    Route::from_macro(method, filter, path, name, handler, idempotent)
}

/// Declares the app's global allocator, beside the `main` that
/// `#[autumn_web::main]` writes: mimalloc with the `mimalloc` feature (on
/// by default), nothing without it.
#[cfg(feature = "mimalloc")]
#[doc(hidden)]
#[macro_export]
macro_rules! __autumn_allocator {
    () => {
        #[global_allocator]
        static AUTUMN_GLOBAL_ALLOCATOR: $crate::__private::MiMalloc = $crate::__private::MiMalloc;
    };
}

/// Without the `mimalloc` feature the app keeps the system allocator (or
/// declares its own).
#[cfg(not(feature = "mimalloc"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __autumn_allocator {
    () => {};
}

pub use crate::__autumn_allocator as allocator;
#[cfg(feature = "mimalloc")]
pub use mimalloc::MiMalloc;

/// The body of `#[autumn_web::main]`: logging as `[log]` says (or `RUST_LOG`),
/// then a multi-threaded tokio runtime running `main`.
pub fn run_main<F: Future>(main: F) -> F::Output {
    // A configuration error is reported by `run()` with the key to fix; here
    // it only means logging starts at the default level.
    let config = AutumnConfig::load().unwrap_or_default();
    autumn_core::telemetry::init_telemetry(&config);
    // Lines still waiting for their batch are written as `main` returns,
    // or unwinds.
    let _flush = FlushLogsOnDrop;
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

/// Writes the log lines still waiting when dropped.
struct FlushLogsOnDrop;

impl Drop for FlushLogsOnDrop {
    fn drop(&mut self) {
        autumn_core::telemetry::flush_logs();
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

#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use crate::AutumnError;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use autumn_base::database::DbPool;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use autumn_core::jobs::{CommitHooks, MutationContext};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use autumn_core::repository::{Page, Paging, RepoDb, RepoTx, enqueue_hook};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use autumn_idempotency::database::TxConnection;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use scoped_futures::{ScopedBoxFuture, ScopedFutureExt};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use {diesel, diesel_async};

/// A repository's connection and its mutations' context, from the request.
///
/// # Errors
///
/// 500 without `[database] url`, 503 when no connection can be had.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub async fn repository_parts(
    parts: &mut http::request::Parts,
) -> Result<(RepoDb, MutationContext), AutumnError> {
    let Some(pool) = parts.extensions.get::<DbPool>().cloned() else {
        return Err(AutumnError::internal(
            "a handler takes a repository, but no database is configured; set database.url (AUTUMN_DATABASE__URL)",
        ));
    };
    let context =
        match <MutationContext as axum::extract::FromRequestParts<()>>::from_request_parts(
            parts,
            &(),
        )
        .await
        {
            Ok(context) => context,
            Err(never) => match never {},
        };
    Ok((RepoDb::from_pool(&pool).await?, context))
}

/// The error of a repository statement on a connection that cannot run it.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub fn not_primary() -> diesel::result::Error {
    diesel::result::Error::QueryBuilderError(
        "repositories run on the primary database (a Db connection); this connection is a shard's or of a backend this build has no driver for".into(),
    )
}

/// Runs `$body` with `$c` bound to the backend's connection of an
/// `Option<TxConnection>`: one arm per backend this build compiled, each
/// type-checked on its own connection type, so a repository serves either
/// database. Defined once per feature set, because `cfg` in a macro's
/// output would be read in the caller's crate.
#[cfg(all(feature = "postgres", feature = "sqlite"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __autumn_on_tx {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            ::core::option::Option::Some($crate::__private::TxConnection::Postgres($c)) => $body,
            ::core::option::Option::Some($crate::__private::TxConnection::Sqlite($c)) => $body,
            #[allow(unreachable_patterns)]
            _ => ::core::result::Result::Err($crate::__private::not_primary()),
        }
    };
}

/// See the two-backend definition.
#[cfg(all(feature = "postgres", not(feature = "sqlite")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __autumn_on_tx {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            ::core::option::Option::Some($crate::__private::TxConnection::Postgres($c)) => $body,
            #[allow(unreachable_patterns)]
            _ => ::core::result::Result::Err($crate::__private::not_primary()),
        }
    };
}

/// See the two-backend definition.
#[cfg(all(feature = "sqlite", not(feature = "postgres")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __autumn_on_tx {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            ::core::option::Option::Some($crate::__private::TxConnection::Sqlite($c)) => $body,
            #[allow(unreachable_patterns)]
            _ => ::core::result::Result::Err($crate::__private::not_primary()),
        }
    };
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use crate::__autumn_on_tx as on_tx;
