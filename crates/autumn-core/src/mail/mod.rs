//! Mail, sent once: a [`Mail`] is rendered when a request queues it with
//! the [`Mailer`] extractor, written to the job queue in the mutation's
//! own transaction, and sent by the worker after the commit through the
//! transport `[mail]` names: SMTP (lettre, STARTTLS required by default),
//! or files listed at `/dev/mail` under the `dev` profile. Tests give the
//! app a [`TestMailbox`]. See the mail guide, `docs/mail.md`.
//!
//! Each mail's `Message-ID` is its job's unique key: a retried request
//! queues nothing new, and every attempt to send one mail carries the same
//! id. What stays at-least-once is the last step: a process that dies
//! after the relay accepted a mail and before its job was marked done
//! sends it again on the retry, with the same `Message-ID`.

mod delivery;
mod file;
mod launch;
mod mailer;
mod message;
mod preview;
mod smtp;
mod transport;

pub use delivery::{HOOK as JOB_NAME, QUEUE};
pub use mailer::Mailer;
pub use message::{Mail, Message, OutgoingMail};
pub use transport::{MailTransport, SendError, SendFuture, TestMailbox};

pub(crate) use launch::{MailSetup, mount};

/// Why a mail cannot be queued.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum MailError {
    /// An address does not parse.
    #[error("the {field} address `{address}` is not a mail address: {reason}")]
    Address {
        /// `from`, `to`, `cc` or `reply_to`.
        field: &'static str,
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No `to`.
    #[error("a mail needs at least one recipient")]
    NoRecipient,
    /// Neither an HTML nor a text part.
    #[error("a mail needs a body: an HTML part, a text part or both")]
    NoBody,
    /// A line break in the subject, which would start a header of its own.
    #[error("a mail's subject cannot hold a line break")]
    Subject,
    /// The message could not be put together.
    #[error("the mail cannot be built: {0}")]
    Build(String),
    /// The queue row could not be written.
    #[error("the mail cannot be queued: {0}")]
    Queue(String),
}
