//! Sessions: who a browser is, across requests.
//!
//! The cookie carries only a random [`SessionId`]; the session's values live
//! in a [`SessionStore`] (memory, Redis or the app database). The
//! [`SessionLayer`] the app builder installs reads the cookie, hands handlers
//! a [`Session`], and on the way out saves what changed and sets the cookie.
//! A request that never touches its session costs no store call and sets no
//! cookie.

mod cookie;
#[cfg(feature = "database")]
mod database;
mod future;
mod handle;
mod id;
mod layer;
mod memory;
#[cfg(feature = "redis")]
mod redis;
mod service;
mod store;
mod sweep;

pub use cookie::SameSite;
pub(crate) use cookie::session_cookie;
#[cfg(feature = "database")]
pub use database::DbSessionStore;
pub use future::ResponseFuture;
pub use handle::{Session, SessionError, SessionRejection};
pub use id::SessionId;
pub use layer::{
    DEFAULT_ABSOLUTE_TTL, DEFAULT_COOKIE_NAME, DEFAULT_SECURE_COOKIE_NAME, DEFAULT_TTL,
    SessionLayer,
};
pub use memory::MemorySessionStore;
#[cfg(feature = "redis")]
pub use redis::RedisSessionStore;
pub use service::SessionService;
pub(crate) use service::{SessionIdentity, TokenTenant, tenant_suffix};
pub use store::{SaveOutcome, SessionFuture, SessionRecord, SessionStore, SessionStoreError};
pub use sweep::spawn_sweeper;
