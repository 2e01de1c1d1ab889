//! [`TenancyService`]: finds each request's tenant id by the strategy, asks
//! the resolver about it, and puts the [`Tenant`] in the extensions (or
//! answers the rejection).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use autumn_base::ExemptPaths;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderName, header};
use tower::Service;

use super::path::PathTenant;
use super::resolver::TenantResolver;
use super::tenant::{Tenant, TenantRejection, well_formed};
use crate::session::Session;

/// Where the id is read from.
pub(super) enum Strategy {
    Header(HeaderName),
    /// `.` and the base domain, lowercase.
    Subdomain(String),
    Path,
    Session,
}

/// What the services of one [`TenancyLayer`](super::TenancyLayer) share,
/// made from `[tenancy]` by the layer.
pub(super) struct Settings {
    pub(super) strategy: Strategy,
    pub(super) exempt: ExemptPaths,
    pub(super) resolver: Option<Arc<dyn TenantResolver>>,
}

/// The service made by [`TenancyLayer`](super::TenancyLayer).
#[derive(Clone)]
pub(crate) struct TenancyService<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> TenancyService<S> {
    /// `inner`, its requests resolved by `settings`.
    pub(super) fn new(inner: S, settings: Arc<Settings>) -> Self {
        Self { inner, settings }
    }
}

/// Where this request's tenant id is.
enum Source {
    /// Exempt: no tenant.
    None,
    Id(Option<String>),
    Session(Option<Session>),
}

impl<S> Service<Request> for TenancyService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let settings = self.settings.clone();
        let source = match &settings.strategy {
            // Decided before routing, on the path the client sent.
            Strategy::Path => match request.extensions().get::<PathTenant>() {
                Some(PathTenant(id)) => Source::Id(id.clone()),
                None => Source::None,
            },
            _ if settings.exempt.covers(request.uri().path()) => Source::None,
            Strategy::Header(name) => Source::Id(
                request
                    .headers()
                    .get(name)
                    .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()),
            ),
            Strategy::Subdomain(base) => Source::Id(subdomain(&request, base)),
            Strategy::Session => Source::Session(request.extensions().get::<Session>().cloned()),
        };
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let id = match source {
                Source::None => return inner.call(request).await,
                Source::Id(id) => id,
                Source::Session(None) => None,
                // The scope layer finds this session in the extensions too,
                // and follows a handler that switches the tenant in it.
                Source::Session(Some(session)) => {
                    match session.get::<String>(Tenant::SESSION_KEY).await {
                        Ok(id) => id,
                        Err(error) => return Ok(error.into_response()),
                    }
                }
            };
            let tenant = match resolve(&settings, id).await {
                Ok(tenant) => tenant,
                Err(rejection) => return Ok(rejection.into_response()),
            };
            request.extensions_mut().insert(tenant);
            inner.call(request).await
        })
    }
}

/// The tenant `id` names, if it is well formed and the resolver knows it.
async fn resolve(settings: &Settings, id: Option<String>) -> Result<Tenant, TenantRejection> {
    let Some(id) = id.filter(|id| !id.is_empty()) else {
        return Err(TenantRejection::Missing);
    };
    if !well_formed(&id) {
        return Err(TenantRejection::Unknown);
    }
    if let Some(resolver) = &settings.resolver {
        match resolver.exists(&id).await {
            Ok(true) => {}
            Ok(false) => return Err(TenantRejection::Unknown),
            Err(error) => {
                tracing::warn!(%error, "the tenant resolver failed; answering 503");
                return Err(TenantRejection::Unavailable);
            }
        }
    }
    Ok(Tenant::new(&id))
}

/// The label of the request's host right below `base` (`.example.com`):
/// `acme` for `acme.example.com` and for `www.acme.example.com`.
fn subdomain(request: &Request, base: &str) -> Option<String> {
    let host = match request.headers().get(header::HOST) {
        Some(host) => host.to_str().ok()?,
        None => request.uri().host()?,
    };
    // The port, if any; an IPv6 literal is never below a domain name.
    let host = host.rsplit_once(':').map_or(host, |(name, _)| name);
    let host = host.to_ascii_lowercase();
    let below = host.strip_suffix(base)?;
    below.rsplit('.').next().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subdomain_is_the_label_right_below_the_base_domain() {
        let on = |host: &str| {
            let request = Request::builder()
                .uri("/orders")
                .header(header::HOST, host)
                .body(axum::body::Body::empty())
                .expect("a request");
            subdomain(&request, ".example.com")
        };
        assert_eq!(on("acme.example.com"), Some("acme".to_owned()));
        assert_eq!(on("ACME.Example.com:8443"), Some("acme".to_owned()));
        assert_eq!(on("www.acme.example.com"), Some("acme".to_owned()));
        assert_eq!(on("example.com"), None);
        assert_eq!(on("acme.example.org"), None);
        assert_eq!(on("acmeexample.com"), None);
    }

    #[test]
    fn ids_are_short_plain_names() {
        for good in ["acme", "a-b_c.d", "7"] {
            assert!(well_formed(good), "{good}");
        }
        for bad in ["", "a b", "a/b", "ünï", &"x".repeat(129)] {
            assert!(!well_formed(bad), "{bad}");
        }
    }
}
