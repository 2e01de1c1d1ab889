//! [`ScopeAfterRun`]: when the handler changes who is asking, the scope a
//! retry will carry.
//!
//! A handler can change the caller's scope: creating or rotating the session
//! (a guest's first flash, a sign-in) gives the caller a new session id, and
//! switching tenants stores the new tenant in the session; every later
//! request (a retry of this one included) is scoped by them. A guard that recorded the response only under
//! the storage key it claimed would leave the retry's key free: a duplicate
//! arriving once the session is saved would run the handler again. So an
//! outer layer that can tell the scope after the run puts a
//! `ScopeAfterRun` in the request extensions, and the guard, about to
//! record a 2xx/3xx response, asks it before the finalize hook saves the
//! session:
//!
//! ```text
//! handler -> 2xx/3xx -> scope after the run differs?
//!                          | yes: idempotency key  -> claim the storage key under the new
//!                          |                           scope (same owner, record TTL)
//!                          |      submit token     -> bind the record to both scopes
//!                          v
//!             finalize hook (save the session) -> record under the old key and the new one
//! ```
//!
//! A request that arrives while the session is saved therefore finds the
//! new key locked (409) whichever scope it carries, and a retry afterwards
//! replays.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::scope::IdempotencyScope;

/// The boxed future [`Rescope::scope_after_run`] returns.
pub type ScopeFuture<'a> = Pin<Box<dyn Future<Output = Option<IdempotencyScope>> + Send + 'a>>;

/// Tells the scope the next request from this caller will carry, once the
/// handler has run.
///
/// ```
/// use autumn_idempotency::IdempotencyScope;
/// use autumn_idempotency::rescope::{Rescope, ScopeAfterRun, ScopeFuture};
///
/// struct Moved(IdempotencyScope);
///
/// impl Rescope for Moved {
///     fn scope_after_run(&self) -> ScopeFuture<'_> {
///         Box::pin(async move { Some(self.0.clone()) })
///     }
/// }
///
/// let mut request = http::Request::new(());
/// let scope = IdempotencyScope::default().with_part("tenant", "globex");
/// request.extensions_mut().insert(ScopeAfterRun::new(Moved(scope)));
/// ```
pub trait Rescope: Send + Sync + 'static {
    /// The scope a retry would carry now; `None` when it cannot be told (the
    /// guard then records under the key it claimed alone). Returning the
    /// scope the request already had changes nothing.
    fn scope_after_run(&self) -> ScopeFuture<'_>;
}

/// Request extension: the [`Rescope`] of an outer layer.
///
/// Inserted by Autumn's scope layer, beside the
/// [`IdempotencyScope`], on every request with a session (a handler may
/// create or rotate it, or switch the tenant taken from it). Replaced, by
/// [`map`](Self::map), by a layer further in that changes the request's
/// scope (Autumn's principal and API-token layers, naming the principal
/// instead of the raw `Authorization` header). Read by both guards as they
/// set up a run: about to record, they ask it for the scope a retry will
/// carry and lock or bind the record under that one too.
#[derive(Clone)]
pub struct ScopeAfterRun(Arc<dyn Rescope>);

impl ScopeAfterRun {
    /// An extension asking `rescope`.
    pub fn new(rescope: impl Rescope) -> Self {
        Self(Arc::new(rescope))
    }

    /// The same extension, with the scope it tells passed through `change`.
    ///
    /// A layer inside the one that inserted it, which changes the request's
    /// [`IdempotencyScope`], changes the scope after the run the same way:
    /// the retry passes through that layer too, so it carries the changed
    /// scope, and a guard compares it with the changed one the request
    /// carried.
    ///
    /// ```
    /// use autumn_idempotency::IdempotencyScope;
    /// use autumn_idempotency::rescope::{Rescope, ScopeAfterRun, ScopeFuture};
    ///
    /// struct Rotated;
    ///
    /// impl Rescope for Rotated {
    ///     fn scope_after_run(&self) -> ScopeFuture<'_> {
    ///         Box::pin(async {
    ///             Some(
    ///                 IdempotencyScope::default()
    ///                     .with_part("session", "new-id")
    ///                     .with_part("authorization", "Bearer one"),
    ///             )
    ///         })
    ///     }
    /// }
    ///
    /// // A layer that names the principal behind the bearer token.
    /// let by_principal = |scope: IdempotencyScope| {
    ///     scope.without_part("authorization").with_part("principal", "agent-7")
    /// };
    /// let mut request = http::Request::new(());
    /// request.extensions_mut().insert(ScopeAfterRun::new(Rotated));
    /// if let Some(after) = request.extensions_mut().remove::<ScopeAfterRun>() {
    ///     request.extensions_mut().insert(after.map(by_principal));
    /// }
    /// ```
    #[must_use]
    pub fn map(
        self,
        change: impl Fn(IdempotencyScope) -> IdempotencyScope + Send + Sync + 'static,
    ) -> Self {
        Self::new(Mapped {
            inner: self,
            change,
        })
    }

    pub(crate) fn scope_after_run(&self) -> ScopeFuture<'_> {
        self.0.scope_after_run()
    }
}

/// A [`ScopeAfterRun`] whose scope is passed through `change`.
struct Mapped<F> {
    inner: ScopeAfterRun,
    change: F,
}

impl<F> Rescope for Mapped<F>
where
    F: Fn(IdempotencyScope) -> IdempotencyScope + Send + Sync + 'static,
{
    fn scope_after_run(&self) -> ScopeFuture<'_> {
        Box::pin(async move { self.inner.scope_after_run().await.map(&self.change) })
    }
}

impl std::fmt::Debug for ScopeAfterRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopeAfterRun").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Option<IdempotencyScope>);

    impl Rescope for Fixed {
        fn scope_after_run(&self) -> ScopeFuture<'_> {
            Box::pin(async move { self.0.clone() })
        }
    }

    #[tokio::test]
    async fn a_mapped_extension_tells_the_changed_scope_and_nothing_for_nothing() {
        let by_principal = |scope: IdempotencyScope| {
            scope
                .without_part("authorization")
                .with_part("principal", "agent-7")
        };
        let rotated = IdempotencyScope::default()
            .with_part("session", "new-id")
            .with_part("authorization", "Bearer one");
        let mapped = ScopeAfterRun::new(Fixed(Some(rotated))).map(by_principal);
        assert_eq!(
            mapped.scope_after_run().await,
            Some(
                IdempotencyScope::default()
                    .with_part("session", "new-id")
                    .with_part("principal", "agent-7")
            )
        );
        let unmoved = ScopeAfterRun::new(Fixed(None)).map(by_principal);
        assert_eq!(unmoved.scope_after_run().await, None);
    }
}
