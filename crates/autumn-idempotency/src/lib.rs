//! At-most-once mutations for Autumn: the `Idempotency-Key` middleware, the
//! stores that keep its locks and records, and the pieces handlers use.
//!
//! This crate knows nothing of sessions, tenants or API tokens: it reads an
//! [`IdempotencyScope`] that the app puts in the request extensions, so that
//! one caller's records are never replayed to another.
//!
//! The words used throughout (see ARCHITECTURE.md in the repository):
//! a **key** is what the client sent; the **scope** is who is asking; the
//! **storage key** is the hash of method, path, scope and key that a store keeps
//! things under; the **fingerprint** is the hash of the request a replay must
//! match; a **record** is a stored response; a **lock** is held by an **owner**,
//! the random id of the request holding it; a **store** implements
//! [`IdempotencyStore`]; a **replay** answers from a record without running the
//! handler.

pub mod admin;
mod body;
pub mod clock;
mod context;
#[cfg(feature = "database")]
pub mod database;
mod detach;
pub mod finalize;
pub mod fingerprint;
mod first_run;
pub mod key;
pub mod layer;
mod metrics;
mod paths;
mod problem;
mod record;
mod redact;
pub mod replay;
pub mod rescope;
pub mod store;
pub mod submit;
mod wait;

pub use context::{IdempotencyContext, IdempotencyScope, OpaqueCaller};
#[cfg(feature = "database")]
pub use database::{DbIdempotencyStore, FRAMEWORK_MIGRATIONS};
pub use detach::{detached_runs, wait_for_detached_runs};
pub use layer::{
    FingerprintPolicy, IdempotencyLayer, IdempotencyPolicy, KeyRequirement, PolicyError, ReplayMode,
};
pub use metrics::{IdempotencyMetrics, MetricsSnapshot, StoreSize};
pub use paths::ExemptPaths;
pub use problem::{
    IdempotencyContextRejection, IdempotencyRejection, KEY_MISSING_TYPE, Problem, problem_response,
};
pub use record::{IdempotencyEntry, IdempotencyRecord, RecordDecodeError};
pub use redact::redact_passwords;
pub use replay::{IdempotencyReplayLayer, ReplayGuardLayer};
pub use store::{
    Claim, IdempotencyFuture, IdempotencyStore, MemoryIdempotencyStore, StoreError, StoreErrorKind,
    StoreOperation,
};
#[cfg(feature = "redis")]
pub use store::{RedisConnection, RedisIdempotencyStore, RedisLink};
