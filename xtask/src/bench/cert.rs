//! The certificate the HTTPS and HTTP/2 rows are served with: a
//! self-signed P-256 pair for `localhost` and 127.0.0.1, made by the
//! `openssl` command for each run, in a directory under `target/` that is
//! removed with it. The load generators do not check it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A certificate and its key, removed on drop.
pub(crate) struct SelfSigned {
    dir: PathBuf,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

impl Drop for SelfSigned {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl SelfSigned {
    /// Makes a pair, valid for a day, in `ROOT/target/bench-tls-RUN_ID/`.
    pub(crate) fn make(root: &Path, run_id: &str) -> Result<Self, String> {
        let dir = root.join("target").join(format!("bench-tls-{run_id}"));
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let pair = Self {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            dir,
        };
        let output = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "-days",
                "1",
                "-keyout",
            ])
            .arg(&pair.key)
            .arg("-out")
            .arg(&pair.cert)
            .output()
            .map_err(|e| format!("cannot run openssl: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "openssl could not make the bench's certificate ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(pair)
    }

    /// What points a plain-axum twin at the pair (see `bench/src/tls.rs`).
    pub(crate) fn plain_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("TLS_CERT_FILE", self.cert.display().to_string()),
            ("TLS_KEY_FILE", self.key.display().to_string()),
        ]
    }

    /// What points Autumn at the pair: `[server.tls]`.
    pub(crate) fn autumn_env(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "AUTUMN_SERVER__TLS__CERT_FILE",
                self.cert.display().to_string(),
            ),
            (
                "AUTUMN_SERVER__TLS__KEY_FILE",
                self.key.display().to_string(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_is_made_in_pem_and_removed_with_it() {
        if !crate::on_path("openssl") {
            eprintln!("openssl is not installed: nothing to check");
            return;
        }
        let root = std::env::temp_dir().join(format!("xtask-cert-{}", std::process::id()));
        let pair = SelfSigned::make(&root, "t1").expect("openssl makes a pair");
        let cert = fs::read_to_string(&pair.cert).expect("the certificate");
        let key = fs::read_to_string(&pair.key).expect("the key");
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
        assert!(key.contains("PRIVATE KEY-----"), "a PEM key");
        let dir = pair.dir.clone();
        drop(pair);
        assert!(!dir.exists(), "removed on drop");
        let _ = fs::remove_dir_all(&root);
    }
}
