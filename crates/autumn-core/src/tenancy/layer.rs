//! The tenancy layer, and the path strategy's step before routing.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use autumn_base::ExemptPaths;
use axum::extract::{OriginalUri, Request};
use axum::response::{IntoResponse, Response};
use http::{HeaderName, header};
use tower::{Layer, Service};

use super::resolver::TenantResolver;
use super::tenant::{Tenant, TenantRejection, well_formed};
use crate::config::{AutumnConfig, InvalidSetting, TenantStrategy};
use crate::session::Session;

/// Request extension (strategy `"path"`): the first path segment, taken off
/// the URI before routing; absent on an exempt path.
#[derive(Debug, Clone)]
pub(crate) struct PathTenant(Option<String>);

/// Request extension: the tenant came from this session, so a handler may
/// switch it.
#[derive(Clone)]
pub(crate) struct TenantFromSession(pub(crate) Session);

/// Where the id is read from.
enum Strategy {
    Header(HeaderName),
    /// `.` and the base domain, lowercase.
    Subdomain(String),
    Path,
    Session,
}

struct Settings {
    strategy: Strategy,
    exempt: ExemptPaths,
    resolver: Option<Arc<dyn TenantResolver>>,
}

/// Resolves each request to a [`Tenant`].
#[derive(Clone)]
pub(crate) struct TenancyLayer(Arc<Settings>);

impl TenancyLayer {
    /// The layer `[tenancy]` describes; `None` when tenancy is off.
    pub(crate) fn from_config(
        config: &AutumnConfig,
        resolver: Option<Arc<dyn TenantResolver>>,
    ) -> Result<Option<Self>, InvalidSetting> {
        let tenancy = &config.tenancy;
        if !tenancy.enabled {
            return Ok(None);
        }
        let strategy = match tenancy.strategy {
            TenantStrategy::Header => {
                Strategy::Header(HeaderName::try_from(tenancy.header.as_str()).map_err(|_| {
                    InvalidSetting {
                        key: "tenancy.header",
                        message: format!("{:?} is not a valid header name", tenancy.header),
                    }
                })?)
            }
            TenantStrategy::Subdomain => match &tenancy.base_domain {
                Some(domain) => Strategy::Subdomain(format!(".{}", domain.to_ascii_lowercase())),
                None => {
                    return Err(InvalidSetting {
                        key: "tenancy.base_domain",
                        message:
                            "strategy \"subdomain\" needs the domain tenants are subdomains of"
                                .to_owned(),
                    });
                }
            },
            TenantStrategy::Path => Strategy::Path,
            TenantStrategy::Session => Strategy::Session,
        };
        Ok(Some(Self(Arc::new(Settings {
            strategy,
            exempt: exempt_paths(config),
            resolver,
        }))))
    }
}

/// `/actuator` (probes and metrics never name a tenant) and
/// `[tenancy] exempt_paths`.
fn exempt_paths(config: &AutumnConfig) -> ExemptPaths {
    ExemptPaths::new(
        std::iter::once("/actuator".to_owned()).chain(config.tenancy.exempt_paths.iter().cloned()),
    )
}

impl<S> Layer<S> for TenancyLayer {
    type Service = TenancyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TenancyService {
            inner,
            settings: self.0.clone(),
        }
    }
}

/// The service made by [`TenancyLayer`].
#[derive(Clone)]
pub(crate) struct TenancyService<S> {
    inner: S,
    settings: Arc<Settings>,
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
            let (id, session) = match source {
                Source::None => return inner.call(request).await,
                Source::Id(id) => (id, None),
                Source::Session(None) => (None, None),
                Source::Session(Some(session)) => {
                    match session.get::<String>(Tenant::SESSION_KEY).await {
                        Ok(id) => (id, Some(session)),
                        Err(error) => return Ok(error.into_response()),
                    }
                }
            };
            let tenant = match resolve(&settings, id).await {
                Ok(tenant) => tenant,
                Err(rejection) => return Ok(rejection.into_response()),
            };
            request.extensions_mut().insert(tenant);
            if let Some(session) = session {
                request.extensions_mut().insert(TenantFromSession(session));
            }
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

/// Strategy `"path"`, before routing: takes the first segment off the URI
/// (`/acme/orders?x` is routed as `/orders?x`) into a [`PathTenant`], and
/// keeps the URI the client sent as [`OriginalUri`] (which the idempotency
/// key is computed from). Exempt paths are left as they are.
pub(crate) fn strip_path_tenant(
    config: &AutumnConfig,
) -> impl FnMut(Request) -> Request + Clone + Send + Sync + 'static {
    let exempt = exempt_paths(config);
    move |mut request: Request| {
        if exempt.covers(request.uri().path()) {
            return request;
        }
        let original = request.uri().clone();
        let path = original.path();
        let rest = path.strip_prefix('/').unwrap_or(path);
        let (segment, below) = match rest.find('/') {
            Some(slash) => (&rest[..slash], &rest[slash..]),
            None => (rest, "/"),
        };
        if segment.is_empty() {
            request.extensions_mut().insert(PathTenant(None));
            return request;
        }
        let routed = match original.query() {
            Some(query) => format!("{below}?{query}"),
            None => below.to_owned(),
        };
        let mut parts = original.clone().into_parts();
        parts.path_and_query = routed.parse().ok();
        let Ok(uri) = http::Uri::from_parts(parts) else {
            // Cannot happen for a path cut from a valid one; such a request
            // names no tenant rather than being routed by its tenant segment.
            request.extensions_mut().insert(PathTenant(None));
            return request;
        };
        *request.uri_mut() = uri;
        request
            .extensions_mut()
            .insert(PathTenant(Some(segment.to_owned())));
        if request.extensions().get::<OriginalUri>().is_none() {
            request.extensions_mut().insert(OriginalUri(original));
        }
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(path: &str, exempt: &[&str]) -> Request {
        let mut config = AutumnConfig::default();
        config.tenancy.exempt_paths = exempt.iter().map(|p| (*p).to_owned()).collect();
        let request = Request::builder()
            .uri(path)
            .body(axum::body::Body::empty())
            .expect("a request");
        strip_path_tenant(&config)(request)
    }

    fn tenant_of(request: &Request) -> Option<Option<String>> {
        request
            .extensions()
            .get::<PathTenant>()
            .map(|PathTenant(id)| id.clone())
    }

    #[test]
    fn the_path_strategy_routes_below_the_first_segment() {
        let request = strip("/acme/orders/7?page=2", &[]);
        assert_eq!(request.uri(), "/orders/7?page=2");
        assert_eq!(tenant_of(&request), Some(Some("acme".to_owned())));
        let OriginalUri(original) = request.extensions().get::<OriginalUri>().expect("kept");
        assert_eq!(original, "/acme/orders/7?page=2");

        let request = strip("/acme", &[]);
        assert_eq!(request.uri(), "/");
        assert_eq!(tenant_of(&request), Some(Some("acme".to_owned())));

        let request = strip("/", &[]);
        assert_eq!(tenant_of(&request), Some(None), "no segment: no tenant");
    }

    #[test]
    fn exempt_paths_keep_their_path_and_name_no_tenant() {
        for (path, exempt) in [
            ("/actuator/health", &[][..]),
            ("/signup", &["/signup"][..]),
            ("/signup/confirm", &["/signup"][..]),
        ] {
            let request = strip(path, exempt);
            assert_eq!(request.uri(), path);
            assert_eq!(tenant_of(&request), None, "{path}");
        }
    }

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
