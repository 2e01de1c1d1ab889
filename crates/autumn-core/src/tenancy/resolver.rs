//! [`TenantResolver`]: the app's word on whether a tenant exists.

use std::future::Future;
use std::pin::Pin;

/// The boxed future [`TenantResolver::exists`] returns.
pub type TenantFuture<'a> =
    Pin<Box<dyn Future<Output = Result<bool, TenantResolveError>> + Send + 'a>>;

/// Says whether a tenant id names a tenant of the app; plugged in with
/// [`AppBuilder::with_tenant_resolver`](crate::AppBuilder::with_tenant_resolver).
///
/// Asked on every request that resolved a tenant id (it may hit the
/// database; cache inside it if that is too slow). `Ok(false)` answers 404
/// `tenant_unknown`, an error 503 `tenant_unavailable`; the handler runs in
/// neither case. Without a resolver every well-formed id is a tenant.
///
/// A closure taking the id works:
///
/// ```
/// use autumn_core::tenancy::{TenantResolveError, TenantResolver};
///
/// fn known() -> impl TenantResolver {
///     |id: String| async move { Ok::<_, TenantResolveError>(matches!(id.as_str(), "acme" | "globex")) }
/// }
/// # let _ = known();
/// ```
///
/// So does a type of the app's own:
///
/// ```
/// use autumn_core::tenancy::{TenantFuture, TenantResolver};
///
/// struct Directory(Vec<String>);
///
/// impl TenantResolver for Directory {
///     fn exists<'a>(&'a self, id: &'a str) -> TenantFuture<'a> {
///         Box::pin(async move { Ok(self.0.iter().any(|known| known == id)) })
///     }
/// }
/// # let _ = Directory(vec!["acme".to_owned()]);
/// ```
pub trait TenantResolver: Send + Sync + 'static {
    /// Whether `id` names a tenant.
    fn exists<'a>(&'a self, id: &'a str) -> TenantFuture<'a>;
}

impl<F, Fut> TenantResolver for F
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<bool, TenantResolveError>> + Send + 'static,
{
    fn exists<'a>(&'a self, id: &'a str) -> TenantFuture<'a> {
        Box::pin(self(id.to_owned()))
    }
}

/// A [`TenantResolver`] could not tell whether a tenant exists (its
/// database is down, say): the request is answered 503.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct TenantResolveError {
    message: String,
}

impl TenantResolveError {
    /// An error described by `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
