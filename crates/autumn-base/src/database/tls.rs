//! How every PostgreSQL connection is made: the URL's settings, and TLS as
//! its `sslmode` and `sslrootcert` ask, with libpq's meaning of each.
//!
//! tokio-postgres parses `sslmode` itself but knows only `disable`,
//! `prefer` and `require`, never checks a certificate, and refuses
//! `sslrootcert`. So both are taken out of the URL here, the rest goes to
//! tokio-postgres, and the TLS stream is made by rustls with a certificate
//! check chosen by the mode:
//!
//! | `sslmode` | TLS | certificate check |
//! | --- | --- | --- |
//! | `disable` | never | - |
//! | `allow` | only when the server refuses the connection without it | as `require` |
//! | `prefer` (default) | when the server accepts it; without TLS when the server has none or the handshake fails | as `require` |
//! | `require` | always | none, or the chain when `sslrootcert` is given |
//! | `verify-ca` | always | the chain, up to `sslrootcert` or the platform's roots |
//! | `verify-full` | always | the chain, and the host name against the certificate |
//!
//! `sslrootcert=system` means the platform's roots; as with libpq it makes
//! `verify-full` the default and refuses any weaker mode, since any name's
//! owner can get a certificate the platform trusts. Connections over a Unix
//! socket never use TLS (the server offers none there).

use std::sync::{Arc, OnceLock};

use futures_util::future::BoxFuture;
use rustls::RootCertStore;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_postgres::Socket;
use tokio_postgres::config::Host;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::DbError;

/// The values `sslmode` takes, as listed in refusals.
const MODES: &str = "disable, allow, prefer, require, verify-ca, verify-full";

/// What a `diesel::ConnectionError::BadConnection` message starts with
/// when TLS failed: the pool's errors carry only text, and
/// [`DbPool::get`](super::DbPool::get) turns such a one back into
/// [`DbError::Tls`].
pub(crate) const TLS_FAILURE: &str = "TLS: ";

/// The URL's `sslmode`: whether and how a connection uses TLS. The
/// default is [`Prefer`](Self::Prefer), as libpq's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// Without TLS, then with it when the server refuses that (no
    /// certificate check unless `sslrootcert` is given).
    Allow,
    /// TLS when the server offers it, else without; a failed handshake is
    /// tried again without TLS (no certificate check unless `sslrootcert`
    /// is given).
    Prefer,
    /// TLS or no connection; the certificate is not checked unless
    /// `sslrootcert` is given, which makes this [`VerifyCa`](Self::VerifyCa).
    Require,
    /// TLS, and the server's certificate chain checked against the roots.
    VerifyCa,
    /// TLS, the chain checked, and the certificate valid for the host name
    /// connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => Self::Disable,
            "allow" => Self::Allow,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode {other:?} is not a mode PostgreSQL knows (one of {MODES})"
                ));
            }
        })
    }
}

/// What a certificate must pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Nothing: the connection is encrypted but the server not
    /// authenticated (`require` without `sslrootcert`, as libpq).
    Nothing,
    /// A chain up to one of the roots.
    Chain,
    /// The chain, and the host name.
    ChainAndName,
}

/// How to reach a PostgreSQL server, TLS included: the one way every
/// PostgreSQL connection of the framework is made (the pool in both
/// statement-cache modes, the startup check and migrations, and the
/// connections tests make on a URL).
///
/// Made from a `postgres://` URL whose `sslmode` and `sslrootcert` mean
/// what libpq documents; see the module's table.
///
/// ```no_run
/// use autumn_base::database::{PgConnector, SslMode};
///
/// # async fn run() -> Result<(), autumn_base::database::DbError> {
/// let connector = PgConnector::from_url(
///     "postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem",
/// )?;
/// assert_eq!(connector.ssl_mode(), SslMode::VerifyFull);
/// let client = connector.connect().await?;
/// client.batch_execute("SELECT 1").await.ok();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgConnector {
    /// The URL's settings but the two taken out.
    config: tokio_postgres::Config,
    mode: SslMode,
    tls: Tls,
}

impl std::fmt::Debug for PgConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config holds the password: only the TLS settings are shown.
        f.debug_struct("PgConnector")
            .field("mode", &self.mode)
            .field("trust", &self.tls.trust)
            .finish_non_exhaustive()
    }
}

/// Why a connection could not be made.
pub(crate) enum ConnectFailure {
    /// The TLS settings or handshake: what exactly failed.
    Tls(String),
    /// The server answered and refused the connection (`pg_hba.conf`, the
    /// password, the database name).
    Refused(String),
    /// Anything else (the network, the protocol).
    Other(String),
}

impl From<ConnectFailure> for DbError {
    fn from(failure: ConnectFailure) -> Self {
        match failure {
            ConnectFailure::Tls(message) => DbError::Tls(message),
            ConnectFailure::Refused(message) | ConnectFailure::Other(message) => {
                DbError::Connect(message)
            }
        }
    }
}

impl From<ConnectFailure> for diesel::ConnectionError {
    fn from(failure: ConnectFailure) -> Self {
        diesel::ConnectionError::BadConnection(match failure {
            ConnectFailure::Tls(message) => format!("{TLS_FAILURE}{message}"),
            ConnectFailure::Refused(message) | ConnectFailure::Other(message) => message,
        })
    }
}

/// A connection made by a [`PgConnector`], before anything drives it.
pub(crate) type PgSocketConnection = tokio_postgres::Connection<Socket, TlsStream>;

impl PgConnector {
    /// Reads `url`'s settings, and loads the roots its `sslrootcert` (or
    /// verify mode) names. Nothing connects yet.
    ///
    /// # Errors
    ///
    /// [`DbError::Tls`] for an unknown `sslmode`, a mode `sslrootcert`
    /// does not allow, or roots that cannot be loaded (naming the file and
    /// why); [`DbError::InvalidUrl`] when the rest of the URL does not
    /// parse.
    pub fn from_url(url: &str) -> Result<Self, DbError> {
        let (rest, settings) = take_tls_settings(url).map_err(DbError::Tls)?;
        let config: tokio_postgres::Config = rest
            .parse()
            .map_err(|e: tokio_postgres::Error| DbError::InvalidUrl(with_sources(&e)))?;
        let system = settings.root_cert.as_deref() == Some("system");
        let mut mode = match settings.mode.as_deref() {
            Some(value) => SslMode::parse(value).map_err(DbError::Tls)?,
            None if system => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if system && mode != SslMode::VerifyFull {
            return Err(DbError::Tls(format!(
                "sslrootcert=system needs sslmode=verify-full, not {}: the platform trusts certificates anyone can get for a name they own",
                settings.mode.as_deref().unwrap_or_default()
            )));
        }
        // The server offers no TLS on a Unix socket; libpq does not ask.
        let hosts = config.get_hosts();
        if !hosts.is_empty() && hosts.iter().all(|host| !matches!(host, Host::Tcp(_))) {
            mode = SslMode::Disable;
        }
        let check = match (mode, &settings.root_cert) {
            (SslMode::Disable, _) => Check::Nothing,
            (SslMode::VerifyFull, _) => Check::ChainAndName,
            (SslMode::VerifyCa, _) | (_, Some(_)) => Check::Chain,
            (_, None) => Check::Nothing,
        };
        let trust = match (&settings.root_cert, check) {
            (_, Check::Nothing) => Trust::Nothing,
            (None, _) => Trust::Platform,
            (Some(system), _) if system == "system" => Trust::Platform,
            (Some(path), _) => Trust::File(path.clone()),
        };
        let tls = Tls::new(check, trust).map_err(DbError::Tls)?;
        Ok(Self { config, mode, tls })
    }

    /// The URL's `sslmode` (a connection over a Unix socket counts as
    /// [`SslMode::Disable`]).
    pub fn ssl_mode(&self) -> SslMode {
        self.mode
    }

    /// A connection, driven on the current tokio runtime until the client
    /// is dropped.
    ///
    /// # Errors
    ///
    /// [`DbError::Tls`] when TLS was needed and failed, saying which check
    /// (the certificate's chain, its host name, the server offering no
    /// TLS); [`DbError::Connect`] for any other failure.
    pub async fn connect(&self) -> Result<tokio_postgres::Client, DbError> {
        let (client, connection) = self.connect_raw().await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "a database connection ended");
            }
        });
        Ok(client)
    }

    /// A diesel-async connection, its connection errors reported to it.
    pub(crate) async fn establish(
        &self,
    ) -> diesel::ConnectionResult<diesel_async::AsyncPgConnection> {
        let (client, connection) = self.connect_raw().await?;
        diesel_async::AsyncPgConnection::try_from_client_and_connection(client, connection).await
    }

    /// A client and its connection, not yet driven, with libpq's fallbacks:
    /// `allow` tries TLS after the server refused the connection without
    /// it, `prefer` tries without TLS after a failed handshake.
    pub(crate) async fn connect_raw(
        &self,
    ) -> Result<(tokio_postgres::Client, PgSocketConnection), ConnectFailure> {
        use tokio_postgres::config::SslMode as Wire;
        match self.mode {
            SslMode::Disable => self.attempt(Wire::Disable).await,
            SslMode::Allow => match self.attempt(Wire::Disable).await {
                // The server answered, refusing (pg_hba.conf may ask for
                // TLS): as libpq, once more with it.
                Err(ConnectFailure::Refused(without)) => {
                    self.attempt(Wire::Require)
                        .await
                        .map_err(|with| match with {
                            ConnectFailure::Tls(tls) => ConnectFailure::Tls(format!(
                                "{tls} (tried after the server refused the connection without TLS: {without})"
                            )),
                            other => other,
                        })
                }
                done => done,
            },
            SslMode::Prefer => match self.attempt(Wire::Prefer).await {
                Err(ConnectFailure::Tls(tls)) => {
                    self.attempt(Wire::Disable).await.map_err(|failure| match failure {
                        ConnectFailure::Refused(plain)
                        | ConnectFailure::Other(plain)
                        | ConnectFailure::Tls(plain) => {
                            ConnectFailure::Other(format!(
                                "{plain} (tried without TLS after the TLS handshake failed: {tls})"
                            ))
                        }
                    })
                }
                done => done,
            },
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                self.attempt(Wire::Require).await
            }
        }
    }

    /// One connection attempt with tokio-postgres's own `mode`.
    async fn attempt(
        &self,
        mode: tokio_postgres::config::SslMode,
    ) -> Result<(tokio_postgres::Client, PgSocketConnection), ConnectFailure> {
        let mut config = self.config.clone();
        config.ssl_mode(mode);
        config.connect(self.tls.clone()).await.map_err(classify)
    }
}

/// The error tokio-postgres gave, sorted: a failed handshake carries our
/// [`HandshakeError`]; the server refusing TLS is tokio-postgres's own.
fn classify(error: tokio_postgres::Error) -> ConnectFailure {
    use std::error::Error as _;
    if let Some(handshake) = error
        .source()
        .and_then(|source| source.downcast_ref::<HandshakeError>())
    {
        return ConnectFailure::Tls(handshake.0.clone());
    }
    // tokio-postgres's TLS failures before a handshake: the server answered
    // the TLS request with "no", or there is no host name. Its error kinds
    // are private, so its text is what tells.
    if error.to_string() == "error performing TLS handshake" {
        let reason = error.source().map(ToString::to_string).unwrap_or_default();
        return ConnectFailure::Tls(if reason == "server does not support TLS" {
            "the server does not accept TLS connections (its ssl setting is off)".to_owned()
        } else {
            reason
        });
    }
    if error.as_db_error().is_some() {
        ConnectFailure::Refused(with_sources(&error))
    } else {
        ConnectFailure::Other(with_sources(&error))
    }
}

/// `error` and its sources, `: `-separated: tokio-postgres's own text says
/// only the kind ("db error", "error connecting to server", "invalid
/// connection string"), the reason is in the sources.
fn with_sources(error: &tokio_postgres::Error) -> String {
    use std::error::Error as _;
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `sslmode` and `sslrootcert`, percent-decoded, as the URL gave them.
#[derive(Debug, Default, PartialEq, Eq)]
struct TlsSettings {
    mode: Option<String>,
    root_cert: Option<String>,
}

/// `url` without its `sslmode` and `sslrootcert` parameters, and their
/// values (the last of each, as libpq takes them).
fn take_tls_settings(url: &str) -> Result<(String, TlsSettings), String> {
    let mut settings = TlsSettings::default();
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), settings));
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match percent_decode(key)?.as_str() {
            "sslmode" => settings.mode = Some(percent_decode(value)?),
            "sslrootcert" => settings.root_cert = Some(percent_decode(value)?),
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, settings))
}

/// `%XX` escapes decoded (a `sslrootcert` path may hold any byte).
fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        if byte == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| format!("{text:?} has a % not followed by two hex digits"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(byte);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} does not decode to UTF-8"))
}

/// Which roots a certificate chain must reach, for messages and loading.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Trust {
    Nothing,
    Platform,
    File(String),
}

impl std::fmt::Display for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Nothing => f.write_str("no roots"),
            Self::Platform => f.write_str("the platform's trusted roots"),
            Self::File(path) => write!(f, "the CA certificates in sslrootcert {path}"),
        }
    }
}

/// The platform's roots, loaded once per process.
fn platform_roots() -> Result<Arc<RootCertStore>, String> {
    static ROOTS: OnceLock<Result<Arc<RootCertStore>, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let loaded = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(loaded.certs);
            if added == 0 {
                let why = loaded
                    .errors
                    .first()
                    .map(|error| format!(" ({error})"))
                    .unwrap_or_default();
                return Err(format!(
                    "the platform's certificate store has no usable CA certificate{why}; give sslrootcert=/path/to/ca.pem"
                ));
            }
            Ok(Arc::new(roots))
        })
        .clone()
}

/// The CA certificates in the PEM file at `path`.
fn file_roots(path: &str) -> Result<Arc<RootCertStore>, String> {
    use rustls::pki_types::pem::PemObject as _;
    let unreadable = |why: &dyn std::fmt::Display| format!("cannot read sslrootcert {path}: {why}");
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| unreadable(&e))? {
        let cert = cert.map_err(|e| unreadable(&e))?;
        roots.add(cert).map_err(|e| {
            format!("sslrootcert {path} holds a certificate that is not a usable CA: {e}")
        })?;
    }
    if roots.is_empty() {
        return Err(format!(
            "sslrootcert {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        ));
    }
    Ok(Arc::new(roots))
}

/// The rustls side: one client configuration per connector, its
/// certificate check chosen by the mode.
#[derive(Clone)]
struct Tls {
    inner: MakeRustlsConnect,
    trust: Arc<Trust>,
}

impl Tls {
    fn new(check: Check, trust: Trust) -> Result<Self, String> {
        let roots = match &trust {
            Trust::Nothing => None,
            Trust::Platform => Some(platform_roots()?),
            Trust::File(path) => Some(file_roots(path)?),
        };
        // The provider is named rather than taken from the process: another
        // library may have installed a different one, or none.
        let provider = Arc::new(crate::tls::ring_provider());
        let verifier = Arc::new(Verifier {
            check,
            roots,
            provider: provider.clone(),
        });
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        // What libpq sends since PostgreSQL 17; servers that want it for
        // direct TLS (sslnegotiation=direct) refuse a client without it.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(Self {
            inner: MakeRustlsConnect::new(config),
            trust: Arc::new(trust),
        })
    }
}

/// The TLS stream of a PostgreSQL connection.
pub(crate) type TlsStream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

impl MakeTlsConnect<Socket> for Tls {
    type Stream = TlsStream;
    type TlsConnect = TlsConnectHost;
    type Error = std::convert::Infallible;

    fn make_tls_connect(&mut self, host: &str) -> Result<TlsConnectHost, Self::Error> {
        let inner = match MakeTlsConnect::<Socket>::make_tls_connect(&mut self.inner, host) {
            Ok(inner) => inner,
            Err(never) => match never {},
        };
        Ok(TlsConnectHost {
            inner,
            host: host.to_owned(),
            trust: self.trust.clone(),
        })
    }
}

/// A handshake with one host, its failure told in words.
pub(crate) struct TlsConnectHost {
    inner: <MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect,
    host: String,
    trust: Arc<Trust>,
}

impl TlsConnect<Socket> for TlsConnectHost {
    type Stream = TlsStream;
    type Error = HandshakeError;
    type Future = BoxFuture<'static, Result<TlsStream, HandshakeError>>;

    fn connect(self, stream: Socket) -> Self::Future {
        let Self { inner, host, trust } = self;
        Box::pin(async move {
            inner
                .connect(stream)
                .await
                .map_err(|error| HandshakeError(describe(&error, &host, &trust)))
        })
    }
}

/// A failed TLS handshake, said precisely (which check failed, for which
/// host).
#[derive(Debug)]
pub(crate) struct HandshakeError(String);

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HandshakeError {}

/// What went wrong in a handshake with `host`.
fn describe(error: &std::io::Error, host: &str, trust: &Trust) -> String {
    use rustls::CertificateError as Cert;
    let Some(tls) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return if error.kind() == std::io::ErrorKind::InvalidInput {
            format!("{host:?} is not a host name TLS can check ({error})")
        } else {
            format!("the connection failed during the handshake: {error}")
        };
    };
    let certificate = match tls {
        rustls::Error::InvalidCertificate(certificate) => certificate,
        rustls::Error::AlertReceived(alert) => {
            return format!("the server ended the handshake ({alert:?})");
        }
        other => return format!("the handshake failed: {other}"),
    };
    match certificate {
        Cert::NotValidForName => {
            format!("the server's certificate is not valid for host {host}")
        }
        Cert::NotValidForNameContext { presented, .. } => format!(
            "the server's certificate is not valid for host {host} (it names {})",
            if presented.is_empty() {
                "no host".to_owned()
            } else {
                presented
                    .iter()
                    .map(|name| plain_name(name))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        Cert::UnknownIssuer => format!(
            "the server's certificate is not signed by {trust} (verify-ca and verify-full check the chain)"
        ),
        Cert::Expired | Cert::ExpiredContext { .. } => {
            "the server's certificate has expired".to_owned()
        }
        Cert::NotValidYet | Cert::NotValidYetContext { .. } => {
            "the server's certificate is not valid yet".to_owned()
        }
        Cert::Revoked => "the server's certificate has been revoked".to_owned(),
        Cert::BadEncoding => "the server's certificate cannot be parsed".to_owned(),
        Cert::BadSignature => "the server's certificate chain has a bad signature".to_owned(),
        Cert::InvalidPurpose | Cert::InvalidPurposeContext { .. } => {
            "the server's certificate is not for server authentication".to_owned()
        }
        other => format!("the server's certificate was refused: {other}"),
    }
}

/// A name the certificate presents, as a person writes it: rustls gives
/// them in their debug form (`DnsName("db.internal")`, `IpAddress(10.0.0.5)`).
fn plain_name(presented: &str) -> &str {
    presented
        .strip_prefix("DnsName(\"")
        .and_then(|name| name.strip_suffix("\")"))
        .or_else(|| {
            presented
                .strip_prefix("IpAddress(")
                .and_then(|ip| ip.strip_suffix(')'))
        })
        .unwrap_or(presented)
}

/// The certificate check: none, the chain, or the chain and the name. The
/// handshake's own signatures are checked in every case, so the server
/// holds the key of the certificate it shows.
#[derive(Debug)]
struct Verifier {
    check: Check,
    /// `None` only with [`Check::Nothing`].
    roots: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(roots) = self
            .roots
            .as_deref()
            .filter(|_| self.check != Check::Nothing)
        else {
            return Ok(ServerCertVerified::assertion());
        };
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        if self.check == Check::ChainAndName {
            rustls::client::verify_server_name(&cert, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> Result<SslMode, String> {
        PgConnector::from_url(url)
            .map(|c| c.ssl_mode())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_the_url() {
        let (rest, settings) = take_tls_settings(
            "postgres://u:p@h/db?application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca%20x.pem",
        )
        .expect("parses");
        assert_eq!(rest, "postgres://u:p@h/db?application_name=x");
        assert_eq!(settings.mode.as_deref(), Some("verify-full"));
        assert_eq!(settings.root_cert.as_deref(), Some("/tmp/ca x.pem"));
        let (rest, _) = take_tls_settings("postgres://h/db?sslmode=require").expect("parses");
        assert_eq!(rest, "postgres://h/db");
        assert!(take_tls_settings("postgres://h/db?sslrootcert=%zz").is_err());
    }

    #[test]
    fn modes_are_libpqs() {
        assert_eq!(mode("postgres://h/db"), Ok(SslMode::Prefer));
        assert_eq!(
            mode("postgres://h/db?sslmode=disable"),
            Ok(SslMode::Disable)
        );
        assert_eq!(mode("postgres://h/db?sslmode=allow"), Ok(SslMode::Allow));
        assert_eq!(
            mode("postgres://h/db?sslmode=require"),
            Ok(SslMode::Require)
        );
        // A Unix socket never has TLS.
        assert_eq!(
            mode("postgres://%2Fvar%2Frun%2Fpostgresql/db?sslmode=require"),
            Ok(SslMode::Disable)
        );
    }

    #[test]
    fn presented_names_are_shown_plain() {
        assert_eq!(plain_name("DnsName(\"db.internal\")"), "db.internal");
        assert_eq!(plain_name("IpAddress(10.0.0.5)"), "10.0.0.5");
        assert_eq!(plain_name("DirectoryName"), "DirectoryName");
    }

    #[test]
    fn an_unknown_sslmode_is_refused_by_name() {
        let error = mode("postgres://h/db?sslmode=verify_full").expect_err("refused");
        assert!(
            error.contains("sslmode \"verify_full\"") && error.contains("verify-full"),
            "{error}"
        );
        assert!(error.starts_with("TLS: "), "{error}");
    }

    #[test]
    fn sslrootcert_system_wants_verify_full() {
        let error = mode("postgres://h/db?sslmode=require&sslrootcert=system").expect_err("weak");
        assert!(
            error.contains("sslrootcert=system needs sslmode=verify-full"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let error = mode("postgres://h/db?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem")
            .expect_err("no file");
        assert!(
            error.contains("cannot read sslrootcert /nonexistent/ca.pem"),
            "{error}"
        );
        // `require` with a CA file checks the chain, so it loads it too.
        assert!(mode("postgres://h/db?sslmode=require&sslrootcert=/nonexistent/ca.pem").is_err());
    }

    #[test]
    fn another_bad_parameter_is_named() {
        let error = mode("postgres://h/db?sslcert=/client.pem").expect_err("unsupported");
        assert_eq!(
            error,
            "invalid PostgreSQL URL: invalid connection string: unknown option `sslcert`"
        );
    }
}
