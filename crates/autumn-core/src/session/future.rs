//! [`ResponseFuture`]: the inner response, with the session saved on the
//! way out when the handler touched it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use autumn_base::problem::{ProblemCode, ProblemDetails};
use autumn_idempotency::submit::TokenMinted;
use axum::response::{IntoResponse as _, Response};
use http::StatusCode;
use pin_project_lite::pin_project;

use super::handle::Session;

type Boxed = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

pin_project! {
    /// The future [`SessionService`](super::SessionService) returns. A
    /// request whose session nobody read or wrote (most API calls, every
    /// asset) is answered without a boxed future or a store call; loading
    /// the session first, or saving it after, runs boxed.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProjection]
    enum State<F> {
        Direct {
            #[pin]
            future: F,
            session: Option<Session>,
        },
        Boxed {
            future: Boxed,
        },
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn direct(future: F, session: Session) -> Self {
        Self {
            state: State::Direct {
                future,
                session: Some(session),
            },
        }
    }

    pub(super) fn boxed(future: Boxed) -> Self {
        Self {
            state: State::Boxed { future },
        }
    }
}

impl<F> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut this = self.as_mut().project();
            match this.state.as_mut().project() {
                StateProjection::Direct { future, session } => {
                    let mut response = ready!(future.poll(cx))?;
                    let Some(session) = session.take() else {
                        return Poll::Ready(Ok(response));
                    };
                    if session.untouched() {
                        if response.extensions().get::<TokenMinted>().is_some() {
                            session.issue_cookie_only(response.headers_mut());
                        }
                        return Poll::Ready(Ok(response));
                    }
                    let saving: Boxed =
                        Box::pin(async move { Ok(finish(session, response).await) });
                    this.state.set(State::Boxed { future: saving });
                }
                StateProjection::Boxed { future } => return future.as_mut().poll(cx),
            }
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// Saves what the handler left unsaved and adds the cookie: a session id
/// in the cookie alone for a form page minted for a visitor without one.
pub(super) async fn finish(session: Session, mut response: Response) -> Response {
    if let Err(error) = session.save(response.headers_mut()).await {
        return NotSaved(error).into_response();
    }
    if response.extensions().get::<TokenMinted>().is_some() {
        session.issue_cookie_only(response.headers_mut());
    }
    response
}

/// 500 `session_not_saved`: the handler ran but its session could not be
/// saved. The store's error is logged, not sent.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request was processed but the session could not be saved; changes to the session were lost"
)]
struct NotSaved(#[source] super::SessionError);

impl ProblemDetails for NotSaved {
    fn problem_status(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(crate::codes::SESSION_NOT_SAVED)
    }

    /// The handler's changes to the session are lost: the operators must
    /// see why.
    fn log_for_operators(&self) {
        tracing::error!(error = %self.0, "the session could not be saved after the handler ran");
    }
}

autumn_base::problem_into_response!(NotSaved);
