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
//!
//! What the guards stand on (the clock, problem documents, the database pool
//! and the Redis connection) is `autumn_base`'s.

pub mod admin;
pub mod codes;
mod context;
#[cfg(feature = "database")]
pub mod database;
mod detach;
pub mod finalize;
pub mod fingerprint;
mod first_run;
mod form_type;
pub mod key;
pub mod layer;
mod metrics;
mod problem;
pub mod quota;
mod record;
pub mod replay;
pub mod rescope;
mod scope;
mod sealing;
pub mod store;
pub mod submit;
mod wait;

pub use context::IdempotencyContext;
#[cfg(feature = "database")]
pub use database::DbIdempotencyStore;
pub use detach::{DetachedRuns, detached_runs, wait_for_detached_runs};
pub use layer::{
    AnonymousKeys, FingerprintPolicy, IdempotencyLayer, IdempotencyPolicy, KeyRequirement,
    PolicyError, RecordErrors, ReplayMode,
};
pub use metrics::{IdempotencyMetrics, MetricsSnapshot, StoreSize};
pub use problem::{IdempotencyContextRejection, IdempotencyRejection, KEY_MISSING_TYPE};
pub use record::{IdempotencyEntry, IdempotencyRecord, RecordDecodeError};
pub use replay::{IdempotencyReplayLayer, ReplayGuardLayer};
pub use scope::{IdempotencyScope, OpaqueCaller};
pub use sealing::RecordSealing;
#[cfg(feature = "redis")]
pub use store::RedisIdempotencyStore;
pub use store::{
    Claim, IdempotencyFuture, IdempotencyStore, MemoryIdempotencyStore, StoreError, StoreErrorKind,
    StoreOperation,
};

// The foundation moved to `autumn_base`; these paths keep working for one
// release. rustc accepts `#[deprecated]` on a `use` but does not report it
// yet (rust-lang/rust#30827): it marks what goes. The `clock` module is a
// module of its own so that its deprecation shows in the docs.

/// Deprecated: moved to `autumn_base::clock`; this path goes in the next
/// release.
#[deprecated(note = "moved to autumn_base::clock")]
pub mod clock {
    #[doc(no_inline)]
    pub use autumn_base::clock::*;
}
/// Deprecated: moved to `autumn_base::database`.
#[cfg(feature = "database")]
#[deprecated(note = "moved to autumn_base::database")]
#[doc(no_inline)]
pub use autumn_base::database::FRAMEWORK_MIGRATIONS;
/// Deprecated: moved to `autumn_base::redis`.
#[cfg(feature = "redis")]
#[deprecated(note = "moved to autumn_base::redis")]
#[doc(no_inline)]
pub use autumn_base::redis::{RedisConnection, RedisLink};
/// Deprecated: moved to `autumn_base`.
#[deprecated(note = "moved to autumn_base")]
#[doc(no_inline)]
/// Sealing what stores keep: [`SecretKeys`](seal::SecretKeys).
pub use autumn_base::seal;
pub use autumn_base::{ExemptPaths, Problem, problem_response, redact_passwords};
