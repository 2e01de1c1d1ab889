//! What the idempotency and submit-token services share: which methods they
//! guard, calling the inner service, and a request future that outlives its
//! client once it holds a lock.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::Notify;

use std::sync::Arc;

use axum::response::Response;

pub(crate) use crate::key::is_guarded_method as is_mutating;
use crate::store::IdempotencyStore;

/// A claim sent to the store whose outcome the request has not taken over
/// yet. Dropped while armed (the request future was dropped during the
/// claim: the client hung up, a timeout fired; or the claim answered an
/// error after the store may have taken the lock, such as a Redis reply
/// timeout), it releases the lock the claim may have taken, so retries are
/// not refused for the whole in-flight TTL with nobody running. Safe: the
/// release is owner-checked, and this owner never ran the handler. Best
/// effort, on a task of its own on the current runtime; without one, the
/// lock lapses after its TTL.
///
/// It borrows, so arming it costs nothing on the common path; only a drop
/// while armed copies the storage key and the owner.
pub(crate) struct PendingClaim<'a> {
    store: &'a Arc<dyn IdempotencyStore>,
    storage_key: &'a str,
    owner: &'a str,
}

impl<'a> PendingClaim<'a> {
    pub(crate) fn new(
        store: &'a Arc<dyn IdempotencyStore>,
        storage_key: &'a str,
        owner: &'a str,
    ) -> Self {
        Self {
            store,
            storage_key,
            owner,
        }
    }

    /// The claim answered: the request owns what came of it.
    pub(crate) fn settled(self) {
        std::mem::forget(self);
    }
}

impl Drop for PendingClaim<'_> {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.store.clone();
        let storage_key = self.storage_key.to_owned();
        let owner = self.owner.to_owned();
        runtime.spawn(async move {
            if let Err(error) = store.unlock(&storage_key, &owner).await {
                tracing::warn!(storage_key_hash = %crate::key::LogDigest(storage_key.as_bytes()), %error, "could not release an unfinished claim; its lock lapses after its in-flight TTL");
            }
        });
    }
}

/// The response of an infallible inner service's future.
pub(crate) async fn settle<F>(response: F) -> Response
where
    F: Future<Output = Result<Response, Infallible>>,
{
    match response.await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// A guarded request's work, boxed.
pub(crate) type BoxedResponse = Pin<Box<dyn Future<Output = Response> + Send>>;

/// What the first phase of a guarded request (read the body, look the key
/// up, take the lock) decided.
pub(crate) enum Step {
    /// Answer now: a replay, a refusal, or a request that needed no lock.
    Respond(Response),
    /// Hand on to work that holds no lock: it ends with the request.
    Forward(BoxedResponse),
    /// The lock is held: this work runs to completion even if the client
    /// hangs up.
    Run(BoxedResponse),
}

/// The boxed first phase.
pub(crate) type BoxedStep = Pin<Box<dyn Future<Output = Step> + Send>>;

/// A guarded request's work, in two phases boxed apart: the lookup, then the
/// handler's run. Two boxes, each small enough for the allocator's fast path,
/// and never both parked at once.
///
/// Once the work holds its lock, dropping this (the client hung up) moves the
/// rest of it to a task of its own, so the response is still recorded and the
/// client's retry gets the replay instead of a 409 for the rest of the lock's
/// TTL. Before that nothing is spawned, which keeps the common path cheap.
pub(crate) struct Guarded {
    phase: Phase,
}

enum Phase {
    Lookup(BoxedStep),
    Forward(BoxedResponse),
    Run(BoxedResponse),
    Done,
}

impl Guarded {
    pub(crate) fn new(lookup: BoxedStep) -> Self {
        Self {
            phase: Phase::Lookup(lookup),
        }
    }

    /// Polls the current phase.
    ///
    /// # Panics
    ///
    /// When polled again after it returned its response, as futures may.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Response> {
        loop {
            let response = match &mut self.phase {
                // Replacing the phase drops the finished lookup's box.
                Phase::Lookup(lookup) => match std::task::ready!(lookup.as_mut().poll(cx)) {
                    Step::Respond(response) => response,
                    Step::Forward(future) => {
                        self.phase = Phase::Forward(future);
                        continue;
                    }
                    Step::Run(future) => {
                        self.phase = Phase::Run(future);
                        continue;
                    }
                },
                Phase::Forward(future) | Phase::Run(future) => {
                    std::task::ready!(future.as_mut().poll(cx))
                }
                // A caller bug; answering twice, or hanging, would hide it.
                Phase::Done => panic!("`Guarded` polled after completion"),
            };
            self.phase = Phase::Done;
            return Poll::Ready(response);
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Phase::Run(future) = std::mem::replace(&mut self.phase, Phase::Done)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // Counted before it is spawned, so a shutdown that starts
            // waiting right after cannot miss it.
            let counted = DetachedRun::start();
            // Moving the box moves a pointer: the pinned future stays put.
            runtime.spawn(async move {
                let _counted = counted;
                future.await
            });
        }
    }
}

/// How many detached runs are still going, process-wide, and a way to hear
/// when that number drops.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
static FINISHED: std::sync::LazyLock<Notify> = std::sync::LazyLock::new(Notify::new);

tokio::task_local! {
    /// The detached runs of the app whose request this task serves.
    static APP_RUNS: Arc<DetachedRuns>;
}

/// The first-time runs one app (one server) left running after their
/// clients hung up, so its shutdown waits for its own runs and not for
/// another app's in the same process (parallel servers, tests).
///
/// A server makes one, and runs each connection's work in
/// [`scope`](Self::scope); a run detached there is counted here as well
/// as in the process-wide [`detached_runs`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use autumn_idempotency::DetachedRuns;
///
/// let runs = Arc::new(DetachedRuns::default());
/// // A server serves each connection inside the scope.
/// runs.clone().scope(async { /* serve a connection */ }).await;
/// assert_eq!(runs.count(), 0);
/// assert_eq!(runs.wait(Duration::from_secs(1)).await, 0);
/// # }
/// ```
#[derive(Debug, Default)]
pub struct DetachedRuns {
    running: AtomicUsize,
    finished: Notify,
}

impl DetachedRuns {
    /// Runs `work` with runs it detaches counted here.
    pub fn scope<F: Future>(self: Arc<Self>, work: F) -> impl Future<Output = F::Output> {
        APP_RUNS.scope(self, work)
    }

    /// How many of this app's detached runs are still going.
    #[must_use]
    pub fn count(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Waits up to `limit` for this app's detached runs to finish, and
    /// returns how many are still going: 0 when all finished in time.
    pub async fn wait(&self, limit: Duration) -> usize {
        wait_until_none(&self.running, &self.finished, limit).await
    }
}

/// One detached run, counted while it lives (process-wide, and in its
/// app's [`DetachedRuns`] when it has one); dropped when the run finishes
/// or its runtime shuts down under it.
struct DetachedRun(Option<Arc<DetachedRuns>>);

impl DetachedRun {
    fn start() -> Self {
        RUNNING.fetch_add(1, Ordering::AcqRel);
        let app = APP_RUNS.try_with(Arc::clone).ok();
        if let Some(app) = &app {
            app.running.fetch_add(1, Ordering::AcqRel);
        }
        Self(app)
    }
}

impl Drop for DetachedRun {
    fn drop(&mut self) {
        if let Some(app) = &self.0
            && app.running.fetch_sub(1, Ordering::AcqRel) == 1
        {
            app.finished.notify_waiters();
        }
        if RUNNING.fetch_sub(1, Ordering::AcqRel) == 1 {
            FINISHED.notify_waiters();
        }
    }
}

/// Waits up to `limit` for `running` to reach 0, woken by `finished`;
/// what is still running then.
async fn wait_until_none(running: &AtomicUsize, finished: &Notify, limit: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let notified = finished.notified();
        let mut notified = std::pin::pin!(notified);
        // Registered before the count is read, so a run finishing in between
        // still wakes this waiter.
        notified.as_mut().enable();
        if running.load(Ordering::Acquire) == 0 {
            return 0;
        }
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep_until(deadline) => return running.load(Ordering::Acquire),
        }
    }
}

/// How many first-time runs are still going after their client hung up.
///
/// A request that holds its lock when the client disconnects keeps running
/// on a task of its own, so its response is still recorded and the client's
/// retry gets a replay. Counted across the whole process.
///
/// ```
/// assert_eq!(autumn_idempotency::detached_runs(), 0);
/// ```
#[must_use]
pub fn detached_runs() -> usize {
    RUNNING.load(Ordering::Acquire)
}

/// Waits up to `limit` for every detached run to finish (see
/// [`detached_runs`]), and returns how many are still going: 0 when all
/// finished in time.
///
/// A server calls this after it stops accepting connections and before its
/// runtime shuts down: a run cancelled mid-handler records nothing and
/// leaves its key locked until the lock's TTL lapses.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// let abandoned = autumn_idempotency::wait_for_detached_runs(Duration::from_secs(5)).await;
/// assert_eq!(abandoned, 0);
/// # }
/// ```
pub async fn wait_for_detached_runs(limit: Duration) -> usize {
    wait_until_none(&RUNNING, &FINISHED, limit).await
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use axum::body::Body;

    use super::*;

    fn answered() -> Guarded {
        Guarded::new(Box::pin(async {
            Step::Respond(Response::new(Body::empty()))
        }))
    }

    #[test]
    fn answers_once() {
        let mut cx = Context::from_waker(Waker::noop());
        assert!(answered().poll(&mut cx).is_ready());
    }

    #[test]
    #[should_panic(expected = "polled after completion")]
    fn panics_when_polled_after_completion() {
        let mut cx = Context::from_waker(Waker::noop());
        let mut guarded = answered();
        let _ = guarded.poll(&mut cx);
        let _ = guarded.poll(&mut cx);
    }
}
