//! The usual HTTP middleware, as `autumn.toml` describes it: static files
//! (`[static]`), CORS (`[cors]`), security headers (`[security.headers]`) and
//! compression (`[compression]`), all from tower-http.

use std::path::Path;
use std::time::Duration;

use axum::Router;
use http::{HeaderName, HeaderValue, Method, header};
use tower::Layer as _;
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::services::ServeDir;
use tower_http::set_header::SetResponseHeaderLayer;

use super::launch::LaunchError;
use crate::config::AutumnConfig;
use crate::error_pages::ErrorPagesLayer;

/// `Strict-Transport-Security`: one year, this host only (a subdomain still
/// on plain HTTP is not locked out).
const HSTS: &str = "max-age=31536000";

/// Installs the middleware around `router`, which already has the error
/// pages: the static files beside the routes (with error pages of their own,
/// so a missing file is answered like any 404, but none of the session,
/// tenancy or guard layers a file does not need), then, outside the error
/// pages so every answer gets them, CORS, the security headers and,
/// outermost, compression, so that everything sent is compressed.
pub(super) fn install(
    config: &AutumnConfig,
    mut router: Router,
    error_pages: &ErrorPagesLayer,
) -> Result<Router, LaunchError> {
    if let Some(dir) = &config.static_files.dir {
        if !Path::new(dir).is_dir() {
            return Err(LaunchError::InvalidSetting {
                key: "static.dir",
                message: format!("{dir:?} is not a directory"),
            });
        }
        let mount = config.static_files.mount.trim_end_matches('/');
        router = router.nest_service(mount, error_pages.layer(ServeDir::new(dir)));
    }
    if let Some(cors) = cors_layer(config)? {
        router = router.layer(cors);
    }
    router = security_headers(config, router)?;
    if config.compression.enabled {
        router = router.layer(CompressionLayer::new());
    }
    Ok(router)
}

/// The CORS layer `[cors]` describes; none while no origin is allowed.
fn cors_layer(config: &AutumnConfig) -> Result<Option<CorsLayer>, LaunchError> {
    let settings = &config.cors;
    if settings.allowed_origins.is_empty() {
        return Ok(None);
    }
    let origins = match config.cors_origins()? {
        None => AllowOrigin::any(),
        Some(origins) => AllowOrigin::list(
            origins
                .iter()
                .map(|origin| header_value("cors.allowed_origins", origin.as_str()))
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let methods = settings
        .allowed_methods
        .iter()
        .map(|method| {
            Method::from_bytes(method.as_bytes()).map_err(|error| LaunchError::InvalidSetting {
                key: "cors.allowed_methods",
                message: format!("{method:?}: {error}"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let headers = settings
        .allowed_headers
        .iter()
        .map(|name| {
            HeaderName::try_from(name.as_str()).map_err(|error| LaunchError::InvalidSetting {
                key: "cors.allowed_headers",
                message: format!("{name:?}: {error}"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(
        CorsLayer::new()
            .allow_origin(origins)
            .allow_methods(methods)
            .allow_headers(headers)
            .max_age(Duration::from_secs(settings.max_age_secs)),
    ))
}

/// `[security.headers]`, each set only when the response has none, so a
/// handler that needs another policy for one page sets its own.
fn security_headers(config: &AutumnConfig, mut router: Router) -> Result<Router, LaunchError> {
    let settings = &config.security.headers;
    if !settings.enabled {
        return Ok(router);
    }
    let mut headers = vec![(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    )];
    if settings.hsts.unwrap_or(config.profile.is_production()) {
        headers.push((
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(HSTS),
        ));
    }
    // An empty value sends no header.
    for (key, name, value) in [
        (
            "security.headers.content_security_policy",
            header::CONTENT_SECURITY_POLICY,
            &settings.content_security_policy,
        ),
        (
            "security.headers.referrer_policy",
            header::REFERRER_POLICY,
            &settings.referrer_policy,
        ),
    ] {
        if !value.is_empty() {
            headers.push((name, header_value(key, value)?));
        }
    }
    for (name, value) in headers {
        router = router.layer(SetResponseHeaderLayer::if_not_present(name, value));
    }
    Ok(router)
}

fn header_value(key: &'static str, value: &str) -> Result<HeaderValue, LaunchError> {
    HeaderValue::try_from(value).map_err(|error| LaunchError::InvalidSetting {
        key,
        message: format!("{value:?}: {error}"),
    })
}
