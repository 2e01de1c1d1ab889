//! The SMTP transport, from `[mail.smtp]`: lettre over rustls, STARTTLS
//! required unless told otherwise.

use std::time::Duration;

use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::OutgoingMail;
use super::transport::{MailTransport, SendError, SendFuture};
use crate::config::{SmtpConfig, SmtpTls};

/// Sends through an SMTP relay.
#[derive(Clone)]
pub(crate) struct SmtpTransport {
    inner: AsyncSmtpTransport<Tokio1Executor>,
}

impl std::fmt::Debug for SmtpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpTransport").finish_non_exhaustive()
    }
}

/// A `[mail.smtp]` key that cannot work, and why.
#[derive(Debug)]
pub(crate) struct BadSetting {
    pub(crate) key: &'static str,
    pub(crate) message: String,
}

fn bad(key: &'static str, message: impl Into<String>) -> BadSetting {
    BadSetting {
        key,
        message: message.into(),
    }
}

impl SmtpTransport {
    /// The transport `config` describes. Nothing is dialled: the first
    /// mail's job connects.
    pub(crate) fn from_config(config: &SmtpConfig) -> Result<Self, BadSetting> {
        let host = config
            .host
            .as_deref()
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .ok_or_else(|| {
                bad(
                    "mail.smtp.host",
                    "the SMTP transport needs the relay's host (or set mail.transport = \"file\")",
                )
            })?;
        let credentials = match (&config.username, &config.password) {
            (Some(user), Some(password)) => Some(Credentials::new(user.clone(), password.clone())),
            (None, None) => None,
            (Some(_), None) => {
                return Err(bad("mail.smtp.password", "a username needs a password"));
            }
            (None, Some(_)) => {
                return Err(bad("mail.smtp.username", "a password needs a username"));
            }
        };
        if config.tls == SmtpTls::None {
            // In clear, a password and every mail cross the network for
            // anyone on the path to read: only to a relay on this host.
            if credentials.is_some() {
                return Err(bad(
                    "mail.smtp.tls",
                    "\"none\" would send the password in clear: use \"starttls\" or \"tls\"",
                ));
            }
            if !is_loopback(host) {
                return Err(bad(
                    "mail.smtp.tls",
                    format!(
                        "\"none\" is for a relay on this host, not {host}: use \"starttls\" or \"tls\""
                    ),
                ));
            }
        }
        if config.timeout_secs == 0 {
            return Err(bad("mail.smtp.timeout_secs", "must be at least 1"));
        }
        let tls = match config.tls {
            SmtpTls::None => Tls::None,
            SmtpTls::Starttls => Tls::Required(tls_parameters(host, config)?),
            SmtpTls::Tls => Tls::Wrapper(tls_parameters(host, config)?),
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
            .port(config.port.unwrap_or_else(|| config.tls.default_port()))
            .timeout(Some(Duration::from_secs(config.timeout_secs)))
            .tls(tls);
        if let Some(credentials) = credentials {
            builder = builder.credentials(credentials);
        }
        Ok(Self {
            inner: builder.build(),
        })
    }
}

/// The relay's certificate checked against the public roots, or only
/// against `tls_ca_file`'s when one is given.
fn tls_parameters(host: &str, config: &SmtpConfig) -> Result<TlsParameters, BadSetting> {
    let mut parameters = TlsParameters::builder(host.to_owned());
    if let Some(file) = &config.tls_ca_file {
        let pem = std::fs::read(file).map_err(|error| {
            bad(
                "mail.smtp.tls_ca_file",
                format!("cannot read {file}: {error}"),
            )
        })?;
        let certificate = Certificate::from_pem(&pem).map_err(|error| {
            bad(
                "mail.smtp.tls_ca_file",
                format!("{file} holds no PEM certificate: {error}"),
            )
        })?;
        parameters = parameters
            .certificate_store(CertificateStore::None)
            .add_root_certificate(certificate);
    } else {
        parameters = parameters.certificate_store(CertificateStore::WebpkiRoots);
    }
    parameters
        .build_rustls()
        .map_err(|error| bad("mail.smtp.tls_ca_file", error.to_string()))
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl MailTransport for SmtpTransport {
    fn send<'a>(&'a self, mail: &'a OutgoingMail) -> SendFuture<'a> {
        Box::pin(async move {
            // Checked when queued: a row that no longer builds never will.
            let message = mail
                .to_lettre()
                .map_err(|error| SendError::Permanent(error.to_string()))?;
            match self.inner.send(message).await {
                Ok(_) => Ok(()),
                // 5xx: the relay refuses this mail for good.
                Err(error) if error.is_permanent() => Err(SendError::Permanent(format!(
                    "the relay refused the mail: {error}"
                ))),
                Err(error) => Err(SendError::Transient(format!("SMTP: {error}"))),
            }
        })
    }

    fn name(&self) -> &'static str {
        "smtp"
    }
}
