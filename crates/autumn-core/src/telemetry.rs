//! Logging set up from `[log] level`, or `RUST_LOG` when it is set.

use tracing_subscriber::EnvFilter;

/// Installs the global `tracing` subscriber: `RUST_LOG` when set, else
/// `level` (an `EnvFilter` directive such as `info` or `autumn_core=debug`).
/// Does nothing if a subscriber is already installed.
pub fn init_tracing(level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let _already_installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .try_init()
        .is_err();
}
