//! [`AutumnConfig::effective_settings`] and password redaction.

use std::fmt::Display;

use toml::Value;

use super::{
    AutumnConfig, DatabaseConfig, IdempotencyConfig, LogConfig, RedisConfig, SecurityConfig,
    ServerConfig, SessionConfig, Setting, Source, SubmitTokenConfig, TenancyConfig, TimeoutsConfig,
};

/// How an unset optional key is shown.
const UNSET: &str = "<unset>";

impl AutumnConfig {
    /// Every configuration key with its final value and the source that set it, in the order of
    /// `autumn.toml.example`, for logging at launch.
    ///
    /// Values are rendered as TOML literals (`"127.0.0.1"`, `3000`, `["/a"]`), unset optional
    /// keys as `<unset>`, and passwords in URLs are replaced by `***`.
    #[must_use]
    pub fn effective_settings(&self) -> Vec<Setting> {
        // Exhaustive destructuring: adding a field breaks the build here until it is listed.
        let Self {
            server,
            log,
            database,
            idempotency,
            security,
            session,
            tenancy,
            profile: _,
            provenance,
        } = self;
        let mut out = Leaves::default();

        let ServerConfig {
            host,
            port,
            timeouts,
        } = server;
        out.string("server.host", host);
        out.plain("server.port", port);
        let TimeoutsConfig { request_timeout_ms } = timeouts;
        out.optional(
            "server.timeouts.request_timeout_ms",
            request_timeout_ms.as_ref(),
        );

        let LogConfig { level } = log;
        out.string("log.level", level);

        let DatabaseConfig {
            url,
            pool_size,
            connect_timeout_ms,
        } = database;
        out.optional_string("database.url", url.as_deref());
        out.plain("database.pool_size", pool_size);
        out.plain("database.connect_timeout_ms", connect_timeout_ms);

        let IdempotencyConfig {
            enabled,
            backend,
            ttl_secs,
            in_flight_ttl_secs,
            allow_memory_in_production,
            max_body_bytes,
            redis,
        } = idempotency;
        out.plain("idempotency.enabled", enabled);
        out.string("idempotency.backend", backend.as_str());
        out.plain("idempotency.ttl_secs", ttl_secs);
        out.plain("idempotency.in_flight_ttl_secs", in_flight_ttl_secs);
        out.plain(
            "idempotency.allow_memory_in_production",
            allow_memory_in_production,
        );
        out.plain("idempotency.max_body_bytes", max_body_bytes);
        let RedisConfig { url, key_prefix } = redis;
        out.optional_string("idempotency.redis.url", url.as_deref());
        out.string("idempotency.redis.key_prefix", key_prefix);

        let SecurityConfig { submit_token } = security;
        let SubmitTokenConfig {
            enabled,
            field_name,
            ttl_secs,
            in_flight_ttl_secs,
            backend,
            exempt_paths,
            max_form_bytes,
            in_flight_wait_ms,
        } = submit_token;
        out.plain("security.submit_token.enabled", enabled);
        out.string("security.submit_token.field_name", field_name);
        out.plain("security.submit_token.ttl_secs", ttl_secs);
        out.plain(
            "security.submit_token.in_flight_ttl_secs",
            in_flight_ttl_secs,
        );
        out.optional_string(
            "security.submit_token.backend",
            backend.map(|backend| backend.as_str()),
        );
        out.strings("security.submit_token.exempt_paths", exempt_paths);
        out.plain("security.submit_token.max_form_bytes", max_form_bytes);
        out.plain("security.submit_token.in_flight_wait_ms", in_flight_wait_ms);

        let SessionConfig { cookie_name } = session;
        out.string("session.cookie_name", cookie_name);

        let TenancyConfig { enabled, header } = tenancy;
        out.plain("tenancy.enabled", enabled);
        out.string("tenancy.header", header);

        out.0
            .into_iter()
            .map(|(key, value)| Setting {
                source: provenance.0.get(key).cloned().unwrap_or(Source::Default),
                key: key.to_owned(),
                value,
            })
            .collect()
    }
}

/// `(key, rendered value)` pairs in order.
#[derive(Default)]
struct Leaves(Vec<(&'static str, String)>);

impl Leaves {
    fn plain(&mut self, key: &'static str, value: impl Display) {
        self.0.push((key, value.to_string()));
    }

    fn string(&mut self, key: &'static str, value: &str) {
        self.0.push((key, literal(value)));
    }

    fn optional(&mut self, key: &'static str, value: Option<impl Display>) {
        self.0.push((
            key,
            value.map_or_else(|| UNSET.to_owned(), |value| value.to_string()),
        ));
    }

    fn optional_string(&mut self, key: &'static str, value: Option<&str>) {
        self.0
            .push((key, value.map_or_else(|| UNSET.to_owned(), literal)));
    }

    fn strings(&mut self, key: &'static str, values: &[String]) {
        let array = values
            .iter()
            .map(|value| Value::String(redact(value)))
            .collect();
        self.0.push((key, Value::Array(array).to_string()));
    }
}

/// `value`, redacted, as a TOML string literal.
fn literal(value: &str) -> String {
    Value::String(redact(value)).to_string()
}

/// Replaces the passwords of any URLs in `text` with `***`: the password in the user info
/// (`redis://user:secret@host/0` becomes `redis://user:***@host/0`) and the values of
/// password-like query parameters (`?password=secret` becomes `?password=***`).
pub(crate) fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // A URL runs to the next whitespace or quote (it may be quoted inside a message).
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'))
            .unwrap_or(tail.len());
        let (url, after) = tail.split_at(end);
        redact_url(url, &mut out);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Redacts `url`, the part of a URL after `scheme://`, into `out`.
fn redact_url(url: &str, out: &mut String) {
    let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
    let (authority, path) = url.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, password)) if !password.is_empty() => {
                out.push_str(user);
                out.push_str(":***@");
                out.push_str(host);
            }
            _ => out.push_str(authority),
        },
        None => out.push_str(authority),
    }

    let (path, fragment) = match path.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (path, None),
    };
    match path.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            for (i, param) in query.split('&').enumerate() {
                if i > 0 {
                    out.push('&');
                }
                match param.split_once('=') {
                    Some((name, value)) if is_secret(name) && !value.is_empty() => {
                        out.push_str(name);
                        out.push_str("=***");
                    }
                    _ => out.push_str(param),
                }
            }
        }
        None => out.push_str(path),
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
}

fn is_secret(name: &str) -> bool {
    const SECRETS: &[&str] = &[
        "password",
        "passwd",
        "pass",
        "pwd",
        "sslpassword",
        "secret",
        "token",
    ];
    SECRETS
        .iter()
        .any(|secret| name.eq_ignore_ascii_case(secret))
}
