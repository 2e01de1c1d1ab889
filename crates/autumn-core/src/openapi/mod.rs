//! OpenAPI 3.1: the document Autumn builds from the app's own routes, served
//! at `GET /openapi.json` (`[openapi]`), so the retry protocol is published
//! where API clients and their generators look.
//!
//! - Paths and methods come from the route macros, and each operation's
//!   parameters, request body and response from the handler's types:
//!   `Json<T>`, `Form<T>`, `Query<T>` and `Path<T>` over a
//!   `T: JsonSchema`, and a response body `Json<T>` (alone, in a tuple, in
//!   an `AutumnResult`). A type that cannot describe itself adds nothing.
//! - Each guarded operation gets the `Idempotency-Key` header (required
//!   where the route requires a key), `x-idempotency` with its record TTL,
//!   in-flight wait and fingerprint, `X-Idempotent-Replayed` on its
//!   successes, and every problem answer the guards, the quota and the
//!   rate limits can give, with their codes (`x-problem-codes`). A form
//!   route with submit tokens gets `x-submit-token`.
//! - A hand-built route is described by the app with
//!   [`Route::describe`](crate::Route::describe).
//!
//! The document is built once, at launch, with its keys sorted: the same
//! app gives the same bytes, to be committed and diffed.
//!
//! Schemas come from [`schemars`]' `JsonSchema` derive (re-exported here),
//! through aide's descriptions of axum's extractors.

mod document;
#[doc(hidden)]
pub mod probe;
pub(crate) mod ui;

pub use aide::openapi::{
    ApiKeyLocation, Operation, Parameter, RequestBody, Response, SecurityScheme,
};
pub use document::Describe;
pub(crate) use document::{AppFacts, OperationSource, build};
pub use schemars::{self, JsonSchema};
