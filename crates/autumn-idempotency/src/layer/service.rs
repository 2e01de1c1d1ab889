use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{OriginalUri, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, header};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use tower::Service;

use super::future::ResponseFuture;
use super::layer::{ReplayMode, Settings};
use crate::context::{
    IdempotencyContext, IdempotencyScope, OptedIntoReplayThroughInner, PassedReplayLayer,
    PendingReplay, Replayed,
};
use crate::detach::{DetachOnDrop, Detachable, call, is_mutating};
use crate::first_run::{Held, run_and_record};
use crate::key::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, fingerprint, parse_key, storage_key};
use crate::problem::IdempotencyRejection;
use crate::record::IdempotencyRecord;
use crate::store::{Claim, StoreOperation};

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
        // Most requests carry no key: hand them on without boxing anything.
        let extensions = request.extensions();
        let nested = extensions.get::<IdempotencyContext>().is_some()
            || extensions.get::<PendingReplay>().is_some();
        if !is_mutating(request.method())
            || !(nested || request.headers().contains_key(IDEMPOTENCY_KEY))
        {
            return ResponseFuture::pass_through(self.inner.call(request));
        }
        // The clone goes into the future; the service that was polled ready
        // is the one that gets called.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let detach = DetachOnDrop::default();
        ResponseFuture::keyed(Detachable::new(
            Box::pin(handle(
                self.settings.clone(),
                inner,
                request,
                detach.clone(),
            )),
            detach,
        ))
    }
}

async fn handle<S>(
    settings: Arc<Settings>,
    inner: S,
    request: Request,
    detach: DetachOnDrop,
) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    // Nested inside another idempotency layer: the outer one owns the lock
    // and the record. Say so if this route replays through an inner layer.
    let extensions = request.extensions();
    if extensions.get::<IdempotencyContext>().is_some()
        || extensions.get::<PendingReplay>().is_some()
    {
        let mut response = call(inner, request).await;
        if settings.mode == ReplayMode::ThroughInner {
            response
                .extensions_mut()
                .insert(OptedIntoReplayThroughInner);
        }
        return response;
    }
    let key = match parse_key(request.headers()) {
        Ok(Some(key)) => key,
        Ok(None) => return call(inner, request).await,
        Err(error) => return IdempotencyRejection::from(error).into_response(),
    };

    let (parts, body) = request.into_parts();
    let body = match read_body(body, &parts.headers, settings.max_body_bytes).await {
        Ok(body) => body,
        Err(rejection) => return rejection.into_response(),
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
    let scope = match parts.extensions.get::<IdempotencyScope>() {
        Some(scope) => scope.clone(),
        None => fallback_scope(&parts.headers),
    };
    let storage_key = storage_key(method, path, scope.as_bytes(), &key);
    let fingerprint = fingerprint(method, path, content_type, &body);
    let owner = new_owner();

    let store = &settings.store;
    let locked_at = settings.clock.now_millis();
    let claim = store
        .claim(&storage_key, &owner, settings.in_flight_ttl)
        .await;
    let request = Request::from_parts(parts, Body::from(body));
    match claim {
        Err(error) => {
            tracing::warn!(idempotency.key = %key, %error, "idempotency store failed; not running the handler");
            store_failure(&settings, error.operation())
        }
        Ok(Claim::InFlight) => {
            settings.metrics.conflict();
            tracing::debug!(idempotency.key = %key, idempotency.replayed = false, "idempotency key in flight");
            IdempotencyRejection::InFlight.into_response()
        }
        Ok(Claim::Completed { record, body_hash }) => {
            if body_hash != fingerprint {
                tracing::debug!(idempotency.key = %key, idempotency.replayed = false, "idempotency key reused for another request");
                return IdempotencyRejection::PayloadMismatch.into_response();
            }
            Box::pin(replay(&settings, inner, request, record, &key)).await
        }
        Ok(Claim::Acquired) => {
            // From here on a hung-up client must not cancel the request.
            detach.arm();
            settings.metrics.miss();
            tracing::debug!(idempotency.key = %key, idempotency.replayed = false, "idempotency key claimed; running the handler");
            let context = IdempotencyContext::new(
                key,
                storage_key,
                owner,
                fingerprint,
                settings.store.clone(),
                (settings.ttl, settings.in_flight_ttl),
            );
            if let Err(rejection) = renew_if_aged(&settings, &context, locked_at).await {
                return rejection.into_response();
            }
            // Boxed on its own: the lookup's locals and the handler's future
            // are never alive together, and two small boxes are cheaper to
            // allocate than one large one.
            Box::pin(run_first(settings, inner, request, context)).await
        }
    }
}

/// A fresh owner id: a random per-process prefix and a sequence number.
/// Unique across replicas (the prefix has 122 random bits) and within the
/// process (the sequence), without asking the OS for randomness per request.
pub(crate) fn new_owner() -> String {
    static PROCESS: LazyLock<String> = LazyLock::new(|| uuid::Uuid::new_v4().simple().to_string());
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let mut owner = String::with_capacity(PROCESS.len() + 16);
    owner.push_str(&PROCESS);
    owner.push_str(&hex::encode(sequence.to_be_bytes()));
    owner
}

/// Without a scope from the app, callers are told apart by their raw
/// `Authorization` header alone.
fn fallback_scope(headers: &http::HeaderMap) -> IdempotencyScope {
    match headers.get(header::AUTHORIZATION) {
        Some(value) => IdempotencyScope::default().with_part("authorization", value.as_bytes()),
        None => IdempotencyScope::default(),
    }
}

fn store_failure(settings: &Settings, operation: Option<StoreOperation>) -> Response {
    match operation {
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
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(IdempotencyRejection::BodyTooLarge { limit })
        }
        Err(error) => Err(IdempotencyRejection::UnreadableBody(error.to_string())),
    }
}

async fn replay<S>(
    settings: &Settings,
    inner: S,
    mut request: Request,
    record: IdempotencyRecord,
    key: &str,
) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    match settings.mode {
        ReplayMode::Direct => {
            settings.metrics.hit();
            tracing::debug!(idempotency.key = %key, idempotency.replayed = true, "replaying recorded response");
            replay_response(&record)
        }
        _ if record.replays_through_inner() => {
            request
                .extensions_mut()
                .insert(PendingReplay(Arc::new(record)));
            let response = call(inner, request).await;
            if response.extensions().get::<Replayed>().is_some() {
                settings.metrics.hit();
                tracing::debug!(idempotency.key = %key, idempotency.replayed = true, "replayed through the route's replay layer");
            } else {
                tracing::error!(idempotency.key = %key, "a replay forwarded into the route reached no IdempotencyReplayLayer; the route changed since the key was recorded");
            }
            response
        }
        _ => {
            settings.metrics.conflict();
            tracing::debug!(idempotency.key = %key, idempotency.replayed = false, "replay refused: the route's middleware is opaque");
            IdempotencyRejection::ReplayUnavailable.into_response()
        }
    }
}

/// The recorded response, marked as a replay.
pub(crate) fn replay_response(record: &IdempotencyRecord) -> Response {
    let mut response = record.to_response();
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response.extensions_mut().insert(Replayed);
    response
}

/// Work between taking the lock and starting the handler that ate more than a
/// tenth of the lock's TTL: renew, so the handler starts with a full lock.
async fn renew_if_aged(
    settings: &Settings,
    context: &IdempotencyContext,
    locked_at: u64,
) -> Result<(), IdempotencyRejection> {
    let elapsed = settings.clock.now_millis().saturating_sub(locked_at);
    if Duration::from_millis(elapsed) <= settings.in_flight_ttl / 10 {
        return Ok(());
    }
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
            held(settings, context).release().await;
            Err(IdempotencyRejection::LockUnavailable)
        }
    }
}

fn held<'a>(settings: &'a Settings, context: &'a IdempotencyContext) -> Held<'a> {
    Held {
        store: settings.store.as_ref(),
        storage_key: context.storage_key(),
        owner: context.owner(),
        fingerprint: context.fingerprint().to_vec(),
        ttl: settings.ttl,
        retry: "a retry with the same Idempotency-Key",
    }
}

/// Runs the handler and records its response (see [`run_and_record`]). A
/// client that hangs up meanwhile does not cancel this: see
/// [`ResponseFuture`].
async fn run_first<S>(
    settings: Arc<Settings>,
    inner: S,
    mut request: Request,
    context: IdempotencyContext,
) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    request.extensions_mut().insert(context.clone());
    let mode = settings.mode;
    run_and_record(held(&settings, &context), inner, request, |parts| {
        (mode == ReplayMode::ThroughInner
            || parts
                .extensions
                .get::<OptedIntoReplayThroughInner>()
                .is_some())
            && parts.extensions.get::<PassedReplayLayer>().is_some()
    })
    .await
}
