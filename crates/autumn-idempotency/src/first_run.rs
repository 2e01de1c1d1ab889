//! The first run of a guarded request, shared by the idempotency-key and
//! submit-token services: run the handler while renewing its lock, record a
//! 2xx/3xx response (and a 5xx, when the route records server errors) and
//! release the lock in one store call, or release it without recording.
//! A response too large to record is replaced in the store by a marker
//! (`IdempotencyRecord::not_recorded`), so its retry is refused rather than
//! run again.

use std::collections::HashSet;
use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{MatchedPath, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::FutureExt as _;
use tower::Service;

use crate::finalize::FinalizeHook;
use crate::key::{LogDigest, hash_parts, storage_key};
use crate::metrics::IdempotencyMetrics;
use crate::problem::{IdempotencyRejection, SubmitTokenRejection};
use crate::quota::Charge;
use crate::record::IdempotencyRecord;
use crate::rescope::ScopeAfterRun;
use crate::scope::IdempotencyScope;
use crate::sealing::RecordSealing;
use crate::store::{Claim, IdempotencyFuture, IdempotencyStore};
use autumn_base::body::{Capped, read_capped};

/// A lock the request holds, and what to record under it.
pub(crate) struct Held {
    pub(crate) store: Arc<dyn IdempotencyStore>,
    pub(crate) storage_key: String,
    pub(crate) owner: String,
    pub(crate) fingerprint: Vec<u8>,
    /// How long the record is kept.
    pub(crate) ttl: Duration,
    /// How long the lock lasts without renewal; the run renews it every
    /// third of this.
    pub(crate) in_flight_ttl: Duration,
    /// The largest response body recorded.
    pub(crate) max_record_bytes: usize,
    /// Whether a 5xx the route answered is recorded like a success
    /// (`RecordErrors::Server`; never for submit tokens).
    pub(crate) record_server_errors: bool,
    pub(crate) metrics: Arc<IdempotencyMetrics>,
    /// How the record is sealed before the store sees it.
    pub(crate) sealing: RecordSealing,
    /// Which route answered, for a warning per route.
    pub(crate) route: RouteLabel,
    /// Which guard holds the lock: it decides the rejection a failed run
    /// answers with.
    pub(crate) guard: Guard,
    /// An outer layer's work on the response before it is final (the
    /// session's Set-Cookie), taken from the request.
    pub(crate) finalize: Option<FinalizeHook>,
    /// How to follow a scope the handler changed (a tenant switch), taken
    /// from the request's [`ScopeAfterRun`].
    pub(crate) after_run: Option<AfterRun>,
    /// The caller's quota count for this key: settled with the record's
    /// size once recorded, given back when nothing is.
    pub(crate) charge: Option<Charge>,
}

/// Whether [`run_and_record`] recorded the response it returns: `finish`
/// wrote the record under this request's lock (a marker written in its
/// place, for a response too large to record, does not count). Returned beside the
/// response rather than put in its extensions, so it cannot travel out to
/// an outer guard that would take it for its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recorded(pub(crate) bool);

/// What a guard needs to follow the caller into the scope the handler moved
/// it to (see [`crate::rescope`]).
pub(crate) struct AfterRun {
    pub(crate) rescope: ScopeAfterRun,
    /// The scope the request carried.
    pub(crate) scope: IdempotencyScope,
    pub(crate) target: Retarget,
}

/// What depends on the scope in each guard.
pub(crate) enum Retarget {
    /// The `Idempotency-Key` guard: the storage key, from these parts.
    Key {
        method: http::Method,
        path: String,
        key: http::HeaderValue,
    },
    /// The submit-token guard: the record's binding to the scope.
    Binding,
}

/// The hash binding a submit token's record to the scope that consumed it.
pub(crate) fn token_binding(scope: &[u8]) -> [u8; 32] {
    hash_parts("autumn.submit-token.scope.v1", &[scope])
}

/// Where a response is recorded besides the claimed key, once the scope moved.
#[derive(Default)]
struct Followed {
    /// A storage key claimed under the new scope, for the same owner.
    also_key: Option<String>,
    /// The submit-token binding of the new scope, recorded beside the old.
    also_binding: Option<[u8; 32]>,
}

impl AfterRun {
    /// Locks what a retry under the scope after the run will look up, before
    /// the finalize hook makes that scope the caller's (saves the session).
    async fn follow(&self, held: &Held) -> Followed {
        let Some(scope) = self.rescope.scope_after_run().await else {
            return Followed::default();
        };
        if scope == self.scope {
            return Followed::default();
        }
        let (method, path, key) = match &self.target {
            Retarget::Binding => {
                return Followed {
                    also_key: None,
                    also_binding: Some(token_binding(scope.as_bytes())),
                };
            }
            Retarget::Key { method, path, key } => (method, path, key),
        };
        let key = crate::key::key_str(key);
        let moved = storage_key(method.as_str(), path, scope.as_bytes(), key);
        // Held for the record's lifetime, like the claimed key while the hook
        // runs: a crash in the save leaves 409 here too, never a second run.
        match held.store.claim(&moved, &held.owner, held.ttl).await {
            Ok(Claim::Acquired) => Followed {
                also_key: Some(moved),
                also_binding: None,
            },
            Ok(Claim::InFlight | Claim::Completed { .. }) => {
                tracing::warn!(
                    storage_key_hash = %LogDigest(held.storage_key.as_bytes()),
                    moved_to_hash = %LogDigest(moved.as_bytes()),
                    "the handler moved the caller to another scope whose key another request already holds; the response is recorded under the old key alone"
                );
                Followed::default()
            }
            Err(error) => {
                tracing::warn!(
                    storage_key_hash = %LogDigest(held.storage_key.as_bytes()),
                    moved_to_hash = %LogDigest(moved.as_bytes()),
                    %error,
                    "could not lock the key a retry under the new scope will use; the response is recorded under the old key alone"
                );
                Followed::default()
            }
        }
    }
}

/// The guard a run belongs to, so its failures answer with that guard's
/// rejection (and tell the client how it tries again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// The `Idempotency-Key` layer.
    Key,
    /// The submit-token layer.
    Token,
}

impl Guard {
    /// 500: the handler panicked.
    fn panicked(self) -> Response {
        match self {
            Self::Key => IdempotencyRejection::HandlerPanicked.into_response(),
            Self::Token => SubmitTokenRejection::HandlerPanicked.into_response(),
        }
    }

    /// 500: the handler ran but its response body failed.
    fn response_lost(self) -> Response {
        match self {
            Self::Key => IdempotencyRejection::ResponseLost.into_response(),
            Self::Token => SubmitTokenRejection::ResponseLost.into_response(),
        }
    }

    /// 500: the handler ran but its response could not be made final.
    fn not_finalized(self) -> Response {
        match self {
            Self::Key => IdempotencyRejection::ResponseNotFinal.into_response(),
            Self::Token => SubmitTokenRejection::ResponseNotFinal.into_response(),
        }
    }
}

impl Held {
    /// Releases the lock, and gives its quota count back: nothing was
    /// recorded. On failure the lock lapses after its TTL.
    pub(crate) async fn release(&self) {
        if let Err(error) = self.store.unlock(&self.storage_key, &self.owner).await {
            tracing::warn!(storage_key_hash = %LogDigest(self.storage_key.as_bytes()), %error, "could not release a lock; it lapses after its in-flight TTL");
        }
        if let Some(charge) = &self.charge {
            charge.give_back(&self.storage_key).await;
        }
    }
}

/// The route a request went to: its matched path when the layer sits inside
/// the router, else the path the client sent. Cheap to take per request
/// (reference-counted parts); turned into text only for a warning.
pub(crate) struct RouteLabel {
    method: http::Method,
    matched: Option<MatchedPath>,
    uri: http::Uri,
}

impl RouteLabel {
    pub(crate) fn of(
        method: &http::Method,
        uri: &http::Uri,
        extensions: &http::Extensions,
    ) -> Self {
        Self {
            method: method.clone(),
            matched: extensions.get::<MatchedPath>().cloned(),
            uri: uri.clone(),
        }
    }

    fn text(&self) -> String {
        let path = match &self.matched {
            Some(matched) => matched.as_str(),
            None => self.uri.path(),
        };
        format!("{} {path}", self.method)
    }
}

/// Whether this is the first time `route` is warned about in this process.
/// Remembers a bounded number of routes, so raw paths (a layer outside the
/// router sees no matched route) cannot grow it without end; once full, it
/// warns about no new route.
fn first_warning(route: &RouteLabel) -> bool {
    const MOST_ROUTES: usize = 1024;
    static WARNED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);
    let Ok(mut warned) = WARNED.lock() else {
        return false;
    };
    if warned.len() >= MOST_ROUTES {
        return false;
    }
    warned.insert(route.text())
}

/// The handler's response, boxed: the run's own future then stays small
/// whatever the route's future weighs. The handler is called on the first
/// poll, inside [`run_and_record`]'s panic guard, so a panic in `call`
/// itself is answered like one in the handler.
pub(crate) fn call_boxed<S>(
    mut inner: S,
    request: Request,
) -> Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    Box::pin(async move { inner.call(request).await })
}

/// What owns the [`Held`] lock of a running request.
pub(crate) trait HoldsLock: Send + 'static {
    fn held(&self) -> &Held;
}

impl HoldsLock for Held {
    fn held(&self) -> &Held {
        self
    }
}

/// What the handler's run came to, before anything is recorded.
enum Ran {
    /// The handler panicked.
    Panicked,
    /// An error response that is not recorded (a 4xx; a 5xx unless the
    /// route records server errors): passed on.
    Failed(Response),
    /// A response to record (2xx/3xx, or a recorded 5xx) and its whole body.
    Whole(http::response::Parts, Bytes),
    /// A response to record whose body is larger than the record limit: the
    /// body handed back whole (what was read, then the rest as it streams).
    TooLarge(http::response::Parts, Body),
    /// A response to record whose body failed while it was read.
    BodyFailed(axum::Error),
}

/// What goes into the store for a response that is kept.
enum Kept {
    /// The response itself: its whole body.
    Whole(Bytes),
    /// A marker in its place, the body (too large to record) streamed on to
    /// the client.
    Marker(Body),
}

/// Awaits the handler's `response`; a panic is answered 500 and an error
/// response passed on, both releasing the lock so the next attempt runs
/// again. A 2xx/3xx response, and a 5xx when the route records server
/// errors (`held.record_server_errors`; a 4xx never is), is recorded (marked
/// by `replays_through_inner`) and the lock released in one store call.
///
/// While the handler runs (and its response body is read), the lock is
/// renewed every third of its in-flight TTL, in this same future: nothing is
/// spawned for it, and it goes on in a run detached from its client. A
/// failed renewal is logged and counted; a store error is tried again at the
/// next beat, a lock found lost is not. The response is then still recorded
/// with the owner-checked `finish`, which writes nothing once another
/// request holds the key or has recorded it, so the record is never written
/// over someone else's lock.
///
/// A response body larger than the record limit is streamed to the client
/// whole and not recorded: a marker takes its place under the key, written
/// the same way (same fingerprint, same TTL, same finalize hook), so a retry
/// with the same request is refused with 409 rather than run again, and one
/// with another request still gets 422.
///
/// `response` is [`call_boxed`]'s future: the only copy of the request this
/// future holds.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps a second copy of each argument in its future"
)]
pub(crate) fn run_and_record<F>(
    holder: impl HoldsLock,
    response: F,
    replays_through_inner: impl FnOnce(&http::response::Parts) -> bool + Send + 'static,
) -> impl Future<Output = (Response, Recorded)> + Send
where
    F: Future<Output = Result<Response, Infallible>> + Send,
{
    async move {
        let held = holder.held();
        let run = async {
            let response = match AssertUnwindSafe(response).catch_unwind().await {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_panic) => return Ran::Panicked,
            };
            let status = response.status();
            // A 4xx says the request itself was wrong: never recorded, so
            // the client can fix it and try again with the same key.
            let recorded = status.is_success()
                || status.is_redirection()
                || (held.record_server_errors && status.is_server_error());
            if !recorded {
                return Ran::Failed(response);
            }
            let (parts, body) = response.into_parts();
            match read_capped(body, held.max_record_bytes).await {
                Ok(Capped::Whole(body)) => Ran::Whole(parts, body),
                Ok(Capped::Over(body)) => Ran::TooLarge(parts, body),
                Err(error) => Ran::BodyFailed(error),
            }
        };
        let ran = with_heartbeat(held, run).await;
        let (parts, kept) = match ran {
            Ran::Panicked => {
                tracing::error!(
                    storage_key_hash = %LogDigest(held.storage_key.as_bytes()),
                    "handler panicked; releasing its lock"
                );
                held.release().await;
                return (held.guard.panicked(), Recorded(false));
            }
            Ran::Failed(response) => {
                held.release().await;
                return (response, Recorded(false));
            }
            Ran::TooLarge(parts, body) => {
                held.metrics.too_large_to_record();
                if first_warning(&held.route) {
                    tracing::warn!(
                        route = %held.route.text(),
                        limit = held.max_record_bytes,
                        "a response is larger than max_record_bytes: sent but not recorded; a retry of the same request gets 409 instead of running the handler again (warned once per route)"
                    );
                }
                // The handler ran: release the lock and a retry would run it
                // again. A marker is recorded in the response's place.
                (parts, Kept::Marker(body))
            }
            Ran::BodyFailed(error) => {
                // The handler ran but its response is lost: keep the lock, so a
                // retry gets 409 until it lapses rather than a second run now.
                tracing::error!(storage_key_hash = %LogDigest(held.storage_key.as_bytes()), %error, "response body failed; keeping the lock");
                return (held.guard.response_lost(), Recorded(false));
            }
            Ran::Whole(parts, body) => (parts, Kept::Whole(body)),
        };
        let mut parts = parts;
        let followed = match &held.after_run {
            Some(after_run) => after_run.follow(held).await,
            None => Followed::default(),
        };
        let mut fingerprint = match followed.also_binding {
            Some(binding) => [held.fingerprint.as_slice(), &binding].concat(),
            None => held.fingerprint.clone(),
        };
        if let Some(hook) = held.finalize.as_ref().filter(|hook| hook.pending()) {
            if let Err(response) = finalize(held, hook, &mut parts.headers).await {
                return (response, Recorded(false));
            }
            // A token's record also answers the session its response set.
            if held.guard == Guard::Token
                && let Some(after) = hook.binding_after()
            {
                fingerprint.extend_from_slice(&token_binding(&after));
            }
        }
        let record = held.sealing.seal(match &kept {
            Kept::Whole(body) => IdempotencyRecord::from_parts(&parts, body.clone())
                .with_replay_through_inner(replays_through_inner(&parts)),
            Kept::Marker(_) => IdempotencyRecord::not_recorded(parts.status),
        });
        // What the record weighs against its caller's quota.
        let weight = (record.encoded_len() + fingerprint.len()) as u64;
        if let Some(moved) = &followed.also_key {
            let finished = held
                .store
                .finish(
                    moved,
                    &held.owner,
                    record.clone(),
                    fingerprint.clone(),
                    held.ttl,
                )
                .await;
            if let Err(error) = finished {
                tracing::error!(storage_key_hash = %LogDigest(moved.as_bytes()), %error, "could not record the response under the key of the new scope; it stays locked until the record's TTL ends");
            }
        }
        let finished = held
            .store
            .finish(
                &held.storage_key,
                &held.owner,
                record,
                fingerprint,
                held.ttl,
            )
            .await;
        // A marker is written like a record, but nothing will be replayed.
        let recorded = matches!(finished, Ok(true)) && matches!(kept, Kept::Whole(_));
        match finished {
            Ok(true) => {
                if let Some(charge) = &held.charge {
                    charge.settle(&held.storage_key, weight, held.ttl).await;
                }
            }
            Ok(false) => {
                tracing::warn!(
                    storage_key_hash = %LogDigest(held.storage_key.as_bytes()),
                    "the lock lapsed and another request took the key before this response was recorded; it was not recorded"
                )
            }
            // The handler's work is done: answer with its response, and keep the
            // lock so a retry gets 409 until it lapses instead of a second run.
            Err(error) => {
                tracing::error!(storage_key_hash = %LogDigest(held.storage_key.as_bytes()), %error, "could not record the response; the lock stays until its in-flight TTL")
            }
        }
        let body = match kept {
            Kept::Whole(body) => Body::from(body),
            Kept::Marker(body) => body,
        };
        (Response::from_parts(parts, body), Recorded(recorded))
    }
}

/// Runs an outer layer's `hook` on a response about to be recorded, after
/// keeping the lock for as long as the record would live: a hook that
/// fails, or a process that dies while it runs, then leaves retries a 409
/// until then, never a second run nor a replay that lacks the hook's work.
/// `Err` is the response to answer instead; the lock is kept.
async fn finalize(
    held: &Held,
    hook: &FinalizeHook,
    headers: &mut http::HeaderMap,
) -> Result<(), Response> {
    match held
        .store
        .renew_lock(&held.storage_key, &held.owner, held.ttl)
        .await
    {
        Ok(true) => {}
        // Lost or unknown: the hook still runs (its work is the client's,
        // and the record stays owner-checked), but say so.
        Ok(false) => tracing::warn!(
            storage_key_hash = %LogDigest(held.storage_key.as_bytes()),
            "the lock was lost before the response was finished; it will not be recorded"
        ),
        Err(error) => tracing::warn!(
            storage_key_hash = %LogDigest(held.storage_key.as_bytes()),
            %error,
            "could not keep the lock while the response is finished; it lapses after its in-flight TTL"
        ),
    }
    hook.finalize(headers).await.map_err(|error| {
        tracing::error!(
            storage_key_hash = %LogDigest(held.storage_key.as_bytes()),
            %error,
            "the response could not be finished (the session was not saved); not recorded, and the key stays locked until the record's TTL ends"
        );
        held.guard.not_finalized()
    })
}

/// Runs `work` while renewing `held`'s lock every third of its in-flight
/// TTL. A failed renewal is logged (error level, with the storage key) and
/// counted: after a store error the next beat tries again, since the lock
/// may well still be ours; once the store answers that the lock is lost,
/// renewing stops.
///
/// The handler is polled first: one that finishes without waiting costs no
/// timer. The renewal is polled beside the work, never instead of it.
async fn with_heartbeat<T>(held: &Held, work: impl Future<Output = T>) -> T {
    let mut work = std::pin::pin!(work);
    let period = held.in_flight_ttl / 3;
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut renewal: Option<IdempotencyFuture<'_, bool>> = None;
    let mut lost = false;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(output);
        }
        if lost || period.is_zero() {
            return Poll::Pending;
        }
        loop {
            if let Some(renewing) = &mut renewal {
                let renewed = std::task::ready!(renewing.as_mut().poll(cx));
                renewal = None;
                let failure = match renewed {
                    Ok(true) => None,
                    Ok(false) => {
                        lost = true;
                        Some("the lock lapsed or another owner holds it".to_owned())
                    }
                    Err(error) => Some(error.to_string()),
                };
                if let Some(failure) = failure {
                    held.metrics.lock_renewal_failed();
                    tracing::error!(
                        storage_key_hash = %LogDigest(held.storage_key.as_bytes()),
                        error = %failure,
                        lock_lost = lost,
                        "could not renew the in-flight lock while the handler runs; its response is still recorded unless another request took the key once the lock lapsed"
                    );
                    if lost {
                        return Poll::Pending;
                    }
                }
            }
            let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(period)));
            std::task::ready!(timer.as_mut().poll(cx));
            timer.as_mut().reset(tokio::time::Instant::now() + period);
            renewal = Some(held.store.renew_lock(
                &held.storage_key,
                &held.owner,
                held.in_flight_ttl,
            ));
        }
    })
    .await
}
