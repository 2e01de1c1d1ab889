//! `[mail]`: how the mailer sends (SMTP, or files to preview), and as whom.

use serde::Deserialize;

use super::Profile;

/// `[mail]`: the mailer's transport and sender. Read only by an app that
/// calls `AppBuilder::with_mail`.
///
/// Unless [`transport`](Self::transport) says, the `dev` profile writes each
/// mail to a file under [`file.dir`](FileMailConfig::dir), the `test` profile
/// keeps it in memory (nothing leaves the machine either way), and every
/// other profile, staging included, sends through SMTP, which then needs
/// `mail.smtp.host`.
///
/// ```
/// use autumn_core::config::{AutumnConfig, MailTransportKind, Profile, SmtpTls};
///
/// let config = AutumnConfig::from_toml_str(
///     "[mail]\nfrom = \"Shop <shop@example.com>\"\n[mail.smtp]\nhost = \"smtp.example.com\"\n",
/// )?;
/// assert_eq!(config.mail.smtp.tls, SmtpTls::Starttls);
/// assert_eq!(config.mail.transport_for(&Profile::new("dev")), MailTransportKind::File);
/// assert_eq!(config.mail.transport_for(&Profile::new("test")), MailTransportKind::Memory);
/// assert_eq!(config.mail.transport_for(&Profile::new("staging")), MailTransportKind::Smtp);
/// # Ok::<(), autumn_core::config::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct MailConfig {
    /// `"smtp"`, `"file"` or `"memory"`; unset: `file` under the `dev`
    /// profile, `memory` under `test`, `smtp` under any other.
    pub transport: Option<MailTransportKind>,
    /// The sender of every mail that names none, as `name@example.com` or
    /// `Name <name@example.com>`. Its domain is also the right-hand side of
    /// each mail's `Message-ID`. Unset: the app's `AppBuilder::mail_from`;
    /// an app with a mailer needs one or the other.
    pub from: Option<String>,
    /// `[mail.smtp]`: the relay.
    pub smtp: SmtpConfig,
    /// `[mail.file]`: where the file transport writes.
    pub file: FileMailConfig,
}

impl MailConfig {
    /// The transport used under `profile`: [`transport`](Self::transport),
    /// or the profile's default.
    #[must_use]
    pub fn transport_for(&self, profile: &Profile) -> MailTransportKind {
        self.transport.unwrap_or_else(|| {
            let name = profile.name();
            if name.eq_ignore_ascii_case("dev") {
                MailTransportKind::File
            } else if name.eq_ignore_ascii_case("test") {
                MailTransportKind::Memory
            } else {
                MailTransportKind::Smtp
            }
        })
    }
}

/// Where mail goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum MailTransportKind {
    /// To an SMTP relay (`[mail.smtp]`).
    Smtp,
    /// To files under `[mail.file] dir`, listed at `/dev/mail` under the
    /// `dev` profile.
    File,
    /// Kept in the process, and gone with it: for test suites, which look
    /// at mail through a `TestMailbox` given in code.
    Memory,
}

impl MailTransportKind {
    /// The name as configured.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Smtp => "smtp",
            Self::File => "file",
            Self::Memory => "memory",
        }
    }
}

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SmtpTls {
    /// A plain connection that must turn into TLS with `STARTTLS` before
    /// anything is sent (port 587): a relay that does not offer it is
    /// refused, never spoken to in clear.
    #[default]
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
    /// No TLS (port 25): only to a relay on this host, and never with
    /// credentials, which would cross the network in clear.
    None,
}

impl SmtpTls {
    /// The name as configured.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starttls => "starttls",
            Self::Tls => "tls",
            Self::None => "none",
        }
    }

    /// The port used when `[mail.smtp] port` is unset.
    #[must_use]
    pub fn default_port(self) -> u16 {
        match self {
            Self::Starttls => 587,
            Self::Tls => 465,
            Self::None => 25,
        }
    }
}

/// `[mail.smtp]`: the relay mail is sent through.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SmtpConfig {
    /// The relay's host name (checked against its certificate).
    pub host: Option<String>,
    /// Its port; unset: 587, 465 or 25 by [`tls`](Self::tls).
    pub port: Option<u16>,
    /// `"starttls"` (the default), `"tls"` or `"none"`.
    pub tls: SmtpTls,
    /// The user to log in as; with [`password`](Self::password).
    pub username: Option<String>,
    /// The password (set it from `AUTUMN_MAIL__SMTP__PASSWORD`, not a
    /// file): never logged, shown as `(set)` in the effective settings.
    pub password: Option<String>,
    /// A PEM file of the certificate authorities that may sign the relay's
    /// certificate, instead of the public (Mozilla) roots: for a relay with
    /// a private CA.
    pub tls_ca_file: Option<String>,
    /// Seconds one SMTP command may take before the send fails (and its job
    /// is retried).
    pub timeout_secs: u64,
}

impl Default for SmtpConfig {
    fn default() -> Self {
        Self {
            host: None,
            port: None,
            tls: SmtpTls::default(),
            username: None,
            password: None,
            tls_ca_file: None,
            timeout_secs: 30,
        }
    }
}

// By hand, so the password never reaches a log line through `{:?}`.
impl std::fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "(set)"))
            .field("tls_ca_file", &self.tls_ca_file)
            .field("timeout_secs", &self.timeout_secs)
            .finish()
    }
}

/// `[mail.file]`: the file transport, for development.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct FileMailConfig {
    /// The folder each mail is written to (relative to the working
    /// directory), as `.eml` for a mail program and `.json` for the
    /// `/dev/mail` page.
    pub dir: String,
}

impl Default for FileMailConfig {
    fn default() -> Self {
        Self {
            dir: "tmp/mail".to_owned(),
        }
    }
}
