//! The session service: one [`Session`] per request, saved on the way out.
//!
//! ```text
//! request -> cookie id (no store call) -> Session in the extensions
//!         -> mutating request with an Idempotency-Key or a form body and a cookie?
//!              load the session, so the idempotency scope and a submit token's
//!              binding name the session the store knows (a forged, expired or
//!              unknown id is scoped apart from every stored session); 503 when
//!              the store fails
//!         -> handler (the guards save the session before recording, through the
//!            FinalizeHook, so a replay carries the Set-Cookie)
//!         -> save what is still unsaved, Set-Cookie; a form page for a visitor
//!            without a cookie gets an id in the cookie alone
//! ```

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use autumn_base::clock::SharedClock;
use autumn_idempotency::finalize::{Finalize, FinalizeError, FinalizeFuture, FinalizeHook};
use autumn_idempotency::key::may_be_guarded;
use autumn_idempotency::submit::TokenBinding;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::HeaderMap;
use tower::Service;

use super::cookie::CookieSettings;
use super::future::{ResponseFuture, finish};
use super::handle::Session;
use super::id::SessionId;
use super::store::SessionStore;

/// Request extension: who the session layer found the request to be, for
/// the idempotency scope. Present only on requests a guard may look at.
///
/// Inserted by [`SessionService`] after loading the session a guarded
/// request's cookie names (beside the [`TokenBinding`] made from the same
/// id); read by the scope layer alone (`ScopeParts::of`): `session` when the
/// store knows the id, `browser` when it does not.
#[derive(Debug, Clone)]
pub(crate) struct SessionIdentity {
    pub(crate) id: SessionId,
    /// Whether the store knows the id (a live or retired session).
    pub(crate) known: bool,
}

/// What a [`SessionLayer`](super::SessionLayer) was built with: where
/// sessions are kept, the clock expiry is measured on, and the cookie.
#[derive(Clone)]
pub(super) struct Settings {
    pub(super) store: Arc<dyn SessionStore>,
    pub(super) clock: SharedClock,
    pub(super) cookie: Arc<CookieSettings>,
}

/// The service made by [`SessionLayer`](super::SessionLayer).
#[derive(Clone)]
pub struct SessionService<S> {
    inner: S,
    settings: Settings,
}

impl<S> std::fmt::Debug for SessionService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionService").finish_non_exhaustive()
    }
}

impl<S> SessionService<S> {
    pub(super) fn new(inner: S, settings: Settings) -> Self {
        Self { inner, settings }
    }
}

impl<S> Service<Request> for SessionService<S>
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
        let sent = super::session_cookie(request.headers(), &self.settings.cookie.name)
            .and_then(SessionId::from_cookie);
        let session = Session::new(
            self.settings.store.clone(),
            self.settings.clock.clone(),
            self.settings.cookie.clone(),
            sent,
        );
        // The hook and the binding are read by the guards alone, so only a
        // request a guard may act on gets them.
        let guarded = may_be_guarded(request.method(), request.headers());
        let identify = guarded && session.inner.sent.is_some();
        request.extensions_mut().insert(session.clone());
        if guarded {
            let tenant = TokenTenant::default();
            request.extensions_mut().insert(tenant.clone());
            request
                .extensions_mut()
                .insert(FinalizeHook::new(SaveBeforeRecording {
                    session: session.clone(),
                    tenant,
                }));
        }
        if !identify {
            if guarded {
                // No session to identify: a token posted now is bound to no
                // session, and answers only visitors without one.
                request.extensions_mut().insert(TokenBinding::default());
            }
            // The usual case, with nothing boxed: the session is saved on
            // the way out only if the handler touched it.
            return ResponseFuture::direct(self.inner.call(request), session);
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::boxed(Box::pin(async move {
            match session.identity().await {
                Ok(Some((id, known))) => {
                    request.extensions_mut().insert(binding(&id, known));
                    request
                        .extensions_mut()
                        .insert(SessionIdentity { id, known });
                }
                Ok(None) => {}
                Err(error) => return Ok(error.into_response()),
            }
            let response = inner.call(request).await?;
            Ok(finish(session, response).await)
        }))
    }
}

/// What a submit token posted from this session is bound to: the session
/// the store knows, or the cookie's unknown id, apart from each other (as
/// in the idempotency scope).
fn binding(id: &SessionId, known: bool) -> TokenBinding {
    let kind: &[u8] = if known { b"session\0" } else { b"browser\0" };
    TokenBinding::new([kind, id.as_str().as_bytes()].concat())
}

/// Request extension: the tenant a submit token posted in this request is
/// bound to besides the session, once the tenancy layer (inside the session
/// layer) resolved it from something other than the session. Filled by the
/// scope layer, which also adds it to the request's [`TokenBinding`]; read
/// by the guards' hook, so the binding after a sign-in holds it too.
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenTenant(Arc<OnceLock<Vec<u8>>>);

impl TokenTenant {
    /// Binds tokens of this request to `tenant` (once).
    pub(crate) fn bind(&self, tenant: &[u8]) {
        let _ = self.0.set(tenant_suffix(tenant));
    }
}

/// What a tenant adds to a token's binding.
pub(crate) fn tenant_suffix(tenant: &[u8]) -> Vec<u8> {
    [b"\0tenant\0".as_slice(), tenant].concat()
}

/// The guards' hook: save the session and add its cookie before the
/// response is recorded.
struct SaveBeforeRecording {
    session: Session,
    tenant: TokenTenant,
}

impl Finalize for SaveBeforeRecording {
    fn pending(&self) -> bool {
        self.session.pending()
    }

    fn finalize<'a>(&'a self, headers: &'a mut HeaderMap) -> FinalizeFuture<'a> {
        Box::pin(async move {
            self.session
                .save(headers)
                .await
                .map_err(FinalizeError::from_error)
        })
    }

    fn binding_after(&self) -> Option<Vec<u8>> {
        let id = self.session.saved_id()?;
        let mut after = binding(&id, true).as_bytes().to_vec();
        if let Some(tenant) = self.tenant.0.get() {
            after.extend_from_slice(tenant);
        }
        Some(after)
    }
}
