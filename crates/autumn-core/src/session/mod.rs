//! Sessions: who a browser is, across requests.
//!
//! The cookie carries only a random [`SessionId`]; the session's values live
//! in a [`SessionStore`] (memory, Redis or the app database). The
//! [`SessionLayer`] the app builder installs reads the cookie, hands handlers
//! a [`Session`], and on the way out saves what changed and sets the cookie.
//! A request that never touches its session costs no store call and sets no
//! cookie.

#[cfg(feature = "database")]
mod database;
mod id;
mod memory;
#[cfg(feature = "redis")]
mod redis;
mod store;

#[cfg(feature = "database")]
pub use database::DbSessionStore;
pub use id::SessionId;
pub use memory::MemorySessionStore;
#[cfg(feature = "redis")]
pub use redis::RedisSessionStore;
pub use store::{SessionFuture, SessionRecord, SessionStore, SessionStoreError};
