//! The paths tenancy leaves alone, and strategy `"path"`'s step before
//! routing: the first path segment taken off the URI as the tenant id.
//!
//! Apart from the layer because it runs elsewhere: outside the router, on
//! the path the client sent, while the tenancy layer runs inside it.

use autumn_base::ExemptPaths;
use axum::extract::{OriginalUri, Request};

use crate::config::AutumnConfig;

/// Request extension (strategy `"path"`): the first path segment, taken off
/// the URI before routing; absent on an exempt path.
///
/// Inserted by the path-tenant cut (`strip_path_tenant`), outside every
/// other layer, which also keeps the URI as sent in `OriginalUri`. Read by
/// the tenancy service alone, which resolves it to a [`Tenant`](super::Tenant): the
/// segment is gone from the URI by then.
#[derive(Debug, Clone)]
pub(crate) struct PathTenant(pub(super) Option<String>);

/// `/actuator` (probes and metrics never name a tenant), the OpenAPI
/// document's path while it is served, and `[tenancy] exempt_paths`.
pub(super) fn exempt_paths(config: &AutumnConfig) -> ExemptPaths {
    // The OpenAPI document describes every tenant's API: a client
    // generator fetches it before it knows of any tenant.
    let document = config
        .openapi
        .is_served(&config.profile)
        .then(|| config.openapi.path.clone());
    ExemptPaths::new(
        std::iter::once("/actuator".to_owned())
            .chain(document)
            .chain(config.tenancy.exempt_paths.iter().cloned()),
    )
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
}
