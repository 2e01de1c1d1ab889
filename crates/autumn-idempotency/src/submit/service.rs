//! The submit-token service: mint on every request, consume on guarded posts.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use http::{HeaderValue, StatusCode, header};
use http_body_util::BodyExt as _;
use pin_project_lite::pin_project;
use tower::Service;

use super::SUBMIT_TOKEN_REPLAYED;
use super::extract::{Mint, MintSlot};
use super::layer::Settings;
use super::scan::{self, FormKind, MultipartScanner, ScanError};
use crate::detach::{Guarded, PendingClaim, Step, is_mutating, settle};
use crate::first_run::{Held, RouteLabel, call_boxed, run_and_record};
use crate::key::{hash_parts, prefixed_hex};
use crate::layer::new_owner;
use crate::problem::Problem;
use crate::store::{Claim, StoreErrorKind, StoreOperation};

/// The service made by [`SubmitTokenLayer`](super::SubmitTokenLayer).
#[derive(Clone)]
pub struct SubmitTokenService<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> std::fmt::Debug for SubmitTokenService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubmitTokenService").finish_non_exhaustive()
    }
}

impl<S> SubmitTokenService<S> {
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

pin_project! {
    /// Response future of [`SubmitTokenService`].
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
        mint: Arc<Mint>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<F> {
        Plain { #[pin] future: F },
        Guarded { guarded: Guarded },
    }
}

impl<F> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = match this.kind.project() {
            KindProjection::Plain { future } => match std::task::ready!(future.poll(cx)) {
                Ok(response) => response,
                Err(never) => match never {},
            },
            KindProjection::Guarded { guarded } => std::task::ready!(guarded.poll(cx)),
        };
        // A page that carries a token must not be served to someone else by
        // a shared cache.
        if this.mint.was_used() {
            keep_private(response.headers_mut());
        }
        Poll::Ready(Ok(response))
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S> Service<Request> for SubmitTokenService<S>
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

    fn call(&mut self, mut request: Request) -> Self::Future {
        let mint = Arc::new(Mint::default());
        request.extensions_mut().insert(MintSlot {
            mint: mint.clone(),
            field: self.settings.field_name.clone(),
        });
        let kind = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(scan::form_kind);
        let exempt = self
            .settings
            .exempt_paths
            .iter()
            .any(|prefix| is_under(request.uri().path(), prefix));
        let (Some(kind), true, false) = (kind, is_mutating(request.method()), exempt) else {
            return ResponseFuture {
                kind: Kind::Plain {
                    future: self.inner.call(request),
                },
                mint,
            };
        };
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let lookup = guard(self.settings.clone(), inner, request, kind);
        ResponseFuture {
            kind: Kind::Guarded {
                guarded: Guarded::new(Box::pin(lookup)),
            },
            mint,
        }
    }
}

/// Whether `path` is `prefix` or below it, by whole segments: `/api`
/// covers `/api` and `/api/x`, not `/apiary`.
fn is_under(path: &str, prefix: &str) -> bool {
    let Some(below) = path.strip_prefix(prefix) else {
        return false;
    };
    below.is_empty() || below.starts_with('/') || prefix.ends_with('/')
}

/// Makes a response that carries a minted token uncacheable by shared
/// caches. Not `no-store`: that would keep it out of the browser's
/// back/forward cache, and Back would fetch a new token.
fn keep_private(headers: &mut http::HeaderMap) {
    const PRIVATE: HeaderValue = HeaderValue::from_static("private, no-cache");
    let Some(current) = headers.get(header::CACHE_CONTROL) else {
        headers.insert(header::CACHE_CONTROL, PRIVATE);
        return;
    };
    if !shared_cacheable(headers) {
        return;
    }
    // Once per process: a handler that does this does it on every request.
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            cache_control = ?current,
            "a response carrying a submit token had a Cache-Control that lets shared caches store it; replaced with `private, no-cache` so one token is not served to many users"
        );
    });
    headers.insert(header::CACHE_CONTROL, PRIVATE);
}

/// Whether the `Cache-Control` directives let a shared cache (a CDN, a
/// proxy) store the response: unless they say `private` or `no-store`, or
/// say `public` or `s-maxage` anyway.
fn shared_cacheable(headers: &http::HeaderMap) -> bool {
    let mut private = false;
    let mut public = false;
    for value in headers.get_all(header::CACHE_CONTROL) {
        // An unreadable header is not trusted to be private.
        let Ok(value) = value.to_str() else {
            return true;
        };
        for directive in value.split(',') {
            let (name, argument) = match directive.split_once('=') {
                Some((name, argument)) => (name.trim(), Some(argument)),
                None => (directive.trim(), None),
            };
            // `private="set-cookie"` keeps only that header private: the
            // page itself may still be stored.
            if (name.eq_ignore_ascii_case("private") && argument.is_none())
                || name.eq_ignore_ascii_case("no-store")
            {
                private = true;
            } else if name.eq_ignore_ascii_case("public") || name.eq_ignore_ascii_case("s-maxage") {
                public = true;
            }
        }
    }
    public || !private
}

/// The first `limit` bytes of `body` (fewer when it is shorter), and the
/// rest of it when there is more.
async fn read_prefix(mut body: Body, limit: usize) -> Result<(Bytes, Option<Body>), ScanError> {
    let mut prefix = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ScanError::Malformed(format!("unreadable body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            prefix.extend_from_slice(&data);
            if prefix.len() > limit {
                return Ok((prefix.freeze(), Some(body)));
            }
        }
    }
    Ok((prefix.freeze(), None))
}

/// The rest of a multipart body the layer could not scan in full, passed
/// on as it streams, chunk by chunk, uncopied; `scanner` goes on reading
/// its parts, and if a part names the token field, the stream fails, so the
/// handler never sees a token it was not guarded by. A file's content that
/// happens to contain the field's name is content, not a part, and passes.
fn watched(prefix: Bytes, rest: Body, mut scanner: MultipartScanner, field: Arc<str>) -> Body {
    scanner.watch();
    let rest = rest.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        match scanner.feed(&chunk) {
            Ok(()) => Ok(chunk),
            Err(error) => Err(axum::Error::new(std::io::Error::other(
                error.into_problem(&field).detail().to_owned(),
            ))),
        }
    });
    Body::from_stream(futures_util::stream::once(async move { Ok(prefix) }).chain(rest))
}

/// The first phase of a guarded form post: scan the body for the token,
/// claim it, and either answer (a replay, a refusal) or start the handler.
async fn guard<S>(
    settings: Arc<Settings>,
    mut inner: S,
    request: Request,
    kind: Result<FormKind, ScanError>,
) -> Step
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let field = settings.field_name.clone();
    let kind = match kind {
        Ok(kind) => kind,
        Err(error) => return Step::Respond(error.into_problem(&field).into_response()),
    };
    let (parts, body) = request.into_parts();
    let scanned = match kind {
        FormKind::UrlEncoded => match read_prefix(body, settings.max_form_bytes).await {
            Ok((_, Some(_))) => Err(ScanError::TooLarge {
                limit: settings.max_form_bytes,
            }),
            Ok((bytes, None)) => {
                scan::urlencoded(&bytes, &field).map(|token| (token, Body::from(bytes)))
            }
            Err(error) => Err(error),
        },
        FormKind::Multipart { boundary } => {
            match read_prefix(body, settings.max_form_bytes).await {
                Ok((bytes, rest)) => {
                    let mut scanner = MultipartScanner::new(&boundary, &field);
                    let scanned = scanner.feed(&bytes).and_then(|()| match rest {
                        None => scanner.finish(),
                        // The field's part is cut off by the scan limit: its
                        // value is not known, so it cannot be claimed.
                        Some(_) if scanner.in_field() => Err(ScanError::Late),
                        Some(_) => Ok(()),
                    });
                    scanned.map(|()| {
                        let token = scanner.token().map(str::to_owned);
                        let body = match rest {
                            None => Body::from(bytes),
                            // Found in the prefix, or every part was in it.
                            Some(rest) if token.is_some() || scanner.is_complete() => {
                                Body::from_stream(
                                    futures_util::stream::once(async move {
                                        Ok::<_, axum::Error>(bytes)
                                    })
                                    .chain(rest.into_data_stream()),
                                )
                            }
                            Some(rest) => watched(bytes, rest, scanner, field.clone()),
                        };
                        (token, body)
                    })
                }
                Err(error) => Err(error),
            }
        }
    };
    let (token, body) = match scanned {
        Ok(found) => found,
        Err(error) => return Step::Respond(error.into_problem(&field).into_response()),
    };
    let request = Request::from_parts(parts, body);
    let Some(token) = token else {
        let response = inner.call(request);
        return Step::Forward(Box::pin(settle(response)));
    };
    consume(&settings, inner, request, &token).await
}

fn conflict(settings: &Settings) -> Response {
    settings.metrics.conflict();
    let mut response = Problem::new(
        StatusCode::CONFLICT,
        "submit_token_in_flight",
        "this form was already submitted and is still being processed; wait a moment and reload",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// 503 with `Retry-After`: the store had no room for the token; nothing ran.
fn store_full() -> Response {
    let mut response = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "submit_token_store_full",
        "the form could not be checked against duplicate submission because the store is full, so it was not processed; try again in a moment",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

async fn consume<S>(settings: &Settings, inner: S, request: Request, token: &str) -> Step
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    // The token is globally unique: no method, path or caller in the key.
    let storage_key = prefixed_hex(
        "tok:v1:",
        &hash_parts("autumn.submit-token.v1", &[token.as_bytes()]),
    );
    // A token belongs to one form: reused for another one, it is refused.
    let path = request.uri().path();
    let fingerprint = hash_parts(
        "autumn.submit-token.form.v1",
        &[request.method().as_str().as_bytes(), path.as_bytes()],
    );
    let owner = new_owner();
    let route = RouteLabel::of(request.method(), request.uri(), request.extensions());
    let waiting_until = Instant::now() + settings.in_flight_wait;
    let store = &settings.store;
    let mut waiting = false;
    loop {
        // Dropped unsettled (the request went away mid-claim, or the claim
        // failed after the store may have locked), it releases the lock.
        let pending = PendingClaim::new(store, &storage_key, &owner);
        let claim = store
            .claim(&storage_key, &owner, settings.in_flight_ttl)
            .await;
        if claim.is_ok() {
            pending.settled();
        } else {
            drop(pending);
        }
        match claim {
            Err(error) => {
                tracing::warn!(%error, "submit-token store failed; not running the handler");
                return Step::Respond(match error.operation() {
                    _ if error.kind() == StoreErrorKind::Full => store_full(),
                    Some(StoreOperation::TryLock | StoreOperation::RenewLock) => conflict(settings),
                    _ => Problem::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "submit_token_store_unavailable",
                        "the form could not be checked against duplicate submission, so it was not processed; try again",
                    )
                    .into_response(),
                });
            }
            Ok(Claim::Completed {
                record,
                fingerprint: recorded,
            }) => {
                if recorded[..] != fingerprint[..] {
                    return Step::Respond(
                        Problem::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "submit_token_reused",
                            "this submit token was rendered for another form; reload the form and submit it again",
                        )
                        .into_response(),
                    );
                }
                settings.metrics.hit();
                tracing::debug!(
                    submit_token.replayed = true,
                    "replaying a submitted form's response"
                );
                let mut response = record.to_response();
                response
                    .headers_mut()
                    .insert(SUBMIT_TOKEN_REPLAYED, HeaderValue::from_static("true"));
                return Step::Respond(response);
            }
            Ok(Claim::InFlight) => {
                if Instant::now() >= waiting_until {
                    return Step::Respond(conflict(settings));
                }
                // The duplicate of a double-click: wait for the first, then
                // answer what it answered (the browser shows the last reply).
                if !waiting {
                    waiting = true;
                    tracing::debug!(
                        submit_token.waiting = true,
                        "a duplicate submission waits for the first one to finish"
                    );
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Ok(Claim::Acquired) => break,
        }
    }
    settings.metrics.miss();
    // A validation re-render (4xx) releases the token: it may still
    // succeed once.
    let held = Held {
        store: settings.store.clone(),
        storage_key,
        owner,
        fingerprint,
        ttl: settings.ttl,
        in_flight_ttl: settings.in_flight_ttl,
        max_record_bytes: settings.max_record_bytes,
        metrics: settings.metrics.clone(),
        route,
        retry: "submitting the form again",
    };
    let response = call_boxed(inner, request);
    Step::Run(Box::pin(run_and_record(held, response, |_| false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exempt_prefixes_match_whole_segments() {
        assert!(is_under("/api", "/api"));
        assert!(is_under("/api/x", "/api"));
        assert!(!is_under("/apiary", "/api"));
        assert!(is_under("/webhooks/in", "/webhooks/"));
        assert!(!is_under("/webhooks", "/webhooks/"));
        assert!(is_under("/anything", "/"));
        assert!(!is_under("/ap", "/api"));
    }

    #[test]
    fn only_private_or_unstored_pages_keep_their_cache_control() {
        let cacheable = |values: &[&'static str]| {
            let mut headers = http::HeaderMap::new();
            for value in values {
                headers.append(header::CACHE_CONTROL, HeaderValue::from_static(value));
            }
            shared_cacheable(&headers)
        };
        assert!(cacheable(&["public, max-age=600"]));
        assert!(cacheable(&["max-age=600"]));
        assert!(cacheable(&["no-cache"]));
        assert!(cacheable(&["private", "public"]));
        assert!(cacheable(&["private, s-maxage=60"]));
        assert!(!cacheable(&["private, max-age=60"]));
        assert!(!cacheable(&["No-Store"]));
        assert!(cacheable(&["private=\"set-cookie\""]));
        assert!(!cacheable(&["private=\"set-cookie\"", "no-store"]));
    }
}
