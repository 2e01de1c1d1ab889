//! A certificate authority of the test's own, for servers and clients that
//! speak TLS (features `redis` and `postgres`).
//!
//! Every certificate is made at run time, in the test's process: no test
//! depends on certificate files kept in the repository (which expire, and
//! which every checkout would share) or on a command line tool being
//! installed. A [`TestCa`] signs server certificates for the names a test
//! asks for and one client certificate, and keeps all of them as PEM files
//! in a temporary directory of its own, removed when it is dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A certificate and its private key, as PEM files in the directory of the
/// [`TestCa`] that signed the certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8, ECDSA P-256; mode 0600).
    pub key: PathBuf,
}

/// A certificate authority of the test's own, with its certificate in a
/// file ([`ca_file`](Self::ca_file)) for clients to trust, a client
/// certificate it signed ([`client_cert`](Self::client_cert),
/// [`client_key`](Self::client_key)), and server certificates it signs on
/// request ([`server_cert`](Self::server_cert)).
///
/// Each `TestCa` has a key and a name of its own: a client that trusts
/// another one refuses this one's certificates as signed by an unknown
/// issuer (with one name for all, a client would find the issuer and then
/// report a bad signature instead).
pub struct TestCa {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    name: String,
    dir: tempfile::TempDir,
    ca_file: PathBuf,
    client: CertFiles,
    /// How many server certificates were made, for their file names.
    servers: AtomicUsize,
}

impl TestCa {
    /// A new CA (named `autumn test CA {random}`), its certificate written
    /// to [`ca_file`](Self::ca_file), and a client certificate it signed.
    ///
    /// # Panics
    ///
    /// When no key can be made or the files cannot be written.
    pub fn new() -> Self {
        let name = format!("autumn test CA {}", uuid::Uuid::new_v4().simple());
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name.as_str());
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().expect("CA key");
        let issuer = rcgen::CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        let dir = tempfile::Builder::new()
            .prefix("autumn-test-ca-")
            .tempdir()
            .expect("a directory for the test CA");
        let ca_file = dir.path().join("ca.pem");
        write(&ca_file, &issuer.pem(), 0o644);
        let mut ca = Self {
            issuer,
            name,
            dir,
            ca_file,
            client: CertFiles {
                cert: PathBuf::new(),
                key: PathBuf::new(),
            },
            servers: AtomicUsize::new(0),
        };
        ca.client = ca.sign(
            "client",
            Vec::new(),
            "autumn test client",
            vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth],
        );
        ca
    }

    /// The CA's name (its certificate's subject common name), unique to
    /// this `TestCa`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The file holding the CA's certificate (PEM): what a client trusts
    /// (`sslrootcert`, a CA file).
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// A server certificate signed by this CA for `names` (DNS names or IP
    /// addresses, as its subject alternative names; host names are checked
    /// against these only), usable for server and client authentication,
    /// written with its key as new files in [`dir`](Self::dir).
    ///
    /// # Panics
    ///
    /// When a name is neither a DNS name nor an IP address, or the files
    /// cannot be written.
    pub fn server_cert(&self, names: &[&str]) -> CertFiles {
        let n = self.servers.fetch_add(1, Ordering::Relaxed) + 1;
        self.sign(
            &format!("server-{n}"),
            names.iter().map(|&name| name.to_owned()).collect(),
            "autumn test server",
            vec![
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }

    /// The client certificate (PEM) signed by this CA.
    pub fn client_cert(&self) -> &Path {
        &self.client.cert
    }

    /// The client certificate's private key (PEM, PKCS#8; mode 0600).
    pub fn client_key(&self) -> &Path {
        &self.client.key
    }

    /// The directory the files are in, removed on drop (a test may put a
    /// broken file beside them).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Makes a key and a certificate signed by the CA, written as
    /// `{file}.key` and `{file}.pem`.
    fn sign(
        &self,
        file: &str,
        names: Vec<String>,
        common_name: &str,
        usages: Vec<rcgen::ExtendedKeyUsagePurpose>,
    ) -> CertFiles {
        let mut params = rcgen::CertificateParams::new(names).expect("certificate names");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        params.is_ca = rcgen::IsCa::ExplicitNoCa;
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = usages;
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        let files = CertFiles {
            cert: self.dir().join(format!("{file}.pem")),
            key: self.dir().join(format!("{file}.key")),
        };
        write(&files.cert, &cert.pem(), 0o644);
        // Servers refuse a key others may read.
        write(&files.key, &key.serialize_pem(), 0o600);
        files
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes a new file `path` with permissions `mode`.
fn write(path: &Path, contents: &str, mode: u32) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .and_then(|mut file| file.write_all(contents.as_bytes()))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
