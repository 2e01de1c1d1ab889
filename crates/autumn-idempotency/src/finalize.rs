//! [`FinalizeHook`]: work an outer layer does to a response before it is
//! final, run by the guards before they record it.
//!
//! A recorded response must be the one the client finally receives. Autumn's
//! session layer sits outside the guards and adds a `Set-Cookie` when the
//! handler changed the session; recorded before that, a replay would lack
//! the cookie (a retried login would answer "signed in" and sign nobody in).
//! So the session layer puts a hook in the request extensions, and a guard
//! about to record a 2xx/3xx response runs it first:
//!
//! ```text
//! handler -> response -> hook pending? -- no --> record, unlock
//!                             | yes
//!                             v
//!            keep the lock for the record's TTL   (a crash or a failed save
//!            run the hook (save, add Set-Cookie)   now leaves 409, never a
//!                |- ok    -> record, unlock        second run nor a replay
//!                `- error -> 500, lock kept        without the cookie)
//! ```
//!
//! The hook runs inside the guard's run, which goes on when the client hangs
//! up, so a double-click that aborts the first request still ends with its
//! session saved and its response recorded.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::HeaderMap;

/// The boxed future [`Finalize::finalize`] returns.
pub type FinalizeFuture<'a> = Pin<Box<dyn Future<Output = Result<(), FinalizeError>> + Send + 'a>>;

/// Work that must be done to a response before it is final.
///
/// ```
/// use autumn_idempotency::finalize::{Finalize, FinalizeFuture, FinalizeHook};
/// use http::{HeaderMap, HeaderValue, header};
///
/// struct SetCookie;
///
/// impl Finalize for SetCookie {
///     fn pending(&self) -> bool {
///         true
///     }
///     fn finalize<'a>(&'a self, headers: &'a mut HeaderMap) -> FinalizeFuture<'a> {
///         headers.append(header::SET_COOKIE, HeaderValue::from_static("id=1"));
///         Box::pin(async { Ok(()) })
///     }
/// }
///
/// let hook = FinalizeHook::new(SetCookie);
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(hook);
/// ```
pub trait Finalize: Send + Sync + 'static {
    /// Whether the response will change: when `false`, the guard records
    /// the response as it is, at no extra cost.
    fn pending(&self) -> bool;

    /// Does the work, adding what it must to the response's `headers`.
    fn finalize<'a>(&'a self, headers: &'a mut HeaderMap) -> FinalizeFuture<'a>;

    /// After [`finalize`](Self::finalize): who the client is once it has the
    /// final response (the session a sign-in rotated to), as a
    /// [`TokenBinding`](crate::submit::TokenBinding)'s bytes. A submit token's
    /// record then answers a resend from that session too. `None` (the
    /// default): the client is who it was.
    fn binding_after(&self) -> Option<Vec<u8>> {
        None
    }
}

/// Request extension: the [`Finalize`] work of an outer layer.
///
/// Inserted by Autumn's session service on every request a guard may act
/// on (its work: save the session, add the `Set-Cookie`). Read by both
/// guards as they set up a run, and run by `run_and_record` just before a
/// 2xx/3xx response is recorded.
#[derive(Clone)]
pub struct FinalizeHook(Arc<dyn Finalize>);

impl FinalizeHook {
    /// A hook running `work`.
    pub fn new(work: impl Finalize) -> Self {
        Self(Arc::new(work))
    }

    /// A hook sharing `work`.
    pub fn from_arc(work: Arc<dyn Finalize>) -> Self {
        Self(work)
    }

    pub(crate) fn pending(&self) -> bool {
        self.0.pending()
    }

    pub(crate) fn finalize<'a>(&'a self, headers: &'a mut HeaderMap) -> FinalizeFuture<'a> {
        self.0.finalize(headers)
    }

    pub(crate) fn binding_after(&self) -> Option<Vec<u8>> {
        self.0.binding_after()
    }
}

impl std::fmt::Debug for FinalizeHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FinalizeHook").finish_non_exhaustive()
    }
}

/// The finishing work failed: the response is not final and is not
/// recorded, and the key stays locked until the record's TTL ends.
///
/// ```
/// use autumn_idempotency::finalize::FinalizeError;
///
/// let saved: Result<(), std::io::Error> = Err(std::io::Error::other("disk full"));
/// let error = saved.map_err(FinalizeError::from_error).unwrap_err();
/// assert_eq!(error.to_string(), "disk full");
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct FinalizeError(Repr);

/// What a [`FinalizeError`] holds: the failed work's own error when it
/// has one, so its chain reaches the logs whole.
#[derive(Debug, Clone, thiserror::Error)]
enum Repr {
    #[error("{0}")]
    Message(String),
    #[error(transparent)]
    Error(Arc<dyn std::error::Error + Send + Sync>),
}

impl FinalizeError {
    /// An error described by `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self(Repr::Message(message.into()))
    }

    /// The work's own `error`, kept whole: it reads (`Display`, `source`)
    /// as `error` does.
    pub fn from_error(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Repr::Error(Arc::new(error)))
    }
}
