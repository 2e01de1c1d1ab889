//! Who is asking: the [`IdempotencyScope`] every request a guard may act on
//! (a mutating one with an `Idempotency-Key` or a form body) carries into
//! the guards.
//!
//! The session part is the session the session layer resolved: `session`
//! with the id when the store knows it, `browser` with the cookie's id when
//! it does not (forged, expired, or an id given to a visitor in the cookie
//! alone), so an unknown id never shares records with a stored session. With
//! sessions off it is the raw session cookie. Then the tenant the tenancy
//! layer resolved (never the raw header) and the raw `Authorization`
//! header. An `IdempotencyScope` already in the extensions is left alone.
//!
//! With sessions on, a `ScopeAfterRun` goes with the scope, so the guards
//! follow a handler that moves the caller: one that creates or rotates the
//! session (a guest's first flash, a sign-in), or switches tenants when the
//! tenant came from the session (see `scope_after_run`). A layer inside
//! this one that names the principal (`AppBuilder::scope_by`'s, the API
//! tokens') names it in both, with [`name_principal`].
//!
//! Beside the scope, while `[idempotency.quota]` is on, goes the
//! [`QuotaSubject`] the guards count new keys against: the session the
//! store knows, else the client address, each within its tenant; a
//! principal named later takes its place.

use std::net::IpAddr;

use autumn_base::address::counted_address;
use autumn_idempotency::IdempotencyScope;
use autumn_idempotency::key::may_be_guarded;
use autumn_idempotency::quota::QuotaSubject;
use autumn_idempotency::rescope::{Rescope, ScopeAfterRun, ScopeFuture};
use axum::extract::Request;
use http::{Extensions, HeaderMap, HeaderValue, header};
use tower::util::MapRequestLayer;

use crate::config::AutumnConfig;
use crate::config::TenantStrategy;
use crate::session::{
    Session, SessionId, SessionIdentity, TokenTenant, session_cookie, tenant_suffix,
};
use crate::tenancy::Tenant;
use autumn_idempotency::submit::TokenBinding;

pub(crate) fn layer(
    config: &AutumnConfig,
    client_of: fn(&HeaderMap) -> IpAddr,
) -> MapRequestLayer<impl FnMut(Request) -> Request + Clone + use<>> {
    // The name the session layer writes; with sessions off, the cookie an
    // app of its own may set under that name.
    let cookie_name: std::sync::Arc<str> = config.session.effective_cookie_name().into();
    // With strategy `session`, the tenant the tenancy layer resolved came
    // from the session in the extensions: the one a handler switches.
    let tenant_from_session =
        config.tenancy.enabled && config.tenancy.strategy == TenantStrategy::Session;
    // Only the guards' quota reads who pays.
    let quota = config.idempotency.quota.enabled;
    MapRequestLayer::new(move |mut request: Request| {
        // Only a guard reads the scope: a GET, or a JSON call without an
        // Idempotency-Key, pays nothing here.
        if may_be_guarded(request.method(), request.headers())
            && request.extensions().get::<IdempotencyScope>().is_none()
        {
            let parts = ScopeParts::of(request.extensions(), request.headers(), &cookie_name);
            // Owned: the extensions are written below.
            let tenant = request
                .extensions()
                .get::<Tenant>()
                .map(|tenant| tenant.id().to_owned());
            let tenant = tenant.as_deref();
            let scope = parts.with_tenant(tenant.map(str::as_bytes));
            // A submit token is bound to the tenant too, not the session
            // alone, unless the tenant came from the session (which the
            // session binding then covers, and a handler may switch).
            if let Some(tenant) = tenant.filter(|_| !tenant_from_session) {
                bind_tokens_to_tenant(request.extensions_mut(), tenant.as_bytes());
            }
            // Only IdempotencyTx (a database feature) reads it.
            #[cfg(feature = "database")]
            if let Some(previous) = parts.gone_session_scope(tenant.map(str::as_bytes)) {
                request.extensions_mut().insert(previous);
            }
            if let Some(after_run) =
                scope_after_run(&parts, request.extensions(), tenant_from_session)
            {
                request.extensions_mut().insert(after_run);
            }
            if quota {
                let subject = match request.extensions().get::<SessionIdentity>() {
                    Some(SessionIdentity { id, known: true }) => {
                        QuotaSubject::new("session", id.as_str())
                    }
                    // A made-up cookie or none: a fresh one per request
                    // would be a fresh quota per request.
                    _ => QuotaSubject::new(
                        "address",
                        counted_address(client_of(request.headers())).to_string(),
                    ),
                };
                request
                    .extensions_mut()
                    .insert(in_tenant(subject, tenant.map(str::as_bytes)));
            }
            request.extensions_mut().insert(scope);
        }
        request
    })
}

/// Who the request acts for, as the layer that resolved a principal named
/// it (`AppBuilder::scope_by`'s, or the API tokens'). Written by
/// [`name_principal`]; read by rate limits counted `by = "principal"`.
#[derive(Debug, Clone)]
pub(crate) struct NamedPrincipal(pub(crate) std::sync::Arc<str>);

/// Names `principal` as who is asking, in place of the raw `Authorization`
/// header, in every scope of the request this layer wrote: the request's
/// own, the one a retry carries after a handler that moves the caller (its
/// retry is named the same way), and, for `IdempotencyTx`, the gone
/// session's. Called by the layers that resolve a principal inside this
/// one (`AppBuilder::scope_by`'s and the API tokens'): a token refreshed
/// between attempts then changes no scope.
pub(crate) fn name_principal(extensions: &mut Extensions, principal: &str) {
    extensions.insert(NamedPrincipal(principal.into()));
    // The principal pays for its records, wherever it calls from.
    if extensions.get::<QuotaSubject>().is_some() {
        let tenant = extensions
            .get::<Tenant>()
            .map(|tenant| tenant.id().as_bytes().to_vec());
        let subject = in_tenant(QuotaSubject::new("principal", principal), tenant.as_deref());
        extensions.insert(subject);
    }
    if let Some(scope) = extensions.get_mut::<IdempotencyScope>() {
        *scope = by_principal(std::mem::take(scope), principal);
    }
    if let Some(after_run) = extensions.remove::<ScopeAfterRun>() {
        let principal = principal.to_owned();
        extensions.insert(after_run.map(move |scope| by_principal(scope, &principal)));
    }
    #[cfg(feature = "database")]
    if let Some(GoneSessionScope(scope)) = extensions.get_mut::<GoneSessionScope>() {
        *scope = by_principal(std::mem::take(scope), principal);
    }
}

/// `subject` within `tenant`, when there is one.
fn in_tenant(subject: QuotaSubject, tenant: Option<&[u8]>) -> QuotaSubject {
    match tenant {
        Some(tenant) => subject.in_tenant(tenant),
        None => subject,
    }
}

/// `scope` with the principal instead of the raw `Authorization` header.
fn by_principal(scope: IdempotencyScope, principal: &str) -> IdempotencyScope {
    scope
        .without_part("authorization")
        .with_part("principal", principal)
}

/// Adds `tenant` to the request's submit-token binding, and to the one the
/// session hook gives after a save.
fn bind_tokens_to_tenant(extensions: &mut Extensions, tenant: &[u8]) {
    if let Some(slot) = extensions.get::<TokenTenant>() {
        slot.bind(tenant);
    }
    if let Some(binding) = extensions.get_mut::<TokenBinding>() {
        *binding = TokenBinding::new([binding.as_bytes(), &tenant_suffix(tenant)].concat());
    }
}

/// For a request with a session: how the guards learn the scope a retry
/// will carry once the handler ran: the session's id after the save (a
/// session created or rotated gets a new one, which the retry's cookie
/// carries), and, when the tenant came from the session (strategy
/// `session`), the tenant it switched to. See `autumn_idempotency::rescope`.
fn scope_after_run(
    parts: &ScopeParts,
    extensions: &http::Extensions,
    tenant_from_session: bool,
) -> Option<ScopeAfterRun> {
    let session = extensions.get::<Session>()?.clone();
    let tenant = extensions.get::<Tenant>().cloned();
    Some(ScopeAfterRun::new(Moved {
        parts: parts.clone(),
        session,
        switchable: tenant_from_session && tenant.is_some(),
        tenant,
    }))
}

/// The scope after the handler may have moved the caller.
struct Moved {
    parts: ScopeParts,
    session: Session,
    /// The tenant the request was resolved to.
    tenant: Option<Tenant>,
    /// Whether that tenant came from the session, so a handler can switch it.
    switchable: bool,
}

impl Rescope for Moved {
    fn scope_after_run(&self) -> ScopeFuture<'_> {
        Box::pin(async move {
            let session_after = self.session.id_after_save().await;
            let tenant_before = self.tenant.as_ref().map(Tenant::id);
            if !self.switchable {
                // Only the session can have moved (the usual case: nothing
                // moved, and nothing is made).
                let id = session_after?;
                return Some(
                    self.parts
                        .with_session(&id)
                        .with_tenant(tenant_before.map(str::as_bytes)),
                );
            }
            // No tenant left (signed out): the next request is refused
            // before any guard, so there is no key to follow.
            let tenant_after = self
                .session
                .get::<String>(Tenant::SESSION_KEY)
                .await
                .ok()
                .flatten()?;
            if session_after.is_none() && Some(tenant_after.as_str()) == tenant_before {
                return None;
            }
            let parts = match &session_after {
                Some(id) => self.parts.with_session(id),
                None => self.parts.clone(),
            };
            Some(parts.with_tenant(Some(tenant_after.as_bytes())))
        })
    }
}

#[cfg(test)]
fn request_scope(
    extensions: &Extensions,
    headers: &HeaderMap,
    cookie_name: &str,
) -> IdempotencyScope {
    let tenant = extensions.get::<Tenant>().map(Tenant::id);
    ScopeParts::of(extensions, headers, cookie_name).with_tenant(tenant.map(str::as_bytes))
}

/// Request extension: the scope a request whose session id the store does
/// not know would have had under that session, had it still been stored.
/// A retry whose session expired or was deleted runs under a new storage
/// key; `IdempotencyTx` copies the recovery point from the key of this
/// scope, so the retry still skips the steps that are done.
///
/// Inserted by the scope layer beside the `IdempotencyScope`, only when
/// the session layer found the cookie's id unknown; read by
/// `IdempotencyTx` alone.
#[derive(Debug, Clone)]
#[cfg(feature = "database")]
pub(crate) struct GoneSessionScope(pub(crate) IdempotencyScope);

/// The parts of a request's scope around its tenant, so the scope can be
/// made again for another tenant (after a tenant switch).
#[derive(Clone)]
pub(crate) struct ScopeParts {
    /// The session part, if any.
    session: IdempotencyScope,
    /// The session part had the store known the session id.
    #[cfg_attr(not(feature = "database"), allow(dead_code))]
    gone_session: Option<IdempotencyScope>,
    authorization: Option<HeaderValue>,
}

impl ScopeParts {
    fn of(extensions: &Extensions, headers: &HeaderMap, cookie_name: &str) -> Self {
        let mut session = IdempotencyScope::default();
        let mut gone_session = None;
        match extensions.get::<SessionIdentity>() {
            Some(SessionIdentity { id, known: true }) => {
                session = session.with_part("session", id.as_str())
            }
            Some(SessionIdentity { id, known: false }) => {
                session = session.with_part("browser", id.as_str());
                gone_session = Some(IdempotencyScope::default().with_part("session", id.as_str()));
            }
            // The session layer found no cookie worth resolving.
            None if extensions.get::<Session>().is_some() => {}
            None => {
                // Two different values: neither is trusted, as by the
                // session layer.
                if let Some(cookie) = session_cookie(headers, cookie_name) {
                    session = session.with_part("session", cookie);
                }
            }
        }
        Self {
            session,
            gone_session,
            authorization: headers.get(header::AUTHORIZATION).cloned(),
        }
    }

    /// The same parts for a caller whose session, known to the store, is
    /// `id` (the one a save created or rotated to).
    fn with_session(&self, id: &SessionId) -> Self {
        Self {
            session: IdempotencyScope::default().with_part("session", id.as_str()),
            gone_session: None,
            authorization: self.authorization.clone(),
        }
    }

    /// The scope with `tenant` as its tenant part.
    pub(crate) fn with_tenant(&self, tenant: Option<&[u8]>) -> IdempotencyScope {
        self.scope(self.session.clone(), tenant)
    }

    /// The scope under the session the store no longer knows, with `tenant`
    /// (the request's tenant now: a tenant kept in the gone session is
    /// gone with it).
    #[cfg(feature = "database")]
    fn gone_session_scope(&self, tenant: Option<&[u8]>) -> Option<GoneSessionScope> {
        let session = self.gone_session.clone()?;
        Some(GoneSessionScope(self.scope(session, tenant)))
    }

    fn scope(&self, session: IdempotencyScope, tenant: Option<&[u8]>) -> IdempotencyScope {
        let mut scope = session;
        if let Some(tenant) = tenant {
            scope = scope.with_part("tenant", tenant);
        }
        if let Some(authorization) = &self.authorization {
            scope = scope.with_part("authorization", authorization.as_bytes());
        }
        scope
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn scope_follows_session_cookie_and_authorization_only() {
        let a = headers(&[("cookie", "theme=dark; autumn_session=abc")]);
        let b = headers(&[("cookie", "autumn_session=abc; theme=light")]);
        let other = headers(&[("cookie", "autumn_session=xyz")]);
        assert_eq!(
            request_scope(&Extensions::new(), &a, "autumn_session"),
            request_scope(&Extensions::new(), &b, "autumn_session")
        );
        assert_ne!(
            request_scope(&Extensions::new(), &a, "autumn_session"),
            request_scope(&Extensions::new(), &other, "autumn_session")
        );

        let bearer1 = headers(&[("authorization", "Bearer one")]);
        let bearer2 = headers(&[("authorization", "Bearer two")]);
        assert_ne!(
            request_scope(&Extensions::new(), &bearer1, "autumn_session"),
            request_scope(&Extensions::new(), &bearer2, "autumn_session")
        );
    }

    #[test]
    fn an_id_the_store_does_not_know_is_scoped_apart_from_a_stored_session() {
        let id = crate::session::SessionId::from_cookie(b"abc").expect("an id");
        let scope_with = |known| {
            let mut extensions = Extensions::new();
            extensions.insert(SessionIdentity {
                id: id.clone(),
                known,
            });
            request_scope(&extensions, &headers(&[]), "autumn_session")
        };
        assert_ne!(scope_with(true), scope_with(false));
        assert_ne!(
            scope_with(false),
            request_scope(&Extensions::new(), &headers(&[]), "autumn_session"),
            "nor with a visitor without a cookie"
        );
    }

    #[test]
    fn the_resolved_tenant_counts_never_the_raw_header() {
        let forged = headers(&[("x-tenant-id", "globex")]);
        let mut acme = Extensions::new();
        acme.insert(Tenant::new("acme"));
        let mut globex = Extensions::new();
        globex.insert(Tenant::new("globex"));
        assert_eq!(
            request_scope(&Extensions::new(), &forged, "s"),
            request_scope(&Extensions::new(), &headers(&[]), "s"),
            "a header no tenancy layer resolved changes nothing"
        );
        assert_eq!(
            request_scope(&acme, &forged, "s"),
            request_scope(&acme, &headers(&[]), "s")
        );
        assert_ne!(
            request_scope(&acme, &forged, "s"),
            request_scope(&globex, &forged, "s")
        );
    }

    #[test]
    fn a_non_utf8_cookie_does_not_hide_the_session_cookie() {
        let mut mixed = HeaderMap::new();
        mixed.append(
            header::COOKIE,
            HeaderValue::from_bytes(b"tracker=caf\xe9; autumn_session=abc")
                .expect("visible bytes are a valid header value"),
        );
        let clean = headers(&[("cookie", "autumn_session=abc")]);
        let anonymous = headers(&[]);
        assert_eq!(session_cookie(&mixed, "autumn_session"), Some(&b"abc"[..]));
        assert_eq!(
            request_scope(&Extensions::new(), &mixed, "autumn_session"),
            request_scope(&Extensions::new(), &clean, "autumn_session")
        );
        assert_ne!(
            request_scope(&Extensions::new(), &mixed, "autumn_session"),
            request_scope(&Extensions::new(), &anonymous, "autumn_session")
        );
    }

    #[test]
    fn two_different_session_cookies_give_no_session_part() {
        let planted = headers(&[("cookie", "s=planted; s=ours")]);
        let ours = headers(&[("cookie", "s=ours")]);
        let anonymous = headers(&[]);
        assert_eq!(
            request_scope(&Extensions::new(), &planted, "s"),
            request_scope(&Extensions::new(), &anonymous, "s"),
            "neither value is trusted"
        );
        assert_ne!(
            request_scope(&Extensions::new(), &planted, "s"),
            request_scope(&Extensions::new(), &ours, "s")
        );
    }

    fn localhost(_: &HeaderMap) -> IpAddr {
        IpAddr::from([127, 0, 0, 1])
    }

    #[tokio::test]
    async fn the_layer_reads_the_cookie_under_its_effective_name() {
        use tower::{Layer as _, ServiceExt as _};
        let service = layer(&AutumnConfig::default(), localhost).layer(tower::service_fn(
            |request: Request| async move {
                Ok::<_, std::convert::Infallible>(
                    request.extensions().get::<IdempotencyScope>().cloned(),
                )
            },
        ));
        let scope_of = |cookie: &'static str| {
            let request = Request::post("/")
                .header("idempotency-key", "k")
                .header(header::COOKIE, cookie)
                .body(axum::body::Body::empty())
                .expect("a request");
            service.clone().oneshot(request)
        };
        let ours = scope_of("__Host-autumn_session=abc").await;
        assert!(ours.is_ok());
        assert_eq!(
            scope_of("autumn_session=planted; __Host-autumn_session=abc").await,
            ours,
            "the unprefixed name is not the session cookie"
        );
        assert_ne!(scope_of("autumn_session=abc").await, ours);
    }

    #[test]
    fn a_non_utf8_session_cookie_is_kept_as_its_bytes() {
        let mut map = HeaderMap::new();
        map.append(
            header::COOKIE,
            HeaderValue::from_bytes(b"autumn_session=\xff\xfe")
                .expect("visible bytes are a valid header value"),
        );
        assert_eq!(
            session_cookie(&map, "autumn_session"),
            Some(&b"\xff\xfe"[..])
        );
    }
}
