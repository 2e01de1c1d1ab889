//! What the layer tells the handler through request extensions: the
//! [`IdempotencyContext`]. What the app tells the layer (who is asking) is
//! in `scope.rs`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use http::HeaderValue;
use http::request::Parts;

use crate::first_run::{Held, HoldsLock};
use crate::key::{hash_parts, key_str};
use crate::problem::IdempotencyContextRejection;
use crate::store::IdempotencyStore;

/// The request's idempotency state, handed to the handler through request
/// extensions while it holds the lock on its storage key.
///
/// Handlers take it as an extractor (`Option<IdempotencyContext>` when the
/// route may be called without a key).
///
/// Inserted by the [`IdempotencyLayer`](crate::IdempotencyLayer) after its
/// claim returned `Acquired`, just before it calls the inner service. Read
/// by this extractor, by Autumn's `IdempotencyTx` and `MutationContext` (the
/// storage key, without a second store lookup), and by an idempotency layer
/// nested inside, which then passes the request through: the outer layer
/// owns the lock and the record.
#[derive(Clone)]
pub struct IdempotencyContext {
    // One allocation per request, however often the context is cloned.
    inner: Arc<ContextInner>,
}

struct ContextInner {
    /// Visible ASCII (see [`key_str`]).
    key: HeaderValue,
    /// The lock and what the layer records under it.
    held: Held,
}

impl std::fmt::Debug for IdempotencyContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyContext")
            .field("key", &self.key())
            .field("storage_key", &self.inner.held.storage_key)
            .field("owner", &self.inner.held.owner)
            .finish_non_exhaustive()
    }
}

impl HoldsLock for IdempotencyContext {
    fn held(&self) -> &Held {
        &self.inner.held
    }
}

impl IdempotencyContext {
    pub(crate) fn new(key: HeaderValue, held: Held) -> Self {
        Self {
            inner: Arc::new(ContextInner { key, held }),
        }
    }

    /// The key the client sent.
    pub fn key(&self) -> &str {
        key_str(&self.inner.key)
    }

    /// The storage key the store keeps this request's lock and record under.
    pub fn storage_key(&self) -> &str {
        &self.inner.held.storage_key
    }

    /// The random id of this request's lock.
    pub fn owner(&self) -> &str {
        &self.inner.held.owner
    }

    /// The request's fingerprint.
    pub fn fingerprint(&self) -> &[u8] {
        &self.inner.held.fingerprint
    }

    /// The store holding the lock.
    pub fn store(&self) -> &Arc<dyn IdempotencyStore> {
        &self.inner.held.store
    }

    /// How long the record is kept.
    pub fn ttl(&self) -> Duration {
        self.inner.held.ttl
    }

    /// How long the lock lasts without renewal (the layer renews it every
    /// third of this while the handler runs).
    pub fn in_flight_ttl(&self) -> Duration {
        self.inner.held.in_flight_ttl
    }

    /// Whether an outer layer still has work to do on the response (a
    /// session change to save and its `Set-Cookie`).
    #[cfg(feature = "database")]
    pub(crate) fn finalize_pending(&self) -> bool {
        self.inner
            .held
            .finalize
            .as_ref()
            .is_some_and(crate::finalize::FinalizeHook::pending)
    }

    /// A key for a downstream call (a payment provider, another service) that
    /// is the same on every retry of this request and different for each
    /// `purpose` and each caller, so the downstream side deduplicates too.
    ///
    /// The lock does not fence work outside the store: give such calls their
    /// own idempotency key with this.
    pub fn scoped_key(&self, purpose: &str) -> String {
        let digest = hash_parts(
            "autumn.scoped.v1",
            &[self.storage_key().as_bytes(), purpose.as_bytes()],
        );
        hex::encode(digest)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyContext {
    type Rejection = IdempotencyContextRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Self>()
            .cloned()
            .ok_or(IdempotencyContextRejection::MissingKey)
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for IdempotencyContext {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Self>().cloned())
    }
}

/// Request extension: the record of a hit the outer layer forwards to the
/// route's [`IdempotencyReplayLayer`](crate::IdempotencyReplayLayer).
///
/// Inserted by the idempotency layer in `ThroughInner` mode, with the same
/// record in the task-local `FORWARDED`. Read (and removed) by the
/// `IdempotencyReplayLayer`, which answers it; the
/// [`ReplayGuardLayer`](crate::ReplayGuardLayer) and a nested idempotency
/// layer refuse a request that still carries it (409), so it never reaches a
/// handler.
#[derive(Debug, Clone)]
pub(crate) struct PendingReplay(pub(crate) Arc<crate::IdempotencyRecord>);

tokio::task_local! {
    /// The replay the key layer forwarded, visible to everything its inner
    /// call runs on this task: a route-local middleware may rebuild the request
    /// and drop [`PendingReplay`] on the way.
    ///
    /// Set by the idempotency layer (`ForwardedReplay::scope`) around the
    /// inner call; read by the replay layer, the replay guard and a nested
    /// idempotency layer, as [`PendingReplay`] is. The extension survives a
    /// layer that moves the call to another task, this survives one that
    /// rebuilds the request: each covers the other's gap.
    static FORWARDED: Arc<ForwardedReplay>;
}

/// A forwarded replay as the task-local holds it: the record, and whether an
/// [`IdempotencyReplayLayer`](crate::IdempotencyReplayLayer) answered it.
#[derive(Debug)]
pub(crate) struct ForwardedReplay {
    record: Arc<crate::IdempotencyRecord>,
    consumed: AtomicBool,
}

impl ForwardedReplay {
    pub(crate) fn new(record: Arc<crate::IdempotencyRecord>) -> Arc<Self> {
        Arc::new(Self {
            record,
            consumed: AtomicBool::new(false),
        })
    }

    /// Runs `call` with `forwarded` visible to [`take_forwarded`] and
    /// [`forwarded_pending`]; the future it returns keeps it visible.
    pub(crate) fn scope<F: Future>(
        forwarded: Arc<Self>,
        call: impl FnOnce() -> F,
    ) -> impl Future<Output = F::Output> {
        // `call` may reach the replay layer or the guard before it returns
        // (a service that answers in `call`), and the future after.
        let future = FORWARDED.sync_scope(forwarded.clone(), call);
        FORWARDED.scope(forwarded, future)
    }
}

/// The forwarded replay still waiting for an answer, marked answered.
pub(crate) fn take_forwarded() -> Option<Arc<crate::IdempotencyRecord>> {
    FORWARDED
        .try_with(|forwarded| {
            (!forwarded.consumed.swap(true, Ordering::AcqRel)).then(|| forwarded.record.clone())
        })
        .ok()
        .flatten()
}

/// Marks the forwarded replay answered (from the request's [`PendingReplay`]).
pub(crate) fn consume_forwarded() {
    let _outside_a_forward = FORWARDED.try_with(|forwarded| {
        forwarded.consumed.store(true, Ordering::Release);
    });
}

/// Whether a replay forwarded on this task is still waiting for an answer.
pub(crate) fn forwarded_pending() -> bool {
    FORWARDED
        .try_with(|forwarded| !forwarded.consumed.load(Ordering::Acquire))
        .unwrap_or(false)
}

/// Whether `extensions` or the task carry a forwarded replay nothing answered.
pub(crate) fn carries_forwarded(extensions: &http::Extensions) -> bool {
    extensions.get::<PendingReplay>().is_some() || forwarded_pending()
}

// Response markers that travel back out to the recording layer.

/// Response extension: the response went through an
/// `IdempotencyReplayLayer` on its way out of the handler.
///
/// Inserted by the `IdempotencyReplayLayer` on every response it did not
/// answer itself. Read by the idempotency layer's run, which marks the record
/// as one a retry is forwarded for only when this is there; removed by a
/// `ReplayGuardLayer` above it, which warns that the replay layer sits where
/// it cannot be protected.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PassedReplayLayer;

/// Response extension: an inner idempotency layer in `ThroughInner` mode
/// (`replay_through_inner()`) passed this request through because an outer
/// one holds the lock.
///
/// Inserted by the inner layer's pass-through future; read by the outer
/// layer's run, which then records as the inner layer would (forwarding
/// retries into the route).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OptedIntoReplayThroughInner;

/// Response extension: the 409 answered to a forwarded replay that nothing
/// answered.
///
/// Inserted by `refuse_unanswered_replay`, which the `ReplayGuardLayer` and a
/// nested idempotency layer not in `ThroughInner` mode call. Read by the
/// idempotency layer that forwarded the replay, to count a conflict rather
/// than log a route that lost its replay layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplayRefused;

/// Response extension: the response was answered from a record.
///
/// Inserted by `replay_response` (the idempotency layer's direct replay and
/// the `IdempotencyReplayLayer`'s). Read by the idempotency layer that
/// forwarded a replay, to count a hit and log it as one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Replayed;
