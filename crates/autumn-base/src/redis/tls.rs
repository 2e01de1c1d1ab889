//! [`RedisTls`]: the files a `rediss://` connection trusts and presents: a
//! private CA, and a client certificate with its key.
//!
//! The files are read and parsed when the connection is built, so a missing
//! or malformed one stops an app at startup naming the file, rather than
//! failing every connection attempt later.

use std::path::{Path, PathBuf};

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::error::{RedisError, TlsFile};

/// What a `rediss://` connection trusts and presents, beyond the URL.
///
/// Without a CA file, the server's certificate is verified against the
/// webpki roots (Mozilla's root program) compiled into the client, which is
/// what managed services with publicly trusted certificates need. With one,
/// only the certificates in that file are trusted. A client certificate and
/// its key are presented to a server that asks for one (`tls-auth-clients`).
///
/// ```
/// use autumn_base::redis::RedisTls;
///
/// let tls = RedisTls::new()
///     .with_ca_file("/etc/redis/ca.pem")
///     .with_client_cert("/etc/redis/client.pem", "/etc/redis/client.key");
/// assert!(!tls.is_empty());
/// assert!(RedisTls::new().is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisTls {
    /// PEM file of the CA certificate(s) to trust instead of the built-in
    /// roots.
    pub ca_file: Option<PathBuf>,
    /// PEM file of the client certificate (chain), presented when the
    /// server asks for one.
    pub cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key (PKCS#8, PKCS#1
    /// or SEC1).
    pub key_file: Option<PathBuf>,
}

impl RedisTls {
    /// No CA file, no client certificate: the built-in roots, no client
    /// authentication.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the CA certificate(s) in the PEM file at `path` instead of
    /// the built-in roots.
    #[must_use]
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Presents the certificate in the PEM file `cert` with the private key
    /// in the PEM file `key` when the server asks for a client certificate.
    #[must_use]
    pub fn with_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert_file = Some(cert.into());
        self.key_file = Some(key.into());
        self
    }

    /// Whether nothing is set (a `rediss://` URL alone then uses the
    /// built-in roots).
    pub fn is_empty(&self) -> bool {
        self.ca_file.is_none() && self.cert_file.is_none() && self.key_file.is_none()
    }

    /// Reads and checks the files, as the redis client takes them; `None`
    /// when nothing is set.
    pub(crate) fn load(&self) -> Result<Option<TlsCertificates>, RedisError> {
        if self.is_empty() {
            return Ok(None);
        }
        let root_cert = match &self.ca_file {
            Some(path) => Some(load_ca(path)?),
            None => None,
        };
        let client_tls = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Some(load_client(cert, key)?),
            (None, None) => None,
            (Some(_), None) => {
                return Err(RedisError::TlsIncomplete {
                    missing: TlsFile::Key,
                });
            }
            (None, Some(_)) => {
                return Err(RedisError::TlsIncomplete {
                    missing: TlsFile::Cert,
                });
            }
        };
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

/// Makes ring the process's rustls crypto provider unless one is already
/// installed: rustls refuses to guess when a build enables more than one.
pub(crate) fn ensure_crypto_provider() {
    crate::tls::install_default_provider();
}

fn read(file: TlsFile, path: &Path) -> Result<Vec<u8>, RedisError> {
    std::fs::read(path).map_err(|error| tls_file(file, path, format!("cannot read it: {error}")))
}

fn tls_file(file: TlsFile, path: &Path, reason: String) -> RedisError {
    RedisError::TlsFile {
        file,
        path: path.to_owned(),
        reason,
    }
}

/// The certificates of a PEM file: at least one, each parseable.
fn certificates(
    file: TlsFile,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, RedisError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| tls_file(file, path, format!("not a PEM certificate file: {error}")))?;
    if certificates.is_empty() {
        return Err(tls_file(
            file,
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    Ok(certificates)
}

/// The CA file's bytes, once every certificate in it parsed as a trust
/// anchor (the redis client parses them again when it connects).
fn load_ca(path: &Path) -> Result<Vec<u8>, RedisError> {
    let pem = read(TlsFile::Ca, path)?;
    let mut roots = RootCertStore::empty();
    for certificate in certificates(TlsFile::Ca, path, &pem)? {
        roots.add(certificate).map_err(|error| {
            tls_file(
                TlsFile::Ca,
                path,
                format!("not a usable CA certificate: {error}"),
            )
        })?;
    }
    Ok(pem)
}

/// The client certificate and key files' bytes, once the key parsed and
/// was found to belong to the certificate.
fn load_client(cert_path: &Path, key_path: &Path) -> Result<ClientTlsConfig, RedisError> {
    let cert_pem = read(TlsFile::Cert, cert_path)?;
    let chain = certificates(TlsFile::Cert, cert_path, &cert_pem)?;
    let key_pem = read(TlsFile::Key, key_path)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|error| {
        tls_file(
            TlsFile::Key,
            key_path,
            format!("holds no usable PEM private key: {error}"),
        )
    })?;
    ensure_crypto_provider();
    let provider = crate::tls::provider();
    CertifiedKey::from_der(chain, key, &provider).map_err(|error| {
        tls_file(
            TlsFile::Key,
            key_path,
            format!(
                "cannot be used with the certificate in {}: {error}",
                cert_path.display()
            ),
        )
    })?;
    Ok(ClientTlsConfig {
        client_cert: cert_pem,
        client_key: key_pem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_names_the_file_and_the_reason() {
        let error = RedisTls::new()
            .with_ca_file("/nonexistent/ca.pem")
            .load()
            .expect_err("no such file")
            .to_string();
        assert!(error.contains("CA file /nonexistent/ca.pem"), "{error}");
        assert!(error.contains("cannot read it"), "{error}");
    }

    #[test]
    fn a_file_without_a_certificate_is_refused() {
        let dir = std::env::temp_dir().join(format!("autumn-redis-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let path = dir.join("empty.pem");
        std::fs::write(&path, "not a certificate\n").expect("write");
        let error = RedisTls::new()
            .with_ca_file(&path)
            .load()
            .expect_err("no certificate")
            .to_string();
        assert!(error.contains("holds no PEM certificate"), "{error}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_certificate_without_its_key_is_incomplete() {
        let mut tls = RedisTls::new();
        tls.cert_file = Some("/etc/redis/client.pem".into());
        let error = tls.load().expect_err("no key").to_string();
        assert!(error.contains("no client key file"), "{error}");
    }
}
