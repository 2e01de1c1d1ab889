//! [`AppBuilder::with_mail`] and [`AppBuilder::mail_transport`], and what
//! launch makes of them: the transport from `[mail]`, the job that sends,
//! and the preview pages.

use std::sync::Arc;

use axum::Router;

use super::file::FileTransport;
use super::mailer::MailSettings;
use super::smtp::SmtpTransport;
use super::transport::MailTransport;
use crate::AppBuilder;
use crate::config::{AutumnConfig, ConfigError, MailTransportKind};
use crate::jobs::CommitHooks;

/// What the app asked of its mailer.
#[derive(Default)]
pub(crate) struct MailSetup {
    /// The transport given in code, instead of `[mail]`'s.
    transport: Option<Arc<dyn MailTransport>>,
    /// The sender when `[mail] from` names none.
    from: Option<String>,
}

impl AppBuilder {
    /// Gives the app a mailer: the [`Mailer`](super::Mailer) extractor
    /// queues mail as jobs in the app database, and the worker sends each
    /// through the transport `[mail]` names (SMTP; files under the `dev`
    /// profile, memory under `test`). Launch fails, naming the key, when
    /// `[mail] from` (and [`mail_from`](Self::mail_from)) or `[mail.smtp]
    /// host` is missing or the app has no database.
    ///
    /// ```
    /// let app = autumn_core::app().with_mail();
    /// # let _ = app;
    /// ```
    pub fn with_mail(mut self) -> Self {
        self.mail.get_or_insert_with(MailSetup::default);
        self
    }

    /// Gives the app a mailer that sends through `transport` whatever
    /// `[mail] transport` says: a [`TestMailbox`](super::TestMailbox) in
    /// tests, or a transport of the app's own.
    ///
    /// ```
    /// use autumn_core::mail::TestMailbox;
    ///
    /// let mailbox = TestMailbox::new();
    /// let app = autumn_core::app().mail_transport(mailbox.clone());
    /// # let _ = app;
    /// ```
    pub fn mail_transport(mut self, transport: impl MailTransport) -> Self {
        self.mail.get_or_insert_with(MailSetup::default).transport = Some(Arc::new(transport));
        self
    }

    /// Gives the app a mailer (as [`with_mail`](Self::with_mail)) whose mail
    /// is sent from `address` unless `[mail] from` names another: the
    /// app's default sender, which each deployment may replace.
    ///
    /// ```
    /// let app = autumn_core::app().mail_from("Shop <no-reply@shop.example>");
    /// # let _ = app;
    /// ```
    pub fn mail_from(mut self, address: impl Into<String>) -> Self {
        self.mail.get_or_insert_with(MailSetup::default).from = Some(address.into());
        self
    }
}

/// The mailer, ready to mount.
pub(crate) struct Mounted {
    /// The job that sends.
    pub(crate) hooks: CommitHooks,
    /// What the [`Mailer`](super::Mailer) extractor reads.
    pub(crate) settings: MailSettings,
    /// `/dev/mail`, under the `dev` profile with the file transport.
    pub(crate) preview: Option<Router>,
}

/// The mailer `setup` and `config` describe.
pub(crate) fn mount(
    setup: MailSetup,
    config: &AutumnConfig,
    has_database: bool,
) -> Result<Mounted, ConfigError> {
    let invalid = |key: &str, message: String| ConfigError::InvalidValue {
        key: key.to_owned(),
        origin: config.source(key),
        message,
    };
    if !has_database {
        return Err(invalid(
            "database.url",
            "the mailer queues each mail as a job in the app database: set database.url".into(),
        ));
    }
    let from = config
        .mail
        .from
        .as_deref()
        .or(setup.from.as_deref())
        .ok_or_else(|| {
            invalid(
                "mail.from",
                "the mailer needs a sender, as `Name <name@example.com>` (or AppBuilder::mail_from)"
                    .into(),
            )
        })?;
    let settings =
        MailSettings::new(from).map_err(|error| invalid("mail.from", error.to_string()))?;
    let mut preview = None;
    let transport: Arc<dyn MailTransport> = match setup.transport {
        Some(transport) => transport,
        None => match config.mail.transport_for(&config.profile) {
            MailTransportKind::File => {
                let file = FileTransport::new(&config.mail.file.dir);
                // Other people's mail, in any profile but a developer's
                // own machine.
                if config.profile.name().eq_ignore_ascii_case("dev") {
                    preview = Some(super::preview::routes(file.dir().to_path_buf()));
                }
                Arc::new(file)
            }
            MailTransportKind::Memory => Arc::new(super::TestMailbox::new()),
            MailTransportKind::Smtp => Arc::new(
                SmtpTransport::from_config(&config.mail.smtp)
                    .map_err(|bad| invalid(bad.key, bad.message))?,
            ),
        },
    };
    tracing::info!(
        target: "autumn::mail",
        transport = transport.name(),
        preview = preview.as_ref().map(|_| super::preview::PATH),
        "mailer ready"
    );
    Ok(Mounted {
        hooks: super::delivery::hooks(transport),
        settings,
        preview,
    })
}
