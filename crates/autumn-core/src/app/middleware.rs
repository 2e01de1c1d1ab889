//! The usual HTTP middleware, as `autumn.toml` describes it: static files
//! (`[static]`), CORS (`[cors]`) and compression (`[compression]`), all
//! from tower-http, and the security headers (`[security.headers]`, made
//! by `crate::security_headers`), which the request log sets.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue, Method};
use tower::util::{BoxCloneSyncService, MapResponseLayer};
use tower::{Layer as _, Service, ServiceBuilder};
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::services::ServeDir;

use super::compress::CompressWhenAskedLayer;
use super::error::LaunchError;
use crate::config::AutumnConfig;
use crate::error_pages::ErrorPagesLayer;
use crate::telemetry::RequestLogLayer;
use crate::telemetry::metrics::{HttpMetrics, HttpMetricsLayer, RouteLabelLayer};

/// Serves `app` (the routes inside the framework's request layers) with
/// the middleware around it, as one router: the static files beside the app
/// (with error pages of their own, so a missing file is answered like any
/// 404, but none of the session, tenancy or guard layers a file does not
/// need), then, outside the error pages so every answer gets them, CORS,
/// compression (so that everything sent is compressed), the request id and
/// access log, which also sets the security headers as the response leaves,
/// and, outermost, the request metrics, so that they count every request
/// with the status it leaves with. The static files are labelled for them
/// as one route, `{mount}/{*path}`.
///
/// One typed tower stack, boxed once: layered on a `Router` one by one,
/// each layer would be boxed, and every request would clone each boxed
/// layer together with everything beneath it.
pub(super) fn install<S>(
    config: &AutumnConfig,
    app: S,
    error_pages: &ErrorPagesLayer,
    http: &Arc<HttpMetrics>,
) -> Result<AppService, LaunchError>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    let stack = |config: &AutumnConfig| -> Result<_, LaunchError> {
        let compression = config
            .compression
            .enabled
            .then(CompressWhenAskedLayer::default);
        Ok(ServiceBuilder::new()
            .layer(HttpMetricsLayer::new(Arc::clone(http)).counting(config.actuator.enabled))
            .layer(
                RequestLogLayer::new(config.log.access_log, super::client_of)
                    .with_response_headers(crate::security_headers::from_config(config)?)
                    // Validation refused `enabled` in a build without export.
                    .traced(config.telemetry.otlp.enabled),
            )
            .option_layer(compression)
            .option_layer(
                cors_layer(config)?
                    .map(|cors| (MapResponseLayer::new(IntoResponse::into_response), cors)),
            ))
    };
    let Some(dir) = &config.static_files.dir else {
        return Ok(AppService::new(stack(config)?.service(app)));
    };
    if !Path::new(dir).is_dir() {
        return Err(LaunchError::InvalidSetting {
            key: "static.dir",
            message: format!("{dir:?} is not a directory"),
        });
    }
    let mount = config.static_files.mount.trim_end_matches('/');
    let label = RouteLabelLayer::fixed(http.route(&format!("{mount}/{{*path}}")));
    let router = Router::new()
        .nest_service(mount, error_pages.layer(label.layer(ServeDir::new(dir))))
        .fallback_service(app)
        .with_state(());
    Ok(AppService::new(stack(config)?.service(router)))
}

/// The whole app as one service: what the server calls for each request.
pub(crate) type AppService = BoxCloneSyncService<Request, Response, Infallible>;

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

fn header_value(key: &'static str, value: &str) -> Result<HeaderValue, LaunchError> {
    HeaderValue::try_from(value).map_err(|error| LaunchError::InvalidSetting {
        key,
        message: format!("{value:?}: {error}"),
    })
}
