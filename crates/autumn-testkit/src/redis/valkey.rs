//! Valkey for the tests: private `valkey-server` children (Valkey 8 or
//! later), found through `VALKEY_SERVER` or on PATH. `cargo xtask services`
//! installs one. A missing or older server fails the test saying how to
//! install it: a Valkey test never passes without Valkey.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{ClientCerts, RedisServer};
use crate::tls::TestCa;

/// The variable naming the `valkey-server` program to use, when it is not
/// on PATH.
pub const VALKEY_SERVER_VAR: &str = "VALKEY_SERVER";

const HOW_TO_INSTALL: &str = "run `cargo xtask services` (it installs Debian's Valkey, built \
    with TLS, and puts valkey-server on PATH), or set VALKEY_SERVER to a valkey-server of \
    version 8 or later built with TLS";

/// The `valkey-server` program and its version (`9.1.2`). Panics saying how
/// to install it when there is none, or when it is older than 8.
#[track_caller]
pub fn valkey_server() -> (PathBuf, String) {
    let program = std::env::var_os(VALKEY_SERVER_VAR)
        .map_or_else(|| PathBuf::from("valkey-server"), PathBuf::from);
    let output = Command::new(&program)
        .arg("--version")
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run {} ({error}): Valkey is not installed; {HOW_TO_INSTALL}",
                program.display()
            )
        });
    let text = String::from_utf8_lossy(&output.stdout);
    // "Valkey server v=9.1.2 sha=... malloc=... bits=64 build=..."
    let version = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .filter(|_| text.starts_with("Valkey"))
        .unwrap_or_else(|| {
            panic!(
                "{} --version answered {:?}, not a Valkey server; {HOW_TO_INSTALL}",
                program.display(),
                text.trim()
            )
        })
        .to_owned();
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|major| major.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 8,
        "{} is Valkey {version}; the tests need 8 or later: {HOW_TO_INSTALL}",
        program.display()
    );
    (program, version)
}

/// Whether the server at `program` was built with TLS: it links OpenSSL
/// (a build without it has no `SSL_CTX_new` anywhere in its file). Answers
/// before a server is started, so a missing TLS build is named as such
/// instead of as a server that never came up.
pub fn speaks_tls(program: &Path) -> bool {
    let path = if program.components().count() > 1 {
        Some(program.to_owned())
    } else {
        std::env::var_os("PATH").and_then(|dirs| {
            std::env::split_paths(&dirs)
                .map(|dir| dir.join(program))
                .find(|candidate| candidate.is_file())
        })
    };
    path.and_then(|path| std::fs::read(path).ok())
        .is_some_and(|bytes| bytes.windows(11).any(|window| window == b"SSL_CTX_new"))
}

/// A `valkey-server` of the test's own on a free loopback port, killed on
/// drop. Everything a [`RedisServer`] does, it does (stop, start, url).
pub struct ValkeyServer {
    server: RedisServer,
    version: String,
}

impl ValkeyServer {
    /// Starts one that keeps nothing across a restart. Panics saying how to
    /// install Valkey when it is missing.
    #[track_caller]
    pub fn new() -> Self {
        let (program, version) = valkey_server();
        Self {
            server: RedisServer::with_program(program),
            version,
        }
    }

    /// A TLS-only one, as [`RedisServer::with_tls`] starts: its plaintext
    /// port is off, its certificate is signed by `ca` for `localhost`,
    /// `127.0.0.1` and `::1`, and it asks clients for a certificate or not.
    /// Reach it at [`url`](RedisServer::url), `rediss://localhost:{port}`.
    #[track_caller]
    pub fn with_tls(ca: &TestCa, clients: ClientCerts) -> Self {
        let (program, version) = valkey_server();
        assert!(
            speaks_tls(&program),
            "{} (Valkey {version}) was built without TLS; {HOW_TO_INSTALL}",
            program.display()
        );
        Self {
            server: RedisServer::with_program_and_tls(program, ca, clients),
            version,
        }
    }

    /// Its version, as it reports it (`9.1.2`).
    pub fn version(&self) -> &str {
        &self.version
    }
}

impl Default for ValkeyServer {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for ValkeyServer {
    type Target = RedisServer;

    fn deref(&self) -> &RedisServer {
        &self.server
    }
}

impl DerefMut for ValkeyServer {
    fn deref_mut(&mut self) -> &mut RedisServer {
        &mut self.server
    }
}
