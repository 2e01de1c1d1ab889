//! The security headers `[security.headers]` asks for: `X-Content-Type-Options`,
//! HSTS (`Strict-Transport-Security`, on by default in production),
//! `Content-Security-Policy` and `Referrer-Policy`.
//!
//! Only the list is made here, once at launch. It is set on responses by the
//! request log layer, the outermost one, as each response leaves, and only
//! where the response has none of its own: a layer of its own would move
//! every response through one more future for a few header inserts. Kept
//! apart from the layer stack so the policy (which headers, which values)
//! is read and changed in one place.

use http::{HeaderValue, header};

use crate::config::{AutumnConfig, InvalidSetting};
use crate::telemetry::ResponseHeaders;

/// `Strict-Transport-Security`: one year, this host only (a subdomain still
/// on plain HTTP is not locked out).
const HSTS: &str = "max-age=31536000";

/// The security headers `[security.headers]` asks for, in the order they
/// are set; `None` when they are off.
///
/// # Errors
///
/// [`InvalidSetting`] when a configured policy is not a valid header value.
pub(crate) fn from_config(
    config: &AutumnConfig,
) -> Result<Option<ResponseHeaders>, InvalidSetting> {
    let settings = &config.security.headers;
    if !settings.enabled {
        return Ok(None);
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
    for (key, name, text) in [
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
        if !text.is_empty() {
            let value = HeaderValue::try_from(text.as_str()).map_err(|error| InvalidSetting {
                key,
                message: format!("{text:?}: {error}"),
            })?;
            headers.push((name, value));
        }
    }
    Ok(Some(ResponseHeaders::new(headers)))
}
