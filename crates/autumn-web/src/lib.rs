//! # Autumn
//!
//! An opinionated web framework on axum, tokio and tower whose promise is
//! **at-most-once mutations**: a retried API call carrying an
//! `Idempotency-Key`, or a double-clicked form, runs its handler once, and
//! every retry gets the first response back.
//!
//! ```no_run
//! use autumn_web::prelude::*;
//!
//! #[post("/orders")]
//! async fn create_order() -> (StatusCode, &'static str) {
//!     (StatusCode::CREATED, "created")
//! }
//!
//! #[autumn_web::main]
//! async fn main() {
//!     autumn_web::app()
//!         .routes(routes![create_order])
//!         .idempotent()
//!         .run()
//!         .await;
//! }
//! ```
//!
//! The guides: [idempotency keys](docs::idempotency),
//! [configuration](docs::configuration), [testing](docs::testing),
//! [middleware](docs::middleware),
//! [running several replicas](docs::cloud_native),
//! [submit tokens](docs::submit_tokens), [forms](docs::forms),
//! [cross-origin requests](docs::security), [tenancy](docs::tenancy),
//! [API tokens](docs::api_tokens), [rate limits](docs::rate_limits),
//! [OpenAPI](docs::openapi),
//! [error responses and pages](docs::errors).

pub use autumn_core::state::State;
pub use autumn_core::{
    AppBuilder, AutumnConfig, AutumnError, AutumnResult, CommandError, ErrorKind, LaunchError,
    RequestId, Route, RouteIdempotency, app,
};
pub use autumn_macros::{debug_handler, delete, get, html, main, patch, post, put, routes, test};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use autumn_macros::{migrations, repository};

/// Who is asking, when the app authenticates callers itself: the
/// [`PrincipalResolver`](principal::PrincipalResolver) given to
/// `AppBuilder::scope_by` and the [`Principal`](principal::Principal)
/// extractor.
pub mod principal {
    pub use autumn_core::principal::*;
}

/// The OpenAPI 3.1 document built from the app's routes (`[openapi]`):
/// [`Operation`](openapi::Operation) to describe a hand-built route with
/// `Route::describe`, and [`JsonSchema`](openapi::JsonSchema) to derive
/// for the types a handler reads and answers. See `docs/openapi.md`.
pub mod openapi {
    pub use autumn_core::openapi::{
        ApiKeyLocation, Describe, JsonSchema, Operation, Parameter, RequestBody, Response,
        SecurityScheme, schemars,
    };
}

/// API tokens: [`RequireApiToken`](api_token::RequireApiToken), the
/// [`ApiPrincipal`](api_token::ApiPrincipal) extractor and the stores.
pub mod api_token {
    pub use autumn_core::api_token::*;
}

/// The foundation, whole: everything of `autumn_base`, for code that works
/// below the app (a store of its own, a layer on a raw router). Apps find
/// what they use of it under [`clock`], [`problem`], [`db`] and `redis`.
pub mod base {
    pub use autumn_base::*;
}

/// Time: the [`Clock`](clock::Clock) that sessions and API tokens expire by
/// (locks and records on Redis or a database expire by the store's own
/// time), and [`ManualClock`](clock::ManualClock), which tests move instead
/// of sleeping, and which every store follows.
pub mod clock {
    pub use autumn_base::clock::*;
}

/// Configuration: [`AutumnConfig`] and its sections.
pub mod config {
    pub use autumn_core::config::*;
}

/// The app database: the [`Db`](db::Db) extractor and transactions
/// (features `postgres`, `sqlite`).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod db {
    pub use autumn_base::database::{
        AppMigrations, DbConnection, DbPool, FRAMEWORK_MIGRATIONS, Migration, MigrationStatus,
    };
    pub use autumn_core::db::*;
    pub use autumn_idempotency::database::IdempotencyConnection;
}

/// Durable after-commit hooks: [`MutationContext`](jobs::MutationContext),
/// the hooks an app registers and the worker that runs them.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod jobs {
    pub use autumn_core::jobs::*;
}

/// Mail, sent once: the [`Mailer`](mail::Mailer) extractor queues a
/// [`Mail`](mail::Mail) as a job in the mutation's transaction, and the
/// worker sends it through `[mail]`'s transport. See `docs/mail.md`.
#[cfg(all(feature = "mail", any(feature = "postgres", feature = "sqlite")))]
pub mod mail {
    pub use autumn_core::mail::*;
}

/// What `#[repository]` generates code against: paging, the transaction
/// mutations share ([`RepoTx`](repository::RepoTx)), and hook rows.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod repository {
    pub use autumn_core::repository::*;
}

/// Idempotency keys: the layer, the stores and what handlers read.
pub mod idempotency {
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub use autumn_core::idempotency_tx::IdempotencyTx;
    pub use autumn_idempotency::*;
}

/// Error responses: problem documents for API clients, HTML pages for
/// browsers, and the app's own pages.
pub mod error_pages {
    pub use autumn_core::error_pages::*;
}

pub mod forms;

/// Problem documents (RFC 7807): [`Problem`](problem::Problem), an error of
/// the app's own that looks like Autumn's;
/// [`ProblemDetails`](problem::ProblemDetails) and
/// [`render_problem`](problem::render_problem), the renderer every Autumn
/// error goes through; and [`codes`](problem::codes), every code Autumn
/// answers with.
pub mod problem {
    pub use autumn_base::problem::*;

    /// Every `code` Autumn answers with, in one list: the guards'
    /// (`autumn_idempotency::codes`), the framework's (`autumn_core::codes`)
    /// and those of the HTTP statuses. Match on these in tests and clients.
    ///
    /// ```
    /// use autumn_web::problem::codes;
    ///
    /// assert_eq!(codes::IDEMPOTENCY_KEY_IN_FLIGHT, "idempotency_key_in_flight");
    /// assert_eq!(codes::SESSION_STORE_UNAVAILABLE, "session_store_unavailable");
    /// assert_eq!(codes::NOT_FOUND, "not_found");
    /// ```
    pub mod codes {
        pub use autumn_core::codes::*;
        pub use autumn_idempotency::codes::*;
    }
}

/// Redis: the [`RedisConnection`](redis::RedisConnection) an app's Redis
/// stores share, on one server or a Redis Cluster (feature `redis`).
#[cfg(feature = "redis")]
pub mod redis {
    pub use autumn_base::redis::*;
}

pub mod security;

/// Rate limits (`[rate_limit.rules]`): the
/// [`RateLimitRejection`](rate_limit::RateLimitRejection) a refused request
/// is answered with, and the function type `AppBuilder::rate_limit_key`
/// takes.
pub mod rate_limit {
    pub use autumn_core::rate_limit::*;
}

/// The client's address: [`ClientIp`](client_ip::ClientIp), through
/// `[server] trusted_proxies`.
pub mod client_ip {
    pub use autumn_core::client_ip::*;
}

/// Server-sent events: [`sse::stream`] with keep-alives, ending when the
/// server stops.
pub mod sse {
    pub use autumn_core::sse::*;
}

/// WebSockets that hold their connection's slot and get a close frame when
/// the server stops.
pub mod ws {
    pub use autumn_core::ws::*;
}

/// Sessions: the [`Session`](session::Session) extractor, the layer and the
/// stores.
pub mod session {
    pub use autumn_core::session::*;
}

/// Tenancy: the [`Tenant`](tenancy::Tenant) extractor and the
/// [`TenantResolver`](tenancy::TenantResolver) an app plugs in.
pub mod tenancy {
    pub use autumn_core::tenancy::*;
}

/// App state shared with every handler:
/// [`AppBuilder::with_state`] and the [`State`] extractor.
pub mod state {
    pub use autumn_core::state::*;
}

/// Logging: the subscriber `[log]` describes, and the
/// [`RequestId`] of each request.
pub mod telemetry {
    pub use autumn_core::telemetry::*;
}

/// Testing an app in-process: [`TestApp`](test::TestApp), with what tests
/// commonly need next to it (JSON values, header names), so an app's tests
/// need no dependencies beyond `autumn-web`. Write async tests with
/// [`#[autumn_web::test]`](macro@crate::test).
pub mod test {
    pub use autumn_test::*;
    pub use http::header::{self, HeaderMap, HeaderName, HeaderValue};
    pub use http::{Method, StatusCode};
    pub use serde_json::{Value, json};
}

/// The crates Autumn is built on, at the versions it uses.
pub mod reexports {
    pub use axum;
    pub use futures_util;
    pub use http;
    pub use maud;
    pub use serde;
    pub use serde_json;
    pub use tokio;
    pub use tracing;
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub use {diesel, diesel_async, scoped_futures};
}

/// What most handlers need: `use autumn_web::prelude::*;`.
pub mod prelude {
    pub use crate::api_token::ApiPrincipal;
    pub use crate::client_ip::ClientIp;
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub use crate::db::Db;
    pub use crate::forms::{FieldErrors, Flash, FormPage};
    pub use crate::session::Session;
    pub use crate::tenancy::Tenant;
    pub use crate::{
        AutumnError, AutumnResult, Route, RouteIdempotency, State, delete, get, html, patch, post,
        put, routes,
    };
    pub use axum::Json;
    pub use axum::extract::{Extension, Form, Path, Query};
    pub use axum::response::{Html, IntoResponse, Redirect, Response};
    pub use http::{HeaderMap, StatusCode};
    pub use maud::{DOCTYPE, Markup, PreEscaped};
}

/// The guides, compiled and tested with the crate.
pub mod docs {
    #[doc = include_str!("../../../README.md")]
    pub mod readme {}
    #[doc = include_str!("../../../docs/idempotency.md")]
    pub mod idempotency {}
    #[doc = include_str!("../../../docs/configuration.md")]
    pub mod configuration {}
    #[doc = include_str!("../../../docs/testing.md")]
    pub mod testing {}
    #[doc = include_str!("../../../docs/middleware.md")]
    pub mod middleware {}
    #[doc = include_str!("../../../docs/cloud-native.md")]
    pub mod cloud_native {}
    #[doc = include_str!("../../../docs/submit-tokens.md")]
    pub mod submit_tokens {}
    #[doc = include_str!("../../../docs/sessions.md")]
    pub mod sessions {}
    #[doc = include_str!("../../../docs/forms.md")]
    pub mod forms {}
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    #[doc = include_str!("../../../docs/repositories.md")]
    pub mod repositories {}
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    #[doc = include_str!("../../../docs/jobs.md")]
    pub mod jobs {}
    #[cfg(all(feature = "mail", any(feature = "postgres", feature = "sqlite")))]
    #[doc = include_str!("../../../docs/mail.md")]
    pub mod mail {}
    #[doc = include_str!("../../../docs/security.md")]
    pub mod security {}
    #[doc = include_str!("../../../docs/api-tokens.md")]
    pub mod api_tokens {}
    #[doc = include_str!("../../../docs/rate-limits.md")]
    pub mod rate_limits {}
    #[doc = include_str!("../../../docs/openapi.md")]
    pub mod openapi {}
    #[doc = include_str!("../../../docs/tenancy.md")]
    pub mod tenancy {}
    #[doc = include_str!("../../../docs/errors.md")]
    pub mod errors {}
    #[doc = include_str!("../../../docs/performance.md")]
    pub mod performance {}
}

#[doc(hidden)]
pub mod __private;
