//! The one rustls crypto provider every TLS connection of the framework
//! uses: ring's, chosen here once.
//!
//! ring builds with nothing but a C compiler (aws-lc-rs, rustls' other
//! provider, needs CMake), which keeps `cargo build` of an app working on
//! a bare machine. rustls 0.23.48 deprecated ring's `default_provider` for
//! lacking post-quantum key exchange; it is still the provider we build
//! with, and this is the only place that says so.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// ring's provider with rustls' default suites and key exchange groups.
#[allow(deprecated)] // see the module docs: ring, deliberately
#[must_use]
pub fn ring_provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The process's provider when one is installed (by the app, or another
/// library), else ring's.
#[must_use]
pub fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default().map_or_else(|| Arc::new(ring_provider()), Arc::clone)
}

/// Makes ring the process's provider unless one is already installed:
/// rustls refuses to guess when a build enables more than one.
pub fn install_default_provider() {
    if CryptoProvider::get_default().is_none() {
        // Another thread may install one meanwhile: either is fine.
        let _ = ring_provider().install_default();
    }
}
