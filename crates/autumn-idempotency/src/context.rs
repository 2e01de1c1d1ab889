//! What the layer tells the handler (and what the app tells the layer) through
//! request extensions.

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

/// Who is asking: the parts of the request that keep one caller's records
/// apart from another's (session, tenant, principal, bearer credential).
///
/// Autumn's app builder puts one in the request extensions before the
/// idempotency layer runs. Without one, the layer scopes by the raw
/// `Authorization` header alone.
///
/// ```
/// use autumn_idempotency::IdempotencyScope;
///
/// let scope = IdempotencyScope::default().with_part("tenant", "acme");
/// assert_ne!(scope, IdempotencyScope::default());
/// ```
///
/// Its `Debug` output names the parts but never shows their values (session
/// ids and bearer tokens are secrets):
///
/// ```
/// use autumn_idempotency::IdempotencyScope;
///
/// let scope = IdempotencyScope::default().with_part("bearer", "s3cret-token");
/// let shown = format!("{scope:?}");
/// assert!(shown.contains("bearer") && !shown.contains("s3cret-token"));
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct IdempotencyScope {
    encoded: Vec<u8>,
}

impl IdempotencyScope {
    /// Adds a named part (e.g. `"session"`, `"tenant"`, `"principal"`,
    /// `"bearer"`). Parts are length-prefixed, so no two different lists of
    /// parts encode the same.
    #[must_use]
    pub fn with_part(mut self, kind: &str, value: impl AsRef<[u8]>) -> Self {
        for part in [kind.as_bytes(), value.as_ref()] {
            self.encoded
                .extend_from_slice(&(part.len() as u64).to_be_bytes());
            self.encoded.extend_from_slice(part);
        }
        self
    }

    /// The same scope without its parts named `kind`: a layer that resolves
    /// the caller better than a raw header did (the principal behind a
    /// bearer token) drops the raw part before adding its own.
    ///
    /// ```
    /// use autumn_idempotency::IdempotencyScope;
    ///
    /// let raw = IdempotencyScope::default()
    ///     .with_part("session", "abc")
    ///     .with_part("authorization", "Bearer one");
    /// let resolved = raw.without_part("authorization").with_part("principal", "agent-7");
    /// let refreshed = IdempotencyScope::default()
    ///     .with_part("session", "abc")
    ///     .with_part("authorization", "Bearer two")
    ///     .without_part("authorization")
    ///     .with_part("principal", "agent-7");
    /// assert_eq!(resolved, refreshed);
    /// ```
    #[must_use]
    pub fn without_part(self, kind: &str) -> Self {
        let mut kept = Self::default();
        let mut rest = self.encoded.as_slice();
        while let Some((name, after)) = split_part(rest) {
            let Some((value, after)) = split_part(after) else {
                break;
            };
            if name != kind.as_bytes() {
                kept = kept.with_part(&String::from_utf8_lossy(name), value);
            }
            rest = after;
        }
        kept
    }

    /// The canonical bytes folded into the storage key.
    pub fn as_bytes(&self) -> &[u8] {
        &self.encoded
    }

    /// Whether no part was added.
    pub fn is_empty(&self) -> bool {
        self.encoded.is_empty()
    }
}

impl std::fmt::Debug for IdempotencyScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Redacted(usize);
        impl std::fmt::Debug for Redacted {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "<redacted, {} bytes>", self.0)
            }
        }
        let mut map = f.debug_map();
        let mut rest = self.encoded.as_slice();
        // Walks the length-prefixed (kind, value) pairs `with_part` wrote.
        while let Some((kind, after)) = split_part(rest) {
            let Some((value, after)) = split_part(after) else {
                break;
            };
            map.entry(&String::from_utf8_lossy(kind), &Redacted(value.len()));
            rest = after;
        }
        map.finish()
    }
}

/// One length-prefixed part and what follows it.
fn split_part(encoded: &[u8]) -> Option<(&[u8], &[u8])> {
    let (length, rest) = encoded.split_first_chunk::<8>()?;
    let length = usize::try_from(u64::from_be_bytes(*length)).ok()?;
    (length <= rest.len()).then(|| rest.split_at(length))
}

/// Put in a request's extensions by a layer that decided who the caller is
/// where the idempotency layer cannot see it (an authentication layer
/// wrapped in a `ServiceBuilder` stack, say): the scope still keeps callers
/// apart, but nothing proves a retry passed the same checks, so a hit on a
/// record answers 409 `idempotency_replay_unavailable` instead of a replay.
/// The first run is recorded as usual.
///
/// ```
/// use autumn_idempotency::OpaqueCaller;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(OpaqueCaller);
/// assert!(request.extensions().get::<OpaqueCaller>().is_some());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpaqueCaller;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_parts_and_hides_their_values() {
        let scope = IdempotencyScope::default()
            .with_part("session", "sess-4f1c9e")
            .with_part("bearer", "Bearer tok_live_secret");
        let shown = format!("{scope:?}");
        assert!(!shown.contains("sess-4f1c9e"), "{shown}");
        assert!(!shown.contains("tok_live_secret"), "{shown}");
        assert!(
            shown.contains("\"session\"") && shown.contains("\"bearer\""),
            "{shown}"
        );
        assert_eq!(format!("{:?}", IdempotencyScope::default()), "{}");
    }
}
