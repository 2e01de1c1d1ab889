//! The first run of a guarded request, shared by the idempotency-key and
//! submit-token services: run the handler, record a 2xx/3xx response and
//! release the lock in one store call, or release it without recording.

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt as _;
use http::StatusCode;
use tower::Service;

use crate::body::read_whole;
use crate::problem::Problem;
use crate::record::IdempotencyRecord;
use crate::store::IdempotencyStore;

/// A lock the request holds, and what to record under it.
pub(crate) struct Held {
    pub(crate) store: Arc<dyn IdempotencyStore>,
    pub(crate) storage_key: String,
    pub(crate) owner: String,
    pub(crate) fingerprint: [u8; 32],
    pub(crate) ttl: Duration,
    /// How the client tries again, for error details: "a retry with the
    /// same Idempotency-Key", "submitting the form again".
    pub(crate) retry: &'static str,
}

impl Held {
    /// Releases the lock; on failure it lapses after its TTL.
    pub(crate) async fn release(&self) {
        if let Err(error) = self.store.unlock(&self.storage_key, &self.owner).await {
            tracing::warn!(storage_key = %self.storage_key, %error, "could not release a lock; it lapses after its in-flight TTL");
        }
    }
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

/// Awaits the handler's `response`; a panic is answered 500 and an error
/// response (4xx, 5xx) passed on, both releasing the lock so the next attempt
/// runs again. A 2xx/3xx response is recorded (marked by
/// `replays_through_inner`) and the lock released in one store call.
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
) -> impl Future<Output = Response> + Send
where
    F: Future<Output = Result<Response, Infallible>> + Send,
{
    async move {
        let held = holder.held();
        let response = match AssertUnwindSafe(response).catch_unwind().await {
            Ok(Ok(response)) => response,
            Ok(Err(never)) => match never {},
            Err(_panic) => {
                tracing::error!(
                    storage_key = %held.storage_key,
                    "handler panicked; releasing its lock"
                );
                held.release().await;
                return Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_error",
                    format!(
                        "the server failed while handling this request; it was not recorded, so {} runs it again",
                        held.retry
                    ),
                )
                .into_response();
            }
        };
        let status = response.status();
        if !(status.is_success() || status.is_redirection()) {
            held.release().await;
            return response;
        }
        let (parts, body) = response.into_parts();
        let body = match read_whole(body, usize::MAX).await {
            Ok(body) => body,
            Err(error) => {
                // The handler ran but its response is lost: keep the lock, so a
                // retry gets 409 until it lapses rather than a second run now.
                tracing::error!(storage_key = %held.storage_key, %error, "response body failed; keeping the lock");
                return Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "response_lost",
                    format!(
                        "the request was processed but its response could not be sent or recorded; {} gets 409 until the in-flight lock expires",
                        held.retry
                    ),
                )
                .into_response();
            }
        };
        let record = IdempotencyRecord::from_parts(&parts, body.clone())
            .with_replay_through_inner(replays_through_inner(&parts));
        let finished = held
            .store
            .finish(
                &held.storage_key,
                &held.owner,
                record,
                held.fingerprint.to_vec(),
                held.ttl,
            )
            .await;
        match finished {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(
                    storage_key = %held.storage_key,
                    "the lock lapsed before the response was recorded; increase the in-flight TTL"
                )
            }
            // The handler's work is done: answer with its response, and keep the
            // lock so a retry gets 409 until it lapses instead of a second run.
            Err(error) => {
                tracing::error!(storage_key = %held.storage_key, %error, "could not record the response; the lock stays until its in-flight TTL")
            }
        }
        Response::from_parts(parts, Body::from(body))
    }
}
