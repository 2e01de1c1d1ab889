//! [`MutationContext`]: what a repository's mutations know about the request
//! that caused them.

use std::sync::Arc;

use autumn_base::clock::{SharedClock, SystemClock};
use autumn_idempotency::IdempotencyContext;
use axum::extract::FromRequestParts;
use http::request::Parts;
use tokio::sync::Notify;

/// Request extension: the clock commit-hook rows are stamped with and the
/// worker to wake after a commit.
///
/// Inserted by each route's stack (an `Extension` layer beside the database
/// pool's) when the app has a database; read by the [`MutationContext`]
/// extractor alone, which repositories take.
#[derive(Clone)]
pub(crate) struct CommitQueue {
    pub(crate) clock: SharedClock,
    pub(crate) wake: Arc<Notify>,
}

impl std::fmt::Debug for CommitQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitQueue").finish_non_exhaustive()
    }
}

/// What a mutation knows about the request that caused it: the
/// framework-scoped idempotency key, and the commit-hook queue to wake once
/// the mutation commits.
///
/// Extracted in a handler (generated repositories extract it themselves), it
/// holds the request's storage key when the request came through the
/// idempotency layer with an `Idempotency-Key`: a hash of the method, path,
/// the caller's scope and the key, so two users sending the same key get
/// different values. Outside such a request (no key, a form post, a
/// background task) it is `None`.
///
/// ```
/// use autumn_core::jobs::MutationContext;
///
/// let outside = MutationContext::detached();
/// assert_eq!(outside.idempotency_key(), None);
/// let keyed = MutationContext::with_idempotency_key("v1:5c0f...");
/// assert_eq!(keyed.idempotency_key(), Some("v1:5c0f..."));
/// ```
#[derive(Debug, Clone)]
pub struct MutationContext {
    /// The request's storage key, when it was idempotent. Public so
    /// generated code and apps read it as the field the docs name.
    pub idempotency_key: Option<Arc<str>>,
    queue: Option<CommitQueue>,
    /// The request's id, carried to the jobs it queues.
    request_id: Option<Arc<str>>,
}

impl MutationContext {
    /// A context outside any request: no key, and a commit-hook row waits
    /// for the worker's next poll.
    pub fn detached() -> Self {
        Self {
            idempotency_key: None,
            queue: None,
            request_id: None,
        }
    }

    /// A context with `key` as the framework-scoped idempotency key, for
    /// tests and for work that carries the key of the request it continues.
    pub fn with_idempotency_key(key: impl Into<Arc<str>>) -> Self {
        Self {
            idempotency_key: Some(key.into()),
            queue: None,
            request_id: None,
        }
    }

    /// This context with its rows stamped by `clock` instead of the system
    /// clock: for a test on a manual clock, or work outside a request that
    /// keeps to the app's clock. (In a request the app's clock is already
    /// the one.)
    ///
    /// ```
    /// use std::sync::Arc;
    /// use autumn_core::jobs::MutationContext;
    /// use autumn_base::clock::ManualClock;
    ///
    /// let clock = ManualClock::starting_at(1_000_000);
    /// let context = MutationContext::with_idempotency_key("v1:k").with_clock(Arc::new(clock));
    /// assert_eq!(context.idempotency_key(), Some("v1:k"));
    /// ```
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        let wake = match self.queue.take() {
            Some(queue) => queue.wake,
            None => Arc::new(Notify::new()),
        };
        self.queue = Some(CommitQueue { clock, wake });
        self
    }

    /// The id of the request the mutation runs for (its `x-request-id`),
    /// which the jobs it queues carry into their log lines.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// This context as the request `id`'s (for work that continues it).
    #[must_use]
    pub fn with_request_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.request_id = Some(id.into());
        self
    }

    /// The framework-scoped idempotency key, if the mutation runs for an
    /// idempotent request.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// The clock commit-hook rows are stamped with: the app clock when the
    /// worker runs in this app, the system clock otherwise.
    pub(crate) fn clock(&self) -> SharedClock {
        match &self.queue {
            Some(queue) => queue.clock.clone(),
            None => Arc::new(SystemClock),
        }
    }

    /// Tells the worker there is new work: call after the transaction that
    /// wrote commit-hook rows committed. Without a worker in this app the
    /// rows wait for one that polls the same database.
    pub fn committed(&self) {
        if let Some(queue) = &self.queue {
            queue.wake.notify_one();
        }
    }
}

impl Default for MutationContext {
    fn default() -> Self {
        Self::detached()
    }
}

/// Never rejects: a request without a key is a mutation without one.
impl<S: Send + Sync> FromRequestParts<S> for MutationContext {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self {
            idempotency_key: parts
                .extensions
                .get::<IdempotencyContext>()
                .map(|context| Arc::from(context.storage_key())),
            queue: parts.extensions.get::<CommitQueue>().cloned(),
            request_id: parts
                .extensions
                .get::<crate::telemetry::RequestId>()
                .map(|id| Arc::from(id.as_str())),
        })
    }
}
