//! API tokens: bearer credentials for clients without a session (service
//! integrations, agents, MCP clients).
//!
//! [`ApiTokens`] creates a token for a principal (shown once, stored only as
//! a SHA-256 hash behind a public prefix), revokes it, and checks what a
//! client presents. [`RequireApiTokenLayer`] is the layer that checks every
//! request and hands handlers an [`ApiPrincipal`]; the stores are
//! [`MemoryApiTokenStore`] and [`DbApiTokenStore`] (PostgreSQL or SQLite).
//!
//! Mount it with `AppBuilder::api_tokens` (or, as before, pass the layer
//! itself to `AppBuilder::layer`): then the idempotency layer scopes a
//! request by the principal, not the token, so an agent that refreshes its
//! token between attempts still gets its replay. Mounted any other way (in a `ServiceBuilder` stack, with `Route::layer`, inside a
//! merged router) it still authenticates, but a retry with a recorded key
//! answers 409 instead of a replay. The guide is `docs/api-tokens.md`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use autumn_core::api_token::{ApiPrincipal, ApiTokens, MemoryApiTokenStore, RequireApiTokenLayer};
//! use autumn_core::{Route, RouteIdempotency};
//! use axum::routing::post;
//!
//! # async fn demo() {
//! let tokens = ApiTokens::new(Arc::new(MemoryApiTokenStore::new()));
//! let created = tokens.create("agent-7", "nightly sync", None).await.unwrap();
//! println!("give this to the agent once: {}", created.token());
//!
//! async fn sync(principal: ApiPrincipal) -> String {
//!     format!("synced for {}", principal.id())
//! }
//! autumn_core::app()
//!     .routes(vec![Route::new(http::Method::POST, "/sync", post(sync))])
//!     .api_tokens(RequireApiTokenLayer::new(tokens))
//!     .idempotent()
//!     .run()
//!     .await;
//! # }
//! ```

#[cfg(feature = "database")]
mod database;
mod layer;
mod memory;
mod principal;
mod rejection;
mod service;
mod store;
mod token;
mod tokens;

#[cfg(feature = "database")]
pub use database::DbApiTokenStore;
pub use layer::RequireApiTokenLayer;

/// The name [`RequireApiTokenLayer`] had before every layer's name ended in
/// `Layer`; the same type, kept because apps and guides use it.
pub type RequireApiToken = RequireApiTokenLayer;
pub(crate) use layer::register;
pub use memory::MemoryApiTokenStore;
pub use principal::ApiPrincipal;
pub use rejection::ApiTokenRejection;
#[allow(deprecated)]
pub use service::RequireApiTokenFuture;
pub use service::{RequireApiTokenService, ResponseFuture};
pub use store::{ApiTokenFuture, ApiTokenRecord, ApiTokenStore, ApiTokenStoreError};
pub use tokens::{ApiTokenError, ApiTokens, LAST_USED_EVERY, NewApiToken};
