//! The submit-token service: mint on every request, consume on guarded posts.
//!
//! Every request gets an unminted token slot (a token costs nothing until an
//! extractor asks for it). A `POST`/`PUT`/`PATCH`/`DELETE` with a form
//! content type, outside `exempt_paths`, goes:
//!
//! ```text
//! scan body (400 / 413) -> no field: pass on, body unchanged (streamed past
//!                          max_form_bytes, watched for a late field)
//!                       -> field: storage key (token) + fingerprint (method, path) -> claim
//!    |- store error                  -> 503 (lookup) or 409 (lock); handler not run
//!    |- InFlight                     -> wait up to in_flight_wait (wait.rs), else 409 + Retry-After: 1
//!    |- Completed, other fingerprint -> 422
//!    |- Completed, same fingerprint  -> replay + x-submit-token-replayed: true
//!    |- Completed, a marker          -> 409 (the response was too large to record)
//!    `- Acquired                     -> handler, as for a key (see `first_run.rs`): run to
//!                                       its end, lock renewed, 2xx/3xx recorded (a marker
//!                                       when too large), anything else released
//! dropped or failed mid-claim -> the claim's lock released (owner-checked, own task)
//! ```
//!
//! Whether a form carries the field decides its fate. An urlencoded body
//! whose names (read as the form extractor reads them) do not include the
//! field reaches the route exactly as sent: no 400 for a bad `%` escape, no
//! 413 past `max_form_bytes`. A body that does name it is checked whole and
//! strictly, within the limit. A multipart body is read part by part; when
//! its framing is broken (no boundary, a part that does not parse, a body
//! that ends early or fails to arrive) before any part named the field, it
//! passes unchanged unless the field's name appears in it at all, so the
//! route's own parser refuses it as it would without the layer; one whose
//! field part was met is refused. A body larger than the scan limit (either
//! kind) streams on, watched: the field named after the scanned prefix fails
//! the body, so the handler never reads a token it was not guarded by.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use http::{HeaderValue, header};
use http_body_util::BodyExt as _;
use tower::Service;

use super::extract::{Mint, MintSlot};
use super::future::ResponseFuture;
use super::scan::{self, FieldSearch, FormKind, MultipartScanner, ScanError, UrlencodedNames};
use super::{SUBMIT_TOKEN_REPLAYED, TokenBinding};
use crate::IdempotencyScope;
use crate::detach::{Guarded, Step, is_mutating, settle};
use crate::finalize::FinalizeHook;
use crate::first_run::{
    AfterRun, Guard, Held, Retarget, RouteLabel, call_boxed, run_and_record, token_binding,
};
use crate::key::{hash_parts, prefixed_hex};
use crate::layer::new_owner;
use crate::metrics::IdempotencyMetrics;
use crate::problem::SubmitTokenRejection;
use crate::quota::{NewKey, Refused, charge_claimed};
use crate::rescope::ScopeAfterRun;
use crate::sealing::RecordSealing;
use crate::store::{Claim, IdempotencyStore, StoreErrorKind, StoreOperation};
use crate::wait::claim_or_wait;
use autumn_base::ExemptPaths;
use autumn_base::clock::SharedClock;

/// What a [`SubmitTokenLayer`](super::SubmitTokenLayer) was built with.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) store: Arc<dyn IdempotencyStore>,
    pub(crate) field_name: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) in_flight_ttl: Duration,
    pub(crate) exempt_paths: ExemptPaths,
    pub(crate) max_form_bytes: usize,
    pub(crate) max_record_bytes: usize,
    pub(crate) in_flight_wait: Duration,
    pub(crate) metrics: Arc<IdempotencyMetrics>,
    pub(crate) sealing: RecordSealing,
    pub(crate) clock: SharedClock,
    /// What each caller may hold, when limited.
    pub(crate) quota: Option<crate::quota::Quota>,
}

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
        let exempt = self.settings.exempt_paths.covers(request.uri().path());
        let (Some(kind), true, false) = (kind, is_mutating(request.method()), exempt) else {
            return ResponseFuture::plain(self.inner.call(request), mint);
        };
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let lookup = guard(self.settings.clone(), inner, request, kind);
        ResponseFuture::guarded(Guarded::new(Box::pin(lookup)), mint)
    }
}

/// Why a recorded submission may not be replayed to this one: another form
/// (422), or another session (409). After the form's hash the record holds
/// the binding of the session that posted it and, when the post moved the
/// caller (a sign-in rotates the session's id, a tenant switch changes the
/// scope), a binding for where it moved: a browser that got the answer and
/// resends the form carries that one. A record from before submissions were
/// bound holds the form's hash alone.
fn mismatch(recorded: &[u8], form: &[u8; 32], binding: &[u8; 32]) -> Option<SubmitTokenRejection> {
    let (recorded_form, bindings) = recorded.split_at(recorded.len().min(32));
    if recorded_form != form {
        return Some(SubmitTokenRejection::TokenReused);
    }
    let bound = !bindings.is_empty();
    (bound && !bindings.chunks(32).any(|recorded| recorded == binding))
        .then_some(SubmitTokenRejection::OtherSession)
}

/// What follows the prefix [`read_prefix`] read.
enum Rest {
    /// Nothing: the prefix is the whole body.
    End,
    /// The rest of the body, unread.
    More(Body),
    /// Reading failed after the prefix (the client went away, or sent less
    /// than it announced).
    Failed(axum::Error),
}

impl Rest {
    /// The error a body whose reading failed is refused with.
    fn unreadable(error: &axum::Error) -> ScanError {
        ScanError::Malformed(format!("unreadable body: {error}"))
    }

    /// The body the route gets: `prefix`, then the rest as it comes (its
    /// failure included), unchanged.
    fn after(self, prefix: Bytes) -> Body {
        match self {
            Self::End => Body::from(prefix),
            Self::More(rest) => Body::from_stream(
                futures_util::stream::once(async move { Ok::<_, axum::Error>(prefix) })
                    .chain(rest.into_data_stream()),
            ),
            Self::Failed(error) => {
                Body::from_stream(futures_util::stream::iter([Ok(prefix), Err(error)]))
            }
        }
    }
}

/// The first `limit` bytes of `body` (fewer when it is shorter), and what
/// follows them.
async fn read_prefix(mut body: Body, limit: usize) -> (Bytes, Rest) {
    let mut prefix = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(error) => return (prefix.freeze(), Rest::Failed(error)),
        };
        if let Ok(data) = frame.into_data() {
            prefix.extend_from_slice(&data);
            if prefix.len() > limit {
                return (prefix.freeze(), Rest::More(body));
            }
        }
    }
    (prefix.freeze(), Rest::End)
}

/// The rest of a multipart body the layer could not scan in full, passed
/// on as it streams, chunk by chunk, uncopied; `scanner` goes on reading
/// its parts, and if a part names the token field, the stream fails, so the
/// handler never sees a token it was not guarded by. A file's content that
/// happens to contain the field's name is content, not a part, and passes.
///
/// Should the framing break further on (the layer's reading and the
/// handler's parser may then part ways), the rest is searched for the
/// field's name instead: the stream fails if it appears, and passes
/// unchanged if not, for the handler's parser to refuse as it would
/// without the layer.
fn watched(prefix: Bytes, rest: Body, mut scanner: MultipartScanner, field: Arc<str>) -> Body {
    scanner.watch();
    let mut search = FieldSearch::new(&field);
    search.carry(&prefix);
    let mut framed = Some(scanner);
    let rest = rest.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        let refused = |error: ScanError| {
            axum::Error::new(std::io::Error::other(error.into_rejection(&field)))
        };
        if let Some(scanner) = &mut framed {
            match scanner.feed(&chunk) {
                Ok(()) => {
                    search.carry(&chunk);
                    return Ok(chunk);
                }
                Err(ScanError::Malformed(_)) => {
                    search.feed(scanner.held());
                    framed = None;
                }
                Err(error) => return Err(refused(error)),
            }
        }
        search.feed(&chunk);
        if search.found() {
            return Err(refused(ScanError::Malformed(format!(
                "the multipart framing breaks and the {field} field's name follows"
            ))));
        }
        Ok(chunk)
    });
    Body::from_stream(futures_util::stream::once(async move { Ok(prefix) }).chain(rest))
}

/// A multipart body whose parts cannot be read (`unframed` says why): it
/// passes unchanged when it never spells the field's name (the handler's
/// parser then refuses it, or not, exactly as it would without the layer),
/// and is refused with `unframed` when it does, within the scanned prefix;
/// past it, the stream fails where the name appears.
fn unframed(
    prefix: Bytes,
    rest: Rest,
    field: &Arc<str>,
    unframed: ScanError,
) -> Result<(Option<String>, Body), ScanError> {
    let mut search = FieldSearch::new(field);
    search.feed(&prefix);
    if search.found() {
        return Err(match rest {
            Rest::Failed(error) => Rest::unreadable(&error),
            _ => unframed,
        });
    }
    let Rest::More(rest) = rest else {
        return Ok((None, rest.after(prefix)));
    };
    let field = field.clone();
    let rest = rest.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        search.feed(&chunk);
        if search.found() {
            return Err(axum::Error::new(std::io::Error::other(
                ScanError::Malformed(format!(
                    "a multipart body whose parts cannot be read names the {field} field"
                ))
                .into_rejection(&field),
            )));
        }
        Ok(chunk)
    });
    Ok((
        None,
        Body::from_stream(futures_util::stream::once(async move { Ok(prefix) }).chain(rest)),
    ))
}

/// The rest of an urlencoded body larger than the scan limit whose scanned
/// prefix names no token field, passed on as it streams, uncopied. `names`
/// goes on reading its names; a name that is the field's (a token the layer
/// never checked, or a second one) fails the stream, so the handler's form
/// extractor refuses the body instead of reading an unguarded token.
fn watched_urlencoded(prefix: Bytes, rest: Body, names: UrlencodedNames, field: Arc<str>) -> Body {
    let late = move || {
        axum::Error::new(std::io::Error::other(
            ScanError::Late.into_rejection(&field),
        ))
    };
    let rest = futures_util::stream::unfold(
        (rest.into_data_stream(), Some(names)),
        move |(mut rest, names)| {
            let late = late.clone();
            async move {
                // None once the stream has failed or ended.
                let mut names = names?;
                match rest.next().await {
                    Some(Ok(chunk)) => {
                        names.feed(&chunk);
                        if names.found() {
                            return Some((Err(late()), (rest, None)));
                        }
                        Some((Ok(chunk), (rest, Some(names))))
                    }
                    Some(Err(error)) => Some((Err(error), (rest, None))),
                    None if names.finish() => Some((Err(late()), (rest, None))),
                    None => None,
                }
            }
        },
    );
    Body::from_stream(futures_util::stream::once(async move { Ok(prefix) }).chain(rest))
}

/// The first phase of a guarded form post: scan the body for the token,
/// claim it, and either answer (a replay, a refusal) or start the handler.
async fn guard<S>(settings: Arc<Settings>, mut inner: S, request: Request, kind: FormKind) -> Step
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let field = settings.field_name.clone();
    let (parts, body) = request.into_parts();
    let (bytes, rest) = read_prefix(body, settings.max_form_bytes).await;
    let scanned = match kind {
        FormKind::UrlEncoded => {
            let mut names = UrlencodedNames::new(&field);
            names.feed(&bytes);
            match rest {
                // No field: the route gets the body as sent, bad escapes
                // and all, as if the layer were not there.
                Rest::End if !names.finish() => Ok((None, Body::from(bytes))),
                // The field: the whole form is read strictly.
                Rest::End => {
                    scan::urlencoded(&bytes, &field).map(|token| (token, Body::from(bytes)))
                }
                // A guarded form too large to check whole.
                Rest::More(_) if names.found() => Err(ScanError::TooLarge {
                    limit: settings.max_form_bytes,
                }),
                // No field yet in a large body: it streams on, watched
                // for one, unbuffered.
                Rest::More(rest) => {
                    Ok((None, watched_urlencoded(bytes, rest, names, field.clone())))
                }
                // Cut short: refused if what came names the field, else
                // passed on, failure and all, as the route would see it.
                Rest::Failed(error) if names.finish() => Err(Rest::unreadable(&error)),
                failed @ Rest::Failed(_) => Ok((None, failed.after(bytes))),
            }
        }
        FormKind::Unframed { why } => {
            unframed(bytes, rest, &field, ScanError::Malformed(why.into()))
        }
        FormKind::Multipart { boundary } => {
            let mut scanner = MultipartScanner::new(&boundary, &field);
            let scanned = scanner.feed(&bytes).and_then(|()| match &rest {
                Rest::End => scanner.finish(),
                // The field's part is cut off by the scan limit: its
                // value is not known, so it cannot be claimed.
                Rest::More(_) if scanner.in_field() => Err(ScanError::Late),
                Rest::More(_) => Ok(()),
                Rest::Failed(error) => Err(Rest::unreadable(error)),
            });
            match scanned {
                Ok(()) => {
                    let token = scanner.token().map(str::to_owned);
                    let body = match rest {
                        // Found in the prefix, or every part was in it.
                        Rest::More(rest) if token.is_none() && !scanner.is_complete() => {
                            watched(bytes, rest, scanner, field.clone())
                        }
                        rest => rest.after(bytes),
                    };
                    Ok((token, body))
                }
                // A form that carries the field is checked strictly: a
                // token is never taken from a body read only in part.
                Err(error) if scanner.met_field() || !matches!(error, ScanError::Malformed(_)) => {
                    Err(error)
                }
                // Broken framing, and no field met before it: whether the
                // body carries one is decided by its name's presence.
                Err(error) => unframed(bytes, rest, &field, error),
            }
        }
    };
    let (token, body) = match scanned {
        Ok(found) => found,
        Err(error) => return Step::Respond(error.into_rejection(&field).into_response()),
    };
    let request = Request::from_parts(parts, body);
    let Some(token) = token else {
        let response = inner.call(request);
        return Step::Forward(Box::pin(settle(response)));
    };
    consume(&settings, inner, request, &token).await
}

/// 409 with `Retry-After`: the first post with this token still runs.
fn conflict(settings: &Settings) -> Response {
    settings.metrics.conflict();
    SubmitTokenRejection::InFlight.into_response()
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
    // The path the client sent, before a tenancy prefix was cut from it: a
    // token posted to `/acme/orders` is not one for `/globex/orders`.
    let path = match request.extensions().get::<axum::extract::OriginalUri>() {
        Some(original) => original.path(),
        None => request.uri().path(),
    };
    let form = hash_parts(
        "autumn.submit-token.form.v1",
        &[request.method().as_str().as_bytes(), path.as_bytes()],
    );
    // ...and to the session that submitted it: another one posting the same
    // token (a copied page, a leaked token) gets no replay of its answer.
    let who = match request.extensions().get::<TokenBinding>() {
        Some(binding) => binding.as_bytes(),
        None => request
            .extensions()
            .get::<IdempotencyScope>()
            .map(IdempotencyScope::as_bytes)
            .unwrap_or_default(),
    };
    let binding = token_binding(who);
    let fingerprint = [form, binding].concat();
    let owner = new_owner();
    let route = RouteLabel::of(request.method(), request.uri(), request.extensions());
    let claimed = claim_or_wait(
        &settings.store,
        &storage_key,
        &owner,
        settings.in_flight_ttl,
        &settings.clock,
        settings.in_flight_wait,
    )
    .await;
    match claimed.map(|claimed| claimed.claim) {
        Err(error) => {
            tracing::debug!(%error, "submit-token store failed; not running the handler");
            settings
                .metrics
                .store_failed(settings.clock.now_millis(), "submit_token", &error);
            return Step::Respond(match error.operation() {
                _ if error.kind() == StoreErrorKind::Full => {
                    SubmitTokenRejection::StoreFull.into_response()
                }
                Some(StoreOperation::TryLock | StoreOperation::RenewLock) => conflict(settings),
                _ => SubmitTokenRejection::StoreUnavailable.into_response(),
            });
        }
        Ok(Claim::Completed {
            record,
            fingerprint: recorded,
        }) => {
            if let Some(rejection) = mismatch(&recorded, &form, &binding) {
                return Step::Respond(rejection.into_response());
            }
            let record = match settings.sealing.open(record) {
                Ok(record) => record,
                Err(error) => {
                    settings.metrics.conflict();
                    tracing::warn!(%error, "replay refused: the recorded response cannot be opened");
                    return Step::Respond(SubmitTokenRejection::RecordUnreadable.into_response());
                }
            };
            // The first post ran, but its answer was too large to keep:
            // nothing to replay, and it must not run again.
            if record.is_not_recorded() {
                settings.metrics.conflict();
                tracing::debug!(
                    submit_token.replayed = false,
                    "resubmission refused: the first post's response was too large to record"
                );
                return Step::Respond(SubmitTokenRejection::ResponseNotRecorded.into_response());
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
        // The duplicate of a double-click waited (up to in_flight_wait) in
        // vain for the first one to finish.
        Ok(Claim::InFlight) => return Step::Respond(conflict(settings)),
        Ok(_) => {}
    }
    // Only a new token counts against the caller's quota: a resubmission
    // of a recorded one was answered above.
    let new_key = NewKey {
        quota: settings.quota.as_ref(),
        extensions: request.extensions(),
        store: &settings.store,
        storage_key: &storage_key,
        owner: &owner,
        in_flight_ttl: settings.in_flight_ttl,
        layer: "submit_token",
    };
    let now = settings.clock.now_millis();
    let charge = match charge_claimed(new_key, &settings.metrics, now).await {
        Ok(charge) => charge,
        Err(Refused::Over(retry_after)) => {
            let rejection = SubmitTokenRejection::QuotaExceeded { retry_after };
            return Step::Respond(rejection.into_response());
        }
        Err(Refused::Failed(error)) if error.kind() == StoreErrorKind::Full => {
            return Step::Respond(SubmitTokenRejection::StoreFull.into_response());
        }
        Err(Refused::Failed(_)) => {
            return Step::Respond(SubmitTokenRejection::StoreUnavailable.into_response());
        }
    };
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
        // Server errors are recorded only on the Idempotency-Key guard's
        // opt-in; a form's failure releases its token.
        record_server_errors: false,
        metrics: settings.metrics.clone(),
        sealing: settings.sealing.clone(),
        route,
        guard: Guard::Token,
        charge,
        finalize: request.extensions().get::<FinalizeHook>().cloned(),
        // Bound to the scope (no session to bind to): a handler that moves
        // the caller to another scope (a tenant switch) gets the record bound
        // to both, so the retry from the new one replays. A session binding
        // survives a tenant switch.
        after_run: match request.extensions().get::<TokenBinding>() {
            Some(_) => None,
            None => request
                .extensions()
                .get::<ScopeAfterRun>()
                .map(|rescope| AfterRun {
                    rescope: rescope.clone(),
                    scope: request
                        .extensions()
                        .get::<IdempotencyScope>()
                        .cloned()
                        .unwrap_or_default(),
                    target: Retarget::Binding,
                }),
        },
    };
    let response = call_boxed(inner, request);
    // Whether it was recorded tells a token's client nothing.
    let run = run_and_record(held, response, |_| false);
    Step::Run(Box::pin(async move { run.await.0 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tail of a multipart body the layer could not scan in full.
    mod watched_tail {
        use super::*;

        const HEAD: &[u8] =
            b"--XyZ\r\nContent-Disposition: form-data; name=\"upload\"; filename=\"a.bin\"\r\n\r\n";

        /// `prefix` as scanned, and the tail streamed in `chunk`-byte chunks.
        fn watch(prefix: &[u8], tail: &[u8], chunk: usize) -> Body {
            let mut scanner = MultipartScanner::new("XyZ", "_submit_token");
            scanner.feed(prefix).expect("the prefix scans");
            let chunks: Vec<Result<Bytes, std::io::Error>> = tail
                .chunks(chunk)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            watched(
                Bytes::copy_from_slice(prefix),
                Body::from_stream(futures_util::stream::iter(chunks)),
                scanner,
                "_submit_token".into(),
            )
        }

        async fn read(body: Body) -> Result<Bytes, String> {
            body.collect()
                .await
                .map(http_body_util::Collected::to_bytes)
                .map_err(|e| e.to_string())
        }

        #[tokio::test]
        async fn passes_a_tail_without_the_field_unchanged() {
            let mut tail = vec![b'x'; 3000];
            tail.extend_from_slice(b"\r\n--XyZ\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhi\r\n--XyZ--\r\n");
            for chunk in [1, 7, 700, 10_000] {
                let body = read(watch(HEAD, &tail, chunk)).await.expect("passes");
                assert_eq!(&body[..HEAD.len()], HEAD, "the prefix comes first");
                assert_eq!(&body[HEAD.len()..], &tail[..], "chunk {chunk}");
            }
        }

        #[tokio::test]
        async fn fails_on_a_part_naming_the_field_however_it_is_cut() {
            let mut tail = vec![b'x'; 3000];
            tail.extend_from_slice(b"\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_submit_token\"\r\n\r\ntok\r\n--XyZ--\r\n");
            for chunk in [1, 7, 700, 10_000] {
                let error = read(watch(HEAD, &tail, chunk)).await.expect_err("fails");
                assert!(
                    error.contains(
                        "the _submit_token field must come within the first security.submit_token.max_form_bytes"
                    ),
                    "chunk {chunk}: {error}"
                );
            }
        }

        #[tokio::test]
        async fn passes_a_file_that_holds_a_part_header_naming_the_field() {
            let mut tail =
                b"Content-Disposition: form-data; name=\"_submit_token\"\r\n\r\nsneaky".to_vec();
            tail.extend_from_slice(b"\r\n--XyZ--\r\n");
            for chunk in [1, 5, 10_000] {
                let body = read(watch(HEAD, &tail, chunk))
                    .await
                    .expect("content passes");
                assert_eq!(body.len(), HEAD.len() + tail.len(), "chunk {chunk}");
            }
        }
    }
}
