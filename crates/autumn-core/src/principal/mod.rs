//! Who is asking, when the app authenticates callers itself: a
//! [`PrincipalResolver`] names the stable principal behind a request (a JWT's
//! subject, an OAuth client, an `X-Api-Key`'s owner, a client
//! certificate), and the idempotency scope of that request is the principal,
//! not the credential. A client that refreshes its access token between two
//! attempts then still finds its first attempt's record.
//!
//! Mounted with `AppBuilder::scope_by`. It runs only on requests a guard
//! may act on (a mutating request with an `Idempotency-Key` or a form
//! body); other requests pay nothing.
//!
//! ```text
//! request --> guarded? -- no --> the app
//!               | yes
//!               v
//!          resolve(parts) -- Ok(Some(id)) --> scope: `principal` part instead of the raw
//!               |                             `authorization` part; `Principal` extension
//!               |-- Ok(None)   --> scope as it was (the session, the raw header, or none)
//!               |-- Err(Unauthorized) --> 401 problem, nothing runs
//!               `-- Err(Unavailable)  --> 503 problem, nothing runs
//! ```

mod layer;
mod rejection;
mod service;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What a resolver reads: the request's method, URI, headers and
/// extensions (re-exported, so an app needs no `http` dependency of its own).
pub use http::request::Parts;
pub use layer::PrincipalLayer;
pub use rejection::PrincipalError;
pub use service::PrincipalService;

/// The boxed future [`PrincipalResolver::resolve`] returns.
pub type PrincipalFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<String>, PrincipalError>> + Send + 'a>>;

/// Names the stable principal a request acts for, from its parts.
///
/// `Ok(Some(id))`: the request is `id`'s, whatever credential it carried
/// (keep `id` stable across token refreshes: a user id, a client id, never
/// the token). `Ok(None)`: the request names nobody (no credential); it is
/// scoped as without a resolver. `Err`: the credential is refused (401) or
/// cannot be checked now (503); nothing runs.
///
/// ```
/// use autumn_core::principal::{Parts, PrincipalError, PrincipalFuture, PrincipalResolver};
///
/// /// Trusts an `X-Api-Key` that names its owner after a dot.
/// struct ApiKeys;
///
/// impl PrincipalResolver for ApiKeys {
///     fn resolve<'a>(&'a self, parts: &'a Parts) -> PrincipalFuture<'a> {
///         Box::pin(async move {
///             let Some(key) = parts.headers.get("x-api-key") else {
///                 return Ok(None);
///             };
///             let key = key.to_str().map_err(|_| PrincipalError::unauthorized("unreadable key"))?;
///             match key.split_once('.') {
///                 Some((owner, _secret)) => Ok(Some(owner.to_owned())),
///                 None => Err(PrincipalError::unauthorized("not an API key")),
///             }
///         })
///     }
/// }
/// ```
pub trait PrincipalResolver: Send + Sync + 'static {
    /// The principal behind the request, read from its parts.
    fn resolve<'a>(&'a self, parts: &'a Parts) -> PrincipalFuture<'a>;

    /// How the OpenAPI document describes the credential
    /// [`resolve`](Self::resolve) reads (a bearer JWT, an `X-Api-Key`
    /// header): every operation then accepts it, and may answer 401 and
    /// 503. `None`, the default, says nothing of it.
    ///
    /// ```
    /// use autumn_core::openapi::SecurityScheme;
    /// use autumn_core::principal::{Parts, PrincipalFuture, PrincipalResolver};
    ///
    /// struct Jwts;
    ///
    /// impl PrincipalResolver for Jwts {
    ///     fn resolve<'a>(&'a self, _parts: &'a Parts) -> PrincipalFuture<'a> {
    ///         Box::pin(async { Ok(None) })
    ///     }
    ///
    ///     fn security_scheme(&self) -> Option<SecurityScheme> {
    ///         Some(SecurityScheme::Http {
    ///             scheme: "bearer".to_owned(),
    ///             bearer_format: Some("JWT".to_owned()),
    ///             description: None,
    ///             extensions: Default::default(),
    ///         })
    ///     }
    /// }
    /// ```
    fn security_scheme(&self) -> Option<crate::openapi::SecurityScheme> {
        None
    }
}

/// Who the request acts for, as the app's [`PrincipalResolver`] named it.
///
/// A request extension: inserted by the [`PrincipalService`] when the
/// resolver named someone; read by this extractor (`Option<Principal>` for
/// routes that also take anonymous requests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    id: Arc<str>,
}

impl Principal {
    pub(crate) fn new(id: String) -> Self {
        Self { id: id.into() }
    }

    /// The principal's id, as the resolver gave it.
    pub fn id(&self) -> &str {
        &self.id
    }
}

crate::extract::extension_extractor!(Principal, PrincipalError::Missing);
