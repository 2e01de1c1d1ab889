//! The startup report: what the app runs with, logged once as it launches;
//! under a production profile, one warning per setting left unsafe.

use crate::actuator::Health;
use crate::config::{AutumnConfig, redact};

/// One info line each: the profile, the configuration files read and the
/// ones looked for but absent, the stores and the database in use
/// (passwords redacted).
pub(super) fn log_startup(config: &AutumnConfig, health: &Health) {
    tracing::info!(profile = %config.profile, "profile: {}", config.profile);
    let paths = |found: bool| {
        config
            .files()
            .iter()
            .filter(|file| file.found == found)
            .map(|file| file.path.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (read, absent) = (paths(true), paths(false));
    match (read.is_empty(), absent.is_empty()) {
        (true, true) => tracing::info!("configuration: given in code, no file read"),
        (true, false) => {
            tracing::info!(
                "configuration: no file read (looked for {absent}); defaults and environment"
            );
        }
        (false, true) => tracing::info!("configuration read from {read}"),
        (false, false) => tracing::info!("configuration read from {read} (not found: {absent})"),
    }
    let redis = config
        .idempotency
        .redis
        .url
        .as_deref()
        .map_or_else(String::new, |url| format!(" at {}", redact(url)));
    let stores: Vec<String> = health
        .components
        .iter()
        .filter(|component| component.name != "db")
        .map(|component| match component.backend {
            "redis" => format!("{}: redis{redis}", component.name),
            backend => format!("{}: {backend}", component.name),
        })
        .collect();
    if !stores.is_empty() {
        tracing::info!("stores: {}", stores.join("; "));
    }
    match &config.database.url {
        Some(url) => tracing::info!("database: {}", redact(url)),
        None => tracing::info!("database: none (database.url unset)"),
    }
    if config.profile.is_production() {
        for warning in unsafe_in_production(config) {
            tracing::warn!("{warning}");
        }
    }
}

/// What a production deployment should not run with, one sentence each,
/// naming the key to fix (the "Deploying safely" checklist of
/// docs/security.md). Warnings, not refusals: each can be right for one
/// deployment (a database on the same host, a proxy that terminates TLS in
/// front of a plain-HTTP LAN), and the operator decides.
pub(crate) fn unsafe_in_production(config: &AutumnConfig) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(url) = config.database.url.as_deref()
        && (url.starts_with("postgres://") || url.starts_with("postgresql://"))
        && !is_local(url)
        && !["require", "verify-ca", "verify-full"]
            .iter()
            .any(|mode| url.contains(&format!("sslmode={mode}")))
    {
        warnings.push(format!(
            "database.url ({}) does not require TLS: set sslmode=verify-full (and sslrootcert for a private CA), or passwords and recorded responses may cross the network in clear",
            redact(url)
        ));
    }
    if let Some(url) = config.idempotency.redis.url.as_deref()
        && !url.starts_with("rediss")
        && !url.starts_with("redis+unix")
        && !is_local(url)
    {
        warnings.push(format!(
            "idempotency.redis.url ({}) is plain TCP: use rediss:// (with idempotency.redis.tls_ca_file for a private CA), or keys, sessions and recorded responses cross the network in clear",
            redact(url)
        ));
    }
    if config.actuator.enabled
        && config.actuator.port.is_none()
        && config.actuator.metrics_on_app_port
    {
        warnings.push(
            "actuator.metrics_on_app_port = true: /actuator/metrics and /actuator/prometheus tell anyone who reaches the app's port its traffic; set actuator.port to serve them apart".to_owned(),
        );
    }
    if config.actuator.enabled
        && config.actuator.port.is_none()
        && config.idempotency.admin.serves_endpoint()
    {
        warnings.push(
            "idempotency.admin.token is set and actuator.port is not: key administration is served on the app's public port; set actuator.port to serve it apart".to_owned(),
        );
    }
    let everyone: Vec<&str> = config
        .server
        .trusted_proxies
        .iter()
        .filter(|entry| {
            crate::trusted_proxies::Network::parse(entry).is_some_and(|net| net.is_everything())
        })
        .map(String::as_str)
        .collect();
    if !everyone.is_empty() {
        warnings.push(format!(
            "server.trusted_proxies trusts every address ({}): any client can choose the address the app sees (ClientIp) by sending Forwarded or X-Forwarded-For, and none is held to server.max_connections_per_client; list only your proxies' addresses or networks",
            everyone.join(", ")
        ));
    }
    if config.session.enabled && !config.session.is_secure() {
        warnings.push(
            "session.secure = false: session cookies are sent over plain HTTP; remove it unless every client reaches the app over a private network".to_owned(),
        );
    }
    if config.security.headers.hsts == Some(false) {
        warnings.push(
            "security.headers.hsts = false: browsers are not told to keep to HTTPS; remove it unless TLS ends at a proxy that sends Strict-Transport-Security itself".to_owned(),
        );
    }
    if config.idempotency.enabled && !config.idempotency.quota.enabled {
        warnings.push(
            "idempotency.quota.enabled = false: one caller minting Idempotency-Keys or submit tokens can fill the store everyone shares; remove it, and raise idempotency.quota.max_records for a caller that needs more".to_owned(),
        );
    }
    warnings
}

/// Whether `url`'s host is this machine (loopback, or a Unix socket), where
/// plain TCP crosses no network.
fn is_local(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host_port.is_empty() || url.contains("host=/") {
        return true; // no host: a Unix socket
    }
    host_port.split(',').all(|host| {
        let host = host.strip_prefix('[').map_or_else(
            || host.split(':').next().unwrap_or_default(),
            |bracketed| bracketed.split(']').next().unwrap_or_default(),
        );
        host == "localhost" || host == "::1" || host.starts_with("127.")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warnings(toml: &str) -> Vec<String> {
        let mut config = AutumnConfig::from_toml_str(toml).expect("config");
        config.profile = crate::config::Profile::new("prod");
        unsafe_in_production(&config)
    }

    const SAFE: &str = "";

    #[test]
    fn a_safe_configuration_gets_no_warning() {
        assert_eq!(warnings(SAFE), Vec::<String>::new());
        let tls = format!(
            "{SAFE}[database]\nurl = \"postgres://app:pw@db.internal/app?sslmode=verify-full\"\n[idempotency.redis]\nurl = \"rediss://cache.internal:6380\"\n"
        );
        assert_eq!(warnings(&tls), Vec::<String>::new());
        let local = format!(
            "{SAFE}[database]\nurl = \"postgres://app:pw@127.0.0.1/app\"\n[idempotency.redis]\nurl = \"redis://localhost:6379\"\n"
        );
        assert_eq!(warnings(&local), Vec::<String>::new());
    }

    #[test]
    fn each_unsafe_setting_is_named_once_without_its_password() {
        let all = "[database]\nurl = \"postgres://app:pw@db.internal/app\"\n[idempotency.redis]\nurl = \"redis://:pw@cache.internal:6379\"\n[idempotency.admin]\ntoken = \"0123456789abcdef\"\n[session]\nsecure = false\n[security.headers]\nhsts = false\n[actuator]\nmetrics_on_app_port = true\n[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"0.0.0.0/0\", \"::/0\"]\n[idempotency.quota]\nenabled = false\n";
        let found = warnings(all);
        for key in [
            "database.url",
            "idempotency.redis.url",
            "actuator.metrics_on_app_port",
            "idempotency.admin.token",
            "session.secure",
            "security.headers.hsts",
            "server.trusted_proxies",
            "idempotency.quota.enabled",
        ] {
            assert_eq!(
                found.iter().filter(|w| w.starts_with(key)).count(),
                1,
                "{key}: {found:#?}"
            );
        }
        assert_eq!(found.len(), 8, "{found:#?}");
        assert!(found.iter().all(|w| !w.contains(":pw@")), "{found:#?}");
    }

    #[test]
    fn trusted_proxies_warn_only_for_a_network_of_every_address() {
        let proxies = |list: &str| warnings(&format!("[server]\ntrusted_proxies = [{list}]\n"));
        assert_eq!(
            proxies(r#""10.0.0.0/8", "fd00::/8", "192.0.2.7", "0.0.0.0/1""#),
            Vec::<String>::new()
        );
        for everything in [
            r#""0.0.0.0/0""#,
            r#""::/0""#,
            r#""10.0.0.0/8", "10.1.2.3/0""#,
        ] {
            let found = proxies(everything);
            assert_eq!(found.len(), 1, "{everything}: {found:#?}");
            assert!(
                found[0].starts_with("server.trusted_proxies trusts every address ("),
                "{found:#?}"
            );
            assert!(
                !found[0].contains("10.0.0.0/8"),
                "only the culprit: {found:#?}"
            );
        }
        let both = proxies(r#""0.0.0.0/0", "::/0""#);
        assert_eq!(both.len(), 1, "one line for the key: {both:#?}");
        assert!(both[0].contains("(0.0.0.0/0, ::/0)"), "{both:#?}");
    }

    #[test]
    fn hosts_on_this_machine_are_local() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://user:pw@localhost",
            "postgres://app@[::1]:5432/app",
            "postgres:///app?host=/var/run/postgresql",
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
        ] {
            assert!(is_local(url), "{url}");
        }
        for url in [
            "redis://cache.internal:6379",
            "postgres://app@10.0.0.5/app",
            "redis+cluster://127.0.0.1:7000,10.0.0.2:7001",
        ] {
            assert!(!is_local(url), "{url}");
        }
    }
}
