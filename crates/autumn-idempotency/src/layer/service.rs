//! The [`Idempotency`] service: what happens to a request, step by step.
//!
//! Safe methods, requests without a key (400 when the policy requires one),
//! a malformed key, a key from a caller with no identity where the policy
//! refuses those (403) and requests nested inside another idempotency layer are
//! decided in `call()`, without boxing. A mutating request with a key then goes:
//!
//! ```text
//! buffer body (413) -> storage key + fingerprint -> claim
//!    |- store error                  -> 503 (lookup) or 409 (lock); handler not run
//!    |- InFlight                     -> wait up to in_flight_wait and claim again
//!    |                                  (wait.rs), else 409 + Retry-After: 1
//!    |- Completed, other fingerprint -> 422 (compared in the version the
//!    |                                  record's fingerprint was made with)
//!    |- Completed, same fingerprint  -> OpaqueCaller in the extensions: 409
//!    |                                  a marker (response too large to record): 409
//!    |                                  Direct: replay
//!    |                                  record made through a replay layer:
//!    |                                    forward to the route's IdempotencyReplayLayer
//!    |                                  otherwise: 409 (fail closed)
//!    `- Acquired                     -> renew if aged -> handler, run to its end even
//!                                       if the client goes away, its lock renewed
//!                                       every in_flight_ttl / 3 meanwhile
//!                                         |- panic                      -> release, 500
//!                                         |- 4xx, 5xx (unless recorded) -> release, pass on
//!                                         |- body > max_record_bytes    -> finish with a marker,
//!                                         |                                stream the body
//!                                         `- 2xx / 3xx, 5xx with        -> finish (owner-checked
//!                                            RecordErrors::Server          record + release)
//! dropped or failed mid-claim -> the claim's lock released (owner-checked, own task)
//! a forwarded replay reaching a layer not in ThroughInner mode -> 409
//! ```
//!
//! The run itself (heartbeat, record, release) is `first_run.rs`, shared
//! with the submit-token service; the two-phase future is `detach.rs`.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{OriginalUri, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, header};
use tower::Service;

use super::future::ResponseFuture;
use super::policy::Resolved;
use crate::context::{
    ForwardedReplay, IdempotencyContext, OptedIntoReplayThroughInner, PassedReplayLayer,
    PendingReplay, ReplayRefused, Replayed, carries_forwarded,
};
use crate::detach::{Guarded, Step, is_mutating, settle};
use crate::finalize::FinalizeHook;
use crate::fingerprint::{self, Comparison};
use crate::first_run::{
    AfterRun, Guard, Held, HoldsLock as _, Recorded, Retarget, RouteLabel, call_boxed,
    run_and_record,
};
use crate::key::{
    IDEMPOTENT_EXPIRES, IDEMPOTENT_HONOURED, LogDigest, key_str, parse_key_value, storage_key,
};
use crate::metrics::IdempotencyMetrics;
use crate::problem::IdempotencyRejection;
use crate::quota::{NewKey, Refused, charge_claimed};
use crate::record::IdempotencyRecord;
use crate::replay::replay_response;
use crate::rescope::ScopeAfterRun;
use crate::scope::{OpaqueCaller, is_anonymous, request_scope};
use crate::sealing::RecordSealing;
use crate::store::IdempotencyStore;
use crate::store::{Claim, StoreError, StoreErrorKind, StoreOperation};
use crate::wait::{Claimed, claim_or_wait};
use autumn_base::body::{ReadError, read_whole};
use autumn_base::clock::SharedClock;

/// Where a retry's recorded response is answered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplayMode {
    /// The layer answers the replay itself: right when nothing between the
    /// layer and the handler must run again (the default).
    Direct,
    /// The layer forwards the retry into the route, where an
    /// [`IdempotencyReplayLayer`](crate::IdempotencyReplayLayer) placed after
    /// the route's own checks (auth, tenant, audit) answers it.
    ThroughInner,
    /// The layer records first successes but answers a retry with 409: for
    /// routes whose middleware Autumn cannot see, where replaying in front of
    /// it could skip a check.
    FailClosed,
}

/// What an [`IdempotencyLayer`](super::IdempotencyLayer) was built with.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) store: Arc<dyn IdempotencyStore>,
    pub(crate) ttl: Duration,
    pub(crate) in_flight_ttl: Duration,
    pub(crate) in_flight_wait: Duration,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_record_bytes: usize,
    pub(crate) mode: ReplayMode,
    pub(crate) metrics: Arc<IdempotencyMetrics>,
    pub(crate) sealing: RecordSealing,
    pub(crate) clock: SharedClock,
    /// What each caller may hold, when limited.
    pub(crate) quota: Option<crate::quota::Quota>,
    /// The route's policy, resolved: required keys, JSON fingerprints, the
    /// in-flight wait, outcome headers.
    pub(crate) policy: Resolved,
}

impl Settings {
    /// How long a duplicate of this request waits for the first run: read per
    /// request, so a route's own policy in the extensions can override the
    /// layer's setting here.
    pub(crate) fn in_flight_wait_for(&self, _extensions: &http::Extensions) -> Duration {
        // The route's policy, app-wide one included, is already folded in
        // by `with_policy`.
        self.in_flight_wait
    }
}

/// Middleware that runs a mutating request at most once per `Idempotency-Key`.
/// See the [module docs](crate::layer).
#[derive(Clone)]
pub struct Idempotency<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> Idempotency<S> {
    pub(crate) fn new(inner: S, settings: Arc<Settings>) -> Self {
        Self { inner, settings }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S> std::fmt::Debug for Idempotency<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotency")
            .field("mode", &self.settings.mode)
            .finish_non_exhaustive()
    }
}

impl<S> Service<Request> for Idempotency<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // Everything that needs no store is decided here, without boxing.
        if !is_mutating(request.method()) {
            return ResponseFuture::pass_through(self.inner.call(request), false);
        }
        // Nested inside another idempotency layer: the outer one owns the
        // lock and the record. Say so if this route replays through an inner
        // layer.
        let extensions = request.extensions();
        // A middleware between the two layers may have rebuilt the request
        // and dropped the marker; the task still knows.
        let forwarded = carries_forwarded(extensions);
        // A replay forwarded into a route whose layer here does not replay
        // through an inner one: nothing below answers it, and passing it on
        // would run the handler again.
        if forwarded && self.settings.mode != ReplayMode::ThroughInner {
            return ResponseFuture::ready(crate::replay::refuse_unanswered_replay());
        }
        if forwarded || extensions.get::<IdempotencyContext>().is_some() {
            let mark = self.settings.mode == ReplayMode::ThroughInner;
            return ResponseFuture::pass_through(self.inner.call(request), mark);
        }
        let key = match parse_key_value(request.headers()) {
            // Refused before the body is read or the store asked: nothing
            // but the key would keep this caller's record from another's.
            Ok(Some(_))
                if self.settings.policy.refuse_anonymous_keys
                    && is_anonymous(request.extensions(), request.headers()) =>
            {
                return ResponseFuture::ready(IdempotencyRejection::KeyNeedsCaller.into_response());
            }
            Ok(Some(key)) => key,
            Ok(None) if self.settings.policy.require_key => {
                return ResponseFuture::ready(missing_key(&self.settings));
            }
            Ok(None) => return ResponseFuture::pass_through(self.inner.call(request), false),
            Err(error) => {
                return ResponseFuture::ready(IdempotencyRejection::from(error).into_response());
            }
        };
        // The clone goes into the future; the service that was polled ready
        // is the one that gets called.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (parts, body) = request.into_parts();
        ResponseFuture::keyed(Guarded::new(Box::pin(lookup(
            self.settings.clone(),
            inner,
            parts,
            body,
            key,
        ))))
    }
}

/// The first phase of a keyed request: read the body, claim the key, and
/// either answer (a replay, a conflict) or start the handler.
///
/// The request comes in parts, and is put together again only where it is
/// handed on, so the future holds one copy of it.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps a second copy of each argument in its future"
)]
fn lookup<S>(
    settings: Arc<Settings>,
    inner: S,
    parts: http::request::Parts,
    body: Body,
    key: HeaderValue,
) -> impl Future<Output = Step> + Send
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    async move {
        let body = match read_body(body, &parts.headers, settings.max_body_bytes).await {
            Ok(body) => body,
            Err(rejection) => return Step::Respond(rejection.into_response()),
        };
        let method = parts.method.as_str();
        // Inside a nested router the URI has lost its prefix: key on the URI the
        // client sent, so `/api/x` and `/x` never share records.
        let uri = match parts.extensions.get::<OriginalUri>() {
            Some(OriginalUri(original)) => original,
            None => &parts.uri,
        };
        let path = uri
            .path_and_query()
            .map_or_else(|| uri.path(), |p| p.as_str());
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .map_or(&[][..], HeaderValue::as_bytes);
        let scope = request_scope(&parts.extensions, &parts.headers);
        let storage_key = storage_key(method, path, scope.as_bytes(), key_str(&key));
        // Digests only, at every level: the raw key is an anonymous caller's
        // only secret, and the storage key evicts a record.
        tracing::trace!(
            idempotency.key_hash = %LogDigest(key.as_bytes()),
            storage_key_hash = %LogDigest(storage_key.as_bytes()),
            "idempotency key and its storage key"
        );
        let json = settings.policy.json.as_deref();
        let fingerprint = fingerprint::fingerprint(json, method, path, content_type, &body);
        let owner = new_owner();

        let wait = settings.in_flight_wait_for(&parts.extensions);
        let claimed = claim_or_wait(
            &settings.store,
            &storage_key,
            &owner,
            settings.in_flight_ttl,
            &settings.clock,
            wait,
        )
        .await;
        let Claimed {
            claim,
            sent_at: locked_at,
            waited,
        } = match claimed {
            Ok(claimed) => claimed,
            Err(error) => {
                tracing::debug!(idempotency.key_hash = %LogDigest(key.as_bytes()), %error, "idempotency store failed; not running the handler");
                settings
                    .metrics
                    .store_failed(settings.clock.now_millis(), "idempotency", &error);
                return Step::Respond(store_failure(&settings, &error));
            }
        };
        match claim {
            Claim::Acquired => {}
            Claim::InFlight => {
                settings.metrics.conflict();
                tracing::debug!(
                    idempotency.key_hash = %LogDigest(key.as_bytes()),
                    idempotency.replayed = false,
                    idempotency.waited = waited,
                    "idempotency key in flight"
                );
                return Step::Respond(IdempotencyRejection::InFlight.into_response());
            }
            Claim::Completed {
                record,
                fingerprint: recorded,
            } => {
                let compared = fingerprint::compare(
                    &recorded,
                    &fingerprint,
                    json,
                    method,
                    path,
                    content_type,
                    &body,
                );
                if let Comparison::Differs(differs_at) = compared {
                    tracing::debug!(
                        idempotency.key_hash = %LogDigest(key.as_bytes()),
                        idempotency.replayed = false,
                        "idempotency key reused for another request"
                    );
                    let differs_at = differs_at.filter(|_| settings.policy.explain_mismatch);
                    return Step::Respond(
                        IdempotencyRejection::PayloadMismatch.render(None, differs_at.as_deref()),
                    );
                }
                return replay(&settings, inner, (parts, body), record, key);
            }
        }
        // Only a new key counts against the caller's quota: a retry that
        // found its record was answered above.
        let new_key = NewKey {
            quota: settings.quota.as_ref(),
            extensions: &parts.extensions,
            store: &settings.store,
            storage_key: &storage_key,
            owner: &owner,
            in_flight_ttl: settings.in_flight_ttl,
            layer: "idempotency",
        };
        let now = settings.clock.now_millis();
        let charge = match charge_claimed(new_key, &settings.metrics, now).await {
            Ok(charge) => charge,
            Err(Refused::Over(retry_after)) => {
                let rejection = IdempotencyRejection::QuotaExceeded { retry_after };
                return Step::Respond(rejection.into_response());
            }
            Err(Refused::Failed(error)) => return Step::Respond(store_failure(&settings, &error)),
        };
        settings.metrics.miss();
        tracing::debug!(
            idempotency.key_hash = %LogDigest(key.as_bytes()),
            idempotency.replayed = false,
            "idempotency key claimed; running the handler"
        );
        let held = Held {
            store: settings.store.clone(),
            storage_key,
            owner,
            fingerprint,
            ttl: settings.ttl,
            in_flight_ttl: settings.in_flight_ttl,
            max_record_bytes: settings.max_record_bytes,
            record_server_errors: settings.policy.record_server_errors,
            metrics: settings.metrics.clone(),
            sealing: settings.sealing.clone(),
            route: RouteLabel::of(&parts.method, &parts.uri, &parts.extensions),
            guard: Guard::Key,
            charge,
            finalize: parts.extensions.get::<FinalizeHook>().cloned(),
            after_run: parts
                .extensions
                .get::<ScopeAfterRun>()
                .map(|rescope| AfterRun {
                    rescope: rescope.clone(),
                    scope: scope.into_owned(),
                    target: Retarget::Key {
                        method: parts.method.clone(),
                        path: path.to_owned(),
                        key: key.clone(),
                    },
                }),
        };
        let context = IdempotencyContext::new(key, held);
        let aged = lock_aged(&settings, locked_at);
        let mut request = Request::from_parts(parts, Body::from(body));
        request.extensions_mut().insert(context.clone());
        // Not called yet: the handler starts on the run's first poll.
        let response = call_boxed(inner, request);
        let run = run_first(settings.clone(), context.clone(), response);
        if !aged {
            return Step::Run(Box::pin(run));
        }
        // Rare. The renewal belongs to the run, so a client that hangs up
        // meanwhile cancels neither it nor the handler after it.
        Step::Run(Box::pin(async move {
            match renew(&settings, &context).await {
                Ok(()) => run.await,
                Err(rejection) => rejection.into_response(),
            }
        }))
    }
}

/// The 400 a request without a required key gets: the problem `type` and a
/// `Link` are the app's docs URL when it has one.
fn missing_key(settings: &Settings) -> Response {
    let docs = settings.policy.docs.as_ref();
    let problem_type = docs.map_or(crate::problem::KEY_MISSING_TYPE, |docs| &docs.url);
    let mut response = IdempotencyRejection::MissingKey.render(Some(problem_type), None);
    if let Some(docs) = docs {
        response
            .headers_mut()
            .insert(header::LINK, docs.link.clone());
    }
    response
}

/// A fresh owner id: a random per-process prefix and a sequence number.
/// Unique across replicas (the prefix has 122 random bits) and within the
/// process (the sequence), without asking the OS for randomness per request.
pub(crate) fn new_owner() -> String {
    static PROCESS: LazyLock<String> = LazyLock::new(|| uuid::Uuid::new_v4().simple().to_string());
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let mut hex = [0u8; 16];
    // Eight bytes always fit sixteen hex digits.
    let _fits = hex::encode_to_slice(sequence.to_be_bytes(), &mut hex).is_ok();
    let mut owner = String::with_capacity(PROCESS.len() + hex.len());
    owner.push_str(&PROCESS);
    owner.push_str(std::str::from_utf8(&hex).unwrap_or_default());
    owner
}

fn store_failure(settings: &Settings, error: &StoreError) -> Response {
    if error.kind() == StoreErrorKind::Full {
        // Nothing was locked: not a conflict, whatever step found it full.
        return IdempotencyRejection::StoreFull.into_response();
    }
    match error.operation() {
        Some(StoreOperation::TryLock | StoreOperation::RenewLock) => {
            settings.metrics.conflict();
            IdempotencyRejection::LockUnavailable.into_response()
        }
        _ => IdempotencyRejection::StoreUnavailable.into_response(),
    }
}

async fn read_body(
    body: Body,
    headers: &http::HeaderMap,
    limit: usize,
) -> Result<Bytes, IdempotencyRejection> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(IdempotencyRejection::BodyTooLarge { limit });
    }
    match read_whole(body, limit).await {
        Ok(body) => Ok(body),
        Err(ReadError::TooLarge) => Err(IdempotencyRejection::BodyTooLarge { limit }),
        // `Failed` displays as the body's own error (transparent).
        Err(error) => Err(IdempotencyRejection::UnreadableBody(error.to_string())),
    }
}

/// Answers a hit on a completed record whose fingerprint matches.
fn replay<S>(
    settings: &Arc<Settings>,
    mut inner: S,
    (parts, body): (http::request::Parts, Bytes),
    record: IdempotencyRecord,
    key: HeaderValue,
) -> Step
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    // What the record sealed opens before anything replays it; a record
    // this app cannot open is refused, never run again.
    let record = match settings.sealing.open(record) {
        Ok(record) => record,
        Err(error) => {
            settings.metrics.conflict();
            tracing::warn!(
                idempotency.key_hash = %LogDigest(key.as_bytes()),
                %error,
                "replay refused: the recorded response cannot be opened"
            );
            return Step::Respond(IdempotencyRejection::RecordUnreadable.into_response());
        }
    };
    // A layer Autumn cannot see through decided who is asking: nothing
    // proves this retry passed the same checks, whatever the route's mode.
    let opaque = parts.extensions.get::<OpaqueCaller>().is_some();
    match settings.mode {
        _ if opaque => {
            settings.metrics.conflict();
            tracing::debug!(
                idempotency.key_hash = %LogDigest(key.as_bytes()),
                idempotency.replayed = false,
                "replay refused: an opaque layer authenticated the caller"
            );
            Step::Respond(IdempotencyRejection::ReplayUnavailable.into_response())
        }
        // The first run's response was too large to record: nothing to
        // replay, and running it again is what the key is there to prevent.
        // Answered here in every mode: the refusal shows nothing of it.
        _ if record.is_not_recorded() => {
            settings.metrics.conflict();
            tracing::debug!(
                idempotency.key_hash = %LogDigest(key.as_bytes()),
                idempotency.replayed = false,
                "replay refused: the first run's response was too large to record"
            );
            Step::Respond(IdempotencyRejection::ResponseNotRecorded.into_response())
        }
        ReplayMode::Direct => {
            settings.metrics.hit();
            tracing::debug!(
                idempotency.key_hash = %LogDigest(key.as_bytes()),
                idempotency.replayed = true,
                "replaying recorded response"
            );
            Step::Respond(replay_response(&record))
        }
        _ if record.replays_through_inner() => {
            let record = Arc::new(record);
            let mut request = Request::from_parts(parts, Body::from(body));
            request
                .extensions_mut()
                .insert(PendingReplay(record.clone()));
            // The task-local survives a route-local middleware that rebuilds
            // the request, so the replay layer or the guard still sees it.
            let response =
                ForwardedReplay::scope(ForwardedReplay::new(record), move || inner.call(request));
            let settings = settings.clone();
            Step::Forward(Box::pin(async move {
                let response = settle(response).await;
                if response.extensions().get::<Replayed>().is_some() {
                    settings.metrics.hit();
                    tracing::debug!(
                        idempotency.key_hash = %LogDigest(key.as_bytes()),
                        idempotency.replayed = true,
                        "replayed through the route's replay layer"
                    );
                } else if response.extensions().get::<ReplayRefused>().is_some() {
                    // Refused before the handler (and logged there).
                    settings.metrics.conflict();
                } else {
                    tracing::error!(
                        idempotency.key_hash = %LogDigest(key.as_bytes()),
                        "a replay forwarded into the route reached no IdempotencyReplayLayer; the route changed since the key was recorded"
                    );
                }
                response
            }))
        }
        _ => {
            settings.metrics.conflict();
            tracing::debug!(
                idempotency.key_hash = %LogDigest(key.as_bytes()),
                idempotency.replayed = false,
                "replay refused: the route's middleware is opaque"
            );
            Step::Respond(IdempotencyRejection::ReplayUnavailable.into_response())
        }
    }
}

/// Whether the work between taking the lock and starting the handler ate more
/// than a tenth of the lock's TTL: then the lock is renewed, so the handler
/// starts with a full lock.
fn lock_aged(settings: &Settings, locked_at: u64) -> bool {
    let elapsed = settings.clock.now_millis().saturating_sub(locked_at);
    Duration::from_millis(elapsed) > settings.in_flight_ttl / 10
}

/// Renews the lock the request holds, or releases it and refuses.
async fn renew(
    settings: &Settings,
    context: &IdempotencyContext,
) -> Result<(), IdempotencyRejection> {
    let renewed = context
        .store()
        .renew_lock(
            context.storage_key(),
            context.owner(),
            settings.in_flight_ttl,
        )
        .await;
    match renewed {
        Ok(true) => Ok(()),
        Ok(false) | Err(_) => {
            settings.metrics.conflict();
            context.held().release().await;
            Err(IdempotencyRejection::LockUnavailable)
        }
    }
}

/// Awaits the handler and records its response (see [`run_and_record`]). A
/// client that hangs up meanwhile does not cancel this: see
/// [`ResponseFuture`].
///
/// The response says the key was honoured (`X-Idempotent-Honoured: true`)
/// and, when the policy asks and the response was recorded, until when it is
/// replayed. Added after recording: a replay carries the replay marker
/// instead.
fn run_first<F>(
    settings: Arc<Settings>,
    context: IdempotencyContext,
    response: F,
) -> impl Future<Output = Response> + Send
where
    F: Future<Output = Result<Response, Infallible>> + Send,
{
    let mode = settings.mode;
    let run = run_and_record(context, response, move |parts| {
        (mode == ReplayMode::ThroughInner
            || parts
                .extensions
                .get::<OptedIntoReplayThroughInner>()
                .is_some())
            && parts.extensions.get::<PassedReplayLayer>().is_some()
    });
    async move {
        let (mut response, Recorded(recorded)) = run.await;
        let headers = response.headers_mut();
        headers.insert(IDEMPOTENT_HONOURED, HeaderValue::from_static("true"));
        if recorded && settings.policy.expiry_header {
            let expires = std::time::UNIX_EPOCH
                + Duration::from_millis(settings.clock.now_millis())
                + settings.ttl;
            if let Ok(value) = HeaderValue::try_from(httpdate::fmt_http_date(expires)) {
                headers.insert(IDEMPOTENT_EXPIRES, value);
            }
        }
        response
    }
}
