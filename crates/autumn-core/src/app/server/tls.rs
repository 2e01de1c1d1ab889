//! HTTPS on the app's own port: `[server.tls]` read into a rustls server
//! config whose certificate can be swapped while the server runs.
//!
//! Certificates are renewed on disk (cert-manager, an ACME client) long
//! before they expire, and a restart to pick the new one up drops every
//! open connection. So the config resolves its certificate through
//! [`ReloadingCert`], and [`watch`] replaces it when the files change (or on
//! SIGHUP, which every server in the process answers by reloading its own
//! files). A renewal caught half-written does not parse: the certificate in
//! use stays, and the next check tries again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::config::ServerConfig;

/// A `[server.tls]` file that cannot be used: which key names it, and why.
#[derive(Debug, thiserror::Error)]
#[error("{key} ({path}) cannot be used: {reason}")]
pub(crate) struct TlsFileError {
    /// `server.tls.cert_file` or `server.tls.key_file`.
    pub(crate) key: &'static str,
    /// The file the key names.
    pub(crate) path: String,
    /// What is wrong with it.
    pub(crate) reason: String,
}

/// The server's TLS: the acceptor every connection goes through, and the
/// certificate behind it.
pub(crate) struct ServerTls {
    pub(crate) acceptor: TlsAcceptor,
    cert: Arc<ReloadingCert>,
    files: CertFiles,
    reload_interval: Option<Duration>,
}

impl ServerTls {
    /// Reads `[server.tls]`; `None` when it is off. ALPN offers HTTP/2 when
    /// `[server.http2] enabled`.
    pub(crate) fn load(config: &ServerConfig) -> Result<Option<Arc<Self>>, TlsFileError> {
        let (Some(cert_file), Some(key_file)) = (&config.tls.cert_file, &config.tls.key_file)
        else {
            return Ok(None);
        };
        let files = CertFiles {
            cert: PathBuf::from(cert_file),
            key: PathBuf::from(key_file),
        };
        let provider = crypto_provider();
        let cert = Arc::new(ReloadingCert {
            current: RwLock::new(Arc::new(files.load(&provider)?)),
        });
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            // rustls speaks nothing older than TLS 1.2, and only AEAD suites
            // with forward secrecy.
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|error| TlsFileError {
                key: "server.tls.cert_file",
                path: cert_file.clone(),
                reason: format!("no TLS version can be offered: {error}"),
            })?
            .with_no_client_auth()
            .with_cert_resolver(cert.clone());
        server.alpn_protocols = if config.http2.enabled {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Ok(Some(Arc::new(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            cert,
            files,
            reload_interval: match config.tls.reload_interval_ms {
                0 => None,
                millis => Some(Duration::from_millis(millis)),
            },
        })))
    }

    /// Reads the files again and serves what they hold from the next
    /// handshake on; on failure keeps the certificate in use.
    fn reload(&self) -> Result<(), TlsFileError> {
        let loaded = self.files.load(&crypto_provider())?;
        *self
            .cert
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(loaded);
        Ok(())
    }
}

/// Reloads the certificate whenever its files change (checked every
/// `server.tls.reload_interval_ms`) and on SIGHUP, until the returned
/// task is aborted.
///
/// Each server listens for SIGHUP on its own and reloads its own files, so
/// one signal reloads every server in the process, each from its files:
/// for a server whose files did not change, a reload serves what it served.
/// The listener is in place when this returns, not when the task first
/// runs: until a process handles SIGHUP, the signal ends it.
pub(crate) fn watch(tls: Arc<ServerTls>) -> tokio::task::JoinHandle<()> {
    #[cfg(unix)]
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(hangup) => Some(hangup),
        Err(error) => {
            tracing::warn!(target: "autumn::tls", %error, "cannot listen for SIGHUP: the certificate is reloaded only when server.tls.reload_interval_ms finds its files changed");
            None
        }
    };
    tokio::spawn(async move {
        let mut seen = tls.files.stamp();
        loop {
            let tick = async {
                match tls.reload_interval {
                    Some(every) => tokio::time::sleep(every).await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(unix)]
            let signalled = async {
                match hangup.as_mut() {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let signalled = std::future::pending::<()>();
            let forced = tokio::select! {
                () = tick => false,
                () = signalled => true,
            };
            let stamp = tls.files.stamp();
            if !forced && stamp == seen {
                continue;
            }
            match tls.reload() {
                Ok(()) => {
                    seen = stamp;
                    tracing::info!(
                        target: "autumn::tls",
                        cert_file = %tls.files.cert.display(),
                        "server.tls: certificate reloaded"
                    );
                }
                // Likely mid-renewal: the next check tries again.
                Err(error) => {
                    tracing::warn!(target: "autumn::tls", "{error}; still serving the certificate loaded before");
                }
            }
        }
    })
}

/// The certificate and key files.
struct CertFiles {
    cert: PathBuf,
    key: PathBuf,
}

/// What identifies a file's version: a renewal that writes in place changes
/// its time or length, one that renames a new file over it its inode.
type Stamp = Option<(SystemTime, u64, u64)>;

impl CertFiles {
    fn stamp(&self) -> [Stamp; 2] {
        [stamp_of(&self.cert), stamp_of(&self.key)]
    }

    fn load(&self, provider: &Arc<CryptoProvider>) -> Result<CertifiedKey, TlsFileError> {
        let cert_key = "server.tls.cert_file";
        let key_key = "server.tls.key_file";
        let cert_pem = read(cert_key, &self.cert)?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| {
                file_error(
                    cert_key,
                    &self.cert,
                    format!("not a PEM certificate file: {error}"),
                )
            })?;
        if chain.is_empty() {
            return Err(file_error(
                cert_key,
                &self.cert,
                "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned(),
            ));
        }
        let key_pem = read(key_key, &self.key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|error| {
            file_error(
                key_key,
                &self.key,
                format!("holds no usable PEM private key: {error}"),
            )
        })?;
        CertifiedKey::from_der(chain, key, provider).map_err(|error| {
            file_error(
                key_key,
                &self.key,
                format!(
                    "cannot be used with the certificate in {}: {error}",
                    self.cert.display()
                ),
            )
        })
    }
}

fn stamp_of(path: &Path) -> Stamp {
    let metadata = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&metadata);
    #[cfg(not(unix))]
    let inode = 0;
    Some((metadata.modified().ok()?, metadata.len(), inode))
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|error| file_error(key, path, format!("cannot read it: {error}")))
}

fn file_error(key: &'static str, path: &Path, reason: String) -> TlsFileError {
    TlsFileError {
        key,
        path: path.display().to_string(),
        reason,
    }
}

/// The process's rustls provider, ring unless one was installed.
fn crypto_provider() -> Arc<CryptoProvider> {
    autumn_base::tls::provider()
}

/// The certificate every handshake is given: whichever was loaded last.
#[derive(Debug)]
struct ReloadingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.current.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}
