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

/// Set on a request whose hit the outer layer forwards to the route's
/// [`IdempotencyReplayLayer`](crate::IdempotencyReplayLayer).
#[derive(Debug, Clone)]
pub(crate) struct PendingReplay(pub(crate) Arc<crate::IdempotencyRecord>);

tokio::task_local! {
    /// The replay the key layer forwarded, visible to everything its inner
    /// call runs on this task: a route-local middleware may rebuild the request
    /// and drop [`PendingReplay`] on the way.
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

/// Response markers that travel back out to the recording layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PassedReplayLayer;

/// Set by an inner `replay_through_inner()` layer nested in an outer one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OptedIntoReplayThroughInner;

/// Set on the 409 answered to a forwarded replay that nothing answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplayRefused;

/// Set on a response the replay layer answered from a record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Replayed;
