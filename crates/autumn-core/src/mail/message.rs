//! A mail as an app writes it ([`Mail`], [`Message`]) and as it is queued,
//! sent and recorded ([`OutgoingMail`]).

use std::str::FromStr;

use lettre::message::{Mailbox, MultiPart, header::ContentType};
use serde::{Deserialize, Serialize};

use super::MailError;

/// A kind of mail the app sends: its template. [`Mailer`](super::Mailer)
/// renders it when it is queued, so the queue row holds the finished
/// message and a later change to the template never changes a queued mail.
///
/// ```
/// use autumn_core::mail::{Mail, Message};
/// use maud::html;
///
/// struct Welcome {
///     email: String,
///     name: String,
/// }
///
/// impl Mail for Welcome {
///     const NAME: &'static str = "accounts.welcome";
///
///     fn message(&self) -> Message {
///         Message::to(&self.email)
///             .subject(format!("Welcome, {}", self.name))
///             .html(html! { h1 { "Welcome, " (self.name) "!" } })
///             .text(format!("Welcome, {}!", self.name))
///     }
///
///     // One welcome per address, however often it is queued.
///     fn unique_key(&self) -> Option<String> {
///         Some(self.email.clone())
///     }
/// }
/// ```
pub trait Mail: Send + Sync {
    /// The mail's kind, stable across releases: part of its `Message-ID`
    /// and shown by the preview page.
    const NAME: &'static str;

    /// The message: recipients, subject, and an HTML part, a text part or
    /// both.
    fn message(&self) -> Message;

    /// What makes this mail one of a kind beyond its request (the user it
    /// welcomes, the invoice it carries): a mail of the same
    /// [`NAME`](Self::NAME) and key is queued once, ever (while its row is
    /// kept). `None` (the default): once per request with an idempotency
    /// key or a submit token, since the request runs once.
    fn unique_key(&self) -> Option<String> {
        None
    }
}

/// A message to write: built with [`Message::to`] and its other methods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct Message {
    pub(crate) from: Option<String>,
    pub(crate) to: Vec<String>,
    pub(crate) cc: Vec<String>,
    pub(crate) reply_to: Option<String>,
    pub(crate) subject: String,
    pub(crate) html: Option<String>,
    pub(crate) text: Option<String>,
}

impl Message {
    /// A message to `address` (`name@example.com` or `Name
    /// <name@example.com>`).
    pub fn to(address: impl Into<String>) -> Self {
        Self {
            to: vec![address.into()],
            ..Self::default()
        }
    }

    /// One more recipient.
    pub fn and_to(mut self, address: impl Into<String>) -> Self {
        self.to.push(address.into());
        self
    }

    /// A copy to `address`.
    pub fn cc(mut self, address: impl Into<String>) -> Self {
        self.cc.push(address.into());
        self
    }

    /// Where replies go.
    pub fn reply_to(mut self, address: impl Into<String>) -> Self {
        self.reply_to = Some(address.into());
        self
    }

    /// The sender, instead of `[mail] from`.
    pub fn from(mut self, address: impl Into<String>) -> Self {
        self.from = Some(address.into());
        self
    }

    /// The subject line (one line).
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = subject.into();
        self
    }

    /// The HTML part, usually written with `html!`.
    pub fn html(mut self, html: maud::Markup) -> Self {
        self.html = Some(html.into_string());
        self
    }

    /// The plain-text part: what a mail program without HTML shows, and
    /// what spam filters like to see beside the HTML.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }
}

/// A mail ready to send: checked, with its `Message-ID`, as the queue row
/// holds it, the transport sends it and [`TestMailbox`](super::TestMailbox)
/// records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutgoingMail {
    pub(crate) name: String,
    pub(crate) message_id: String,
    pub(crate) from: String,
    pub(crate) to: Vec<String>,
    #[serde(default)]
    pub(crate) cc: Vec<String>,
    #[serde(default)]
    pub(crate) reply_to: Option<String>,
    pub(crate) subject: String,
    pub(crate) html: Option<String>,
    pub(crate) text: Option<String>,
    /// When it was queued, in milliseconds since the Unix epoch.
    pub(crate) queued_at: u64,
}

impl OutgoingMail {
    /// The [`Mail::NAME`] it was made from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its `Message-ID` header, angle brackets included: the same on every
    /// attempt to send it.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// The sender.
    pub fn from(&self) -> &str {
        &self.from
    }

    /// The recipients.
    pub fn to(&self) -> &[String] {
        &self.to
    }

    /// The copies.
    pub fn cc(&self) -> &[String] {
        &self.cc
    }

    /// The subject line.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The HTML part.
    pub fn html(&self) -> Option<&str> {
        self.html.as_deref()
    }

    /// The plain-text part.
    pub fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// When it was queued, in milliseconds since the Unix epoch.
    pub fn queued_at(&self) -> u64 {
        self.queued_at
    }

    /// Checks `message` and gives it `message_id`, sent from `from` unless
    /// it names its own sender.
    pub(crate) fn new(
        name: &str,
        message: Message,
        from: &str,
        message_id: String,
        queued_at: u64,
    ) -> Result<Self, MailError> {
        let Message {
            from: own_from,
            to,
            cc,
            reply_to,
            subject,
            html,
            text,
        } = message;
        let from = own_from.unwrap_or_else(|| from.to_owned());
        mailbox("from", &from)?;
        if to.is_empty() {
            return Err(MailError::NoRecipient);
        }
        for address in &to {
            mailbox("to", address)?;
        }
        for address in &cc {
            mailbox("cc", address)?;
        }
        if let Some(address) = &reply_to {
            mailbox("reply_to", address)?;
        }
        // A line break in a header would start a header of the reader's
        // choosing.
        if subject.contains(['\r', '\n']) {
            return Err(MailError::Subject);
        }
        if html.is_none() && text.is_none() {
            return Err(MailError::NoBody);
        }
        Ok(Self {
            name: name.to_owned(),
            message_id,
            from,
            to,
            cc,
            reply_to,
            subject,
            html,
            text,
            queued_at,
        })
    }

    /// The message as SMTP carries it: `multipart/alternative` when it has
    /// both parts.
    pub(crate) fn to_lettre(&self) -> Result<lettre::Message, MailError> {
        let mut builder = lettre::Message::builder()
            .message_id(Some(self.message_id.clone()))
            .from(mailbox("from", &self.from)?)
            .subject(self.subject.clone());
        for address in &self.to {
            builder = builder.to(mailbox("to", address)?);
        }
        for address in &self.cc {
            builder = builder.cc(mailbox("cc", address)?);
        }
        if let Some(address) = &self.reply_to {
            builder = builder.reply_to(mailbox("reply_to", address)?);
        }
        let built = match (&self.html, &self.text) {
            (Some(html), Some(text)) => builder.multipart(MultiPart::alternative_plain_html(
                text.clone(),
                html.clone(),
            )),
            (Some(html), None) => builder.header(ContentType::TEXT_HTML).body(html.clone()),
            (None, Some(text)) => builder.header(ContentType::TEXT_PLAIN).body(text.clone()),
            (None, None) => return Err(MailError::NoBody),
        };
        built.map_err(|error| MailError::Build(error.to_string()))
    }
}

/// `address` as a mailbox, or why it is none.
fn mailbox(field: &'static str, address: &str) -> Result<Mailbox, MailError> {
    Mailbox::from_str(address).map_err(|error| MailError::Address {
        field,
        address: address.to_owned(),
        reason: error.to_string(),
    })
}

/// The domain of `from`'s address, for the right-hand side of message ids.
pub(crate) fn domain_of(from: &str) -> Result<String, MailError> {
    let mailbox = mailbox("from", from)?;
    Ok(mailbox.email.domain().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outgoing(message: Message) -> Result<OutgoingMail, MailError> {
        OutgoingMail::new(
            "test",
            message,
            "Shop <shop@example.com>",
            "<id@example.com>".into(),
            0,
        )
    }

    #[test]
    fn a_bad_address_is_named_with_its_field() {
        let error = outgoing(Message::to("not an address").text("hi")).expect_err("refused");
        assert!(
            matches!(&error, MailError::Address { field: "to", address, .. } if address == "not an address"),
            "{error}"
        );
        let error = outgoing(Message::to("a@example.com").cc("@").text("hi")).expect_err("refused");
        assert!(matches!(error, MailError::Address { field: "cc", .. }));
    }

    #[test]
    fn a_line_break_in_the_subject_is_refused() {
        let error = outgoing(
            Message::to("a@example.com")
                .subject("Hi\r\nBcc: victim@example.com")
                .text("hi"),
        )
        .expect_err("refused");
        assert!(matches!(error, MailError::Subject));
    }

    #[test]
    fn a_mail_needs_a_recipient_and_a_body() {
        let error = outgoing(Message::default().subject("x").text("y")).expect_err("refused");
        assert!(matches!(error, MailError::NoRecipient));
        let error = outgoing(Message::to("a@example.com").subject("x")).expect_err("refused");
        assert!(matches!(error, MailError::NoBody));
    }

    #[test]
    fn both_parts_make_a_multipart_alternative_with_the_message_id() {
        let mail = outgoing(
            Message::to("Ann <ann@example.com>")
                .subject("Hello")
                .html(maud::html! { p { "Hi <Ann>" } })
                .text("Hi Ann"),
        )
        .expect("a valid mail");
        let formatted =
            String::from_utf8(mail.to_lettre().expect("built").formatted()).expect("ASCII headers");
        assert!(
            formatted.contains("Message-ID: <id@example.com>"),
            "{formatted}"
        );
        assert!(formatted.contains("multipart/alternative"), "{formatted}");
        assert!(formatted.contains("Hi &lt;Ann&gt;"), "{formatted}");
        assert!(
            formatted.contains("From: Shop <shop@example.com>"),
            "{formatted}"
        );
    }
}
