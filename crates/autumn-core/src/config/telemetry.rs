//! `[telemetry]`: traces exported over OTLP/HTTP (`[telemetry.otlp]`).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{AutumnConfig, ConfigError};

/// `[telemetry]`: what the app reports beyond its log.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TelemetryConfig {
    /// `[telemetry.otlp]`: spans exported to an OpenTelemetry collector.
    pub otlp: OtlpConfig,
}

/// `[telemetry.otlp]`: the spans of requests and jobs, exported over
/// OTLP/HTTP (protobuf) to a collector. Off by default; needs the `otlp`
/// feature.
///
/// While it is on, a request's span joins the trace its caller names in
/// `traceparent`, each job row keeps the trace context of the span that
/// queued it, and the job's span links to that context.
///
/// ```
/// use autumn_core::config::AutumnConfig;
///
/// let config = AutumnConfig::from_toml_str(
///     "[telemetry.otlp]\nendpoint = \"http://127.0.0.1:4318/v1/traces\"\n",
/// )?;
/// assert!(!config.telemetry.otlp.enabled, "off until enabled");
/// assert_eq!(config.telemetry.otlp.timeout_ms, 10_000);
/// # Ok::<(), autumn_core::config::ConfigError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct OtlpConfig {
    /// Whether spans are exported.
    pub enabled: bool,
    /// The collector's traces URL, `http://` or `https://`, path included
    /// (`http://127.0.0.1:4318/v1/traces`). Required when enabled.
    pub endpoint: Option<String>,
    /// The `service.name` of every span; unset: the binary's name, or
    /// `autumn-app` when it has none.
    pub service_name: Option<String>,
    /// Milliseconds one export may take before it is given up (its spans
    /// dropped, and a warning logged).
    pub timeout_ms: u64,
    /// Headers sent with every export, such as a collector's API key. The
    /// values are credentials: never logged, shown as `(set)` in the
    /// effective settings; set them from `AUTUMN_TELEMETRY__OTLP__HEADERS`
    /// (an inline table, `{ "x-api-key" = "..." }`) rather than a file.
    pub headers: BTreeMap<String, String>,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            endpoint: None,
            service_name: None,
            timeout_ms: 10_000,
            headers: BTreeMap::new(),
        }
    }
}

/// The header values are credentials.
impl std::fmt::Debug for OtlpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpConfig")
            .field("enabled", &self.enabled)
            .field("endpoint", &self.endpoint)
            .field("service_name", &self.service_name)
            .field("timeout_ms", &self.timeout_ms)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl OtlpConfig {
    /// The `service.name` spans carry: [`service_name`](Self::service_name),
    /// else the running binary's file name, else `autumn-app`.
    #[must_use]
    pub fn service_name(&self) -> String {
        if let Some(name) = self.service_name.as_deref().filter(|name| !name.is_empty()) {
            return name.to_owned();
        }
        std::env::current_exe()
            .ok()
            .and_then(|exe| {
                exe.file_stem()
                    .map(|stem| stem.to_string_lossy().into_owned())
            })
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "autumn-app".to_owned())
    }

    /// The endpoint as a URI, when it is one an exporter can post to:
    /// `http` or `https`, with a host.
    pub(crate) fn endpoint_uri(&self) -> Option<http::Uri> {
        let uri: http::Uri = self.endpoint.as_deref()?.trim().parse().ok()?;
        let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
        (scheme_ok && uri.host().is_some_and(|host| !host.is_empty())).then_some(uri)
    }
}

impl AutumnConfig {
    /// `[telemetry.otlp]` keys that cannot work while it is enabled: no
    /// build support, no usable endpoint, a zero timeout, a header that
    /// cannot be sent.
    pub(super) fn check_telemetry(&self) -> Result<(), ConfigError> {
        let otlp = &self.telemetry.otlp;
        if !otlp.enabled {
            return Ok(());
        }
        let fail = |key: &str, message: String| ConfigError::InvalidValue {
            key: key.to_owned(),
            origin: self.source(key),
            message,
        };
        if !cfg!(feature = "otlp") {
            return Err(fail(
                "telemetry.otlp.enabled",
                "this build cannot export traces: turn on the `otlp` feature of autumn-web"
                    .to_owned(),
            ));
        }
        if otlp.endpoint.is_none() {
            return Err(fail(
                "telemetry.otlp.endpoint",
                "is missing: telemetry.otlp.enabled is true, and spans need a collector to go to, like \"http://127.0.0.1:4318/v1/traces\"".to_owned(),
            ));
        }
        if otlp.endpoint_uri().is_none() {
            return Err(fail(
                "telemetry.otlp.endpoint",
                "must be an http:// or https:// URL with a host, like \"http://127.0.0.1:4318/v1/traces\"".to_owned(),
            ));
        }
        if otlp.timeout_ms == 0 {
            return Err(fail(
                "telemetry.otlp.timeout_ms",
                "must be at least 1: every export would be given up before it is sent".to_owned(),
            ));
        }
        for (name, value) in &otlp.headers {
            let key = "telemetry.otlp.headers";
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(fail(key, format!("{name:?} is not a header name")));
            }
            // The value is a credential: the message names the header only.
            if http::HeaderValue::from_str(value).is_err() {
                return Err(fail(
                    key,
                    format!(
                        "the value of {name:?} cannot be sent in a header (a control character or a non-ASCII byte)"
                    ),
                ));
            }
        }
        Ok(())
    }
}
