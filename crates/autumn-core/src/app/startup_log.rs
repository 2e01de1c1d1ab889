//! The startup report: what the app runs with, logged once as it launches.

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
}
