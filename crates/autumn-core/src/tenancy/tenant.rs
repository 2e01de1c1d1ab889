//! [`Tenant`]: the tenant the tenancy layer resolved, its extractor and its
//! rejections.

use std::sync::Arc;

use autumn_base::problem::{ProblemCode, ProblemDetails};
use http::StatusCode;

use crate::session::{Session, SessionError};

/// The tenant the request belongs to, as the tenancy layer resolved it (by
/// `[tenancy] strategy`, checked by the app's
/// [`TenantResolver`](super::TenantResolver)).
///
/// Take it as an extractor; `Option<Tenant>` on a route that may be served
/// without one (an exempt path, tenancy off).
///
/// A request extension: inserted by the tenancy layer (inside the session
/// layer) once the resolver accepted the id; read by this extractor and by
/// the scope layer, which makes it the `tenant` part of the request's
/// idempotency scope.
///
/// ```
/// use autumn_core::tenancy::Tenant;
///
/// async fn orders(tenant: Tenant) -> String {
///     format!("the orders of {}", tenant.id())
/// }
/// # let _ = orders;
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Tenant(Arc<str>);

impl Tenant {
    /// The session key strategy `"session"` reads the tenant id from, and
    /// [`switch`](Self::switch) writes.
    pub const SESSION_KEY: &'static str = "autumn.tenant";

    pub(crate) fn new(id: &str) -> Self {
        Self(id.into())
    }

    /// The tenant's id.
    pub fn id(&self) -> &str {
        &self.0
    }

    /// Makes `id` the session's tenant (strategy `"session"`), e.g. after
    /// sign-in or from a tenant picker. The next request is resolved to it,
    /// and checked by the resolver then.
    ///
    /// When this runs in a guarded request (an `Idempotency-Key`, a submit
    /// token), the guard locks the key a retry from the new tenant will use
    /// before the session is saved, and records the response under it too:
    /// a duplicate arriving during the save gets 409, a retry afterwards
    /// replays, and the handler never runs twice.
    ///
    /// ```
    /// use autumn_core::session::Session;
    /// use autumn_core::tenancy::Tenant;
    /// use autumn_core::AutumnResult;
    ///
    /// async fn pick(session: Session) -> AutumnResult<&'static str> {
    ///     Tenant::switch(&session, "globex").await?;
    ///     Ok("now in globex")
    /// }
    /// # let _ = pick;
    /// ```
    ///
    /// # Errors
    ///
    /// [`SessionError`] when the session could not be read.
    pub async fn switch(session: &Session, id: &str) -> Result<(), SessionError> {
        session.insert(Self::SESSION_KEY, id).await
    }
}

impl std::fmt::Debug for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Tenant").field(&self.id()).finish()
    }
}

impl std::fmt::Display for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// Why a request got no tenant. Each answers a problem+json document with
/// the `code` named here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TenantRejection {
    /// 400 `tenant_missing`: the request names no tenant.
    #[error("this request names no tenant")]
    Missing,
    /// 404 `tenant_unknown`: the id is not one of the app's tenants.
    #[error("no such tenant")]
    Unknown,
    /// 503 `tenant_unavailable`: whether the tenant exists could not be told.
    #[error("the tenant could not be checked; try again shortly")]
    Unavailable,
    /// 500 `tenant_not_resolved`: a handler takes a `Tenant` on a route the
    /// tenancy layer does not resolve (tenancy off, or an exempt path).
    #[error(
        "this handler takes a Tenant, but no tenant is resolved here; set tenancy.enabled = true, take Option<Tenant>, or remove the path from tenancy.exempt_paths"
    )]
    NotResolved,
}

impl TenantRejection {
    /// The HTTP status it answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Missing => StatusCode::BAD_REQUEST,
            Self::Unknown => StatusCode::NOT_FOUND,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::NotResolved => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The problem document's `code`, one of [`codes`](crate::codes).
    pub fn code(&self) -> &'static str {
        self.typed_code().as_str()
    }

    fn typed_code(&self) -> ProblemCode {
        match self {
            Self::Missing => crate::codes::TENANT_MISSING,
            Self::Unknown => crate::codes::TENANT_UNKNOWN,
            Self::Unavailable => crate::codes::TENANT_UNAVAILABLE,
            Self::NotResolved => crate::codes::TENANT_NOT_RESOLVED,
        }
    }
}

impl ProblemDetails for TenantRejection {
    fn problem_status(&self) -> StatusCode {
        self.status()
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(self.typed_code())
    }

    /// A handler taking a `Tenant` where none is resolved is the app's
    /// misconfiguration, which the operators must fix; the other refusals
    /// are the client's.
    fn log_for_operators(&self) {
        if *self == Self::NotResolved {
            tracing::error!(error = %self, "tenant extractor rejected");
        }
    }
}

autumn_base::problem_into_response!(TenantRejection);

crate::extract::extension_extractor!(Tenant, TenantRejection::NotResolved);

/// Whether `id` can be a tenant id: 1 to 128 letters, digits, `-`, `_` or
/// `.`. Anything else is unknown without asking the resolver.
pub(crate) fn well_formed(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
}
