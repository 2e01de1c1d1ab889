//! [`Mailer`]: queues mail as jobs, in the mutation's transaction or on
//! its own, each with a `Message-ID` that is also its job's unique key.

use std::sync::Arc;

use autumn_idempotency::database::IdempotencyConnection;
use axum::extract::FromRequestParts;
use http::request::Parts;
use sha2::{Digest, Sha256};

use super::delivery::HOOK;
use super::message::domain_of;
use super::{Mail, MailError, OutgoingMail};
use crate::AutumnError;
use crate::jobs::Jobs;

/// What every [`Mailer`] of an app shares: the sender of mail that names
/// none, and the domain of its message ids.
#[derive(Debug, Clone)]
pub(crate) struct MailSettings {
    pub(crate) from: Arc<str>,
    pub(crate) domain: Arc<str>,
}

impl MailSettings {
    pub(crate) fn new(from: &str) -> Result<Self, MailError> {
        Ok(Self {
            domain: domain_of(from)?.into(),
            from: from.into(),
        })
    }
}

/// Queues mail: each [`Mail`] is rendered, checked and written to the job
/// queue as one row, sent by the worker once the transaction that wrote it
/// committed, retried with backoff while the relay is down.
///
/// A mail is queued at most once: its row is unique by its `Message-ID`,
/// which comes from [`Mail::unique_key`] when it names one, else from the
/// request's idempotency key and the mail's place among the request's
/// mails. A retried request (its first attempt committed, its answer was
/// lost) so queues nothing new, and every attempt to send one mail carries
/// the same `Message-ID`.
///
/// ```no_run
/// use autumn_core::mail::{Mail, Mailer, Message};
/// use autumn_core::AutumnResult;
///
/// struct Receipt { email: String, total: i64 }
///
/// impl Mail for Receipt {
///     const NAME: &'static str = "orders.receipt";
///     fn message(&self) -> Message {
///         Message::to(&self.email)
///             .subject("Your receipt")
///             .text(format!("Total: {}", self.total))
///     }
/// }
///
/// async fn pay(mailer: Mailer) -> AutumnResult<&'static str> {
///     // Better inside the transaction that records the payment:
///     // `mailer.deliver_later_in(conn, &mail)`.
///     mailer.deliver_later(&Receipt { email: "ann@example.com".into(), total: 42 }).await?;
///     Ok("paid")
/// }
/// ```
#[derive(Clone)]
pub struct Mailer {
    jobs: Jobs,
    settings: MailSettings,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer")
            .field("from", &self.settings.from)
            .finish_non_exhaustive()
    }
}

impl Mailer {
    /// A mailer that queues through `jobs` (the request's, or one made for
    /// work outside a request), sending from `from` unless a message names
    /// its sender.
    ///
    /// # Errors
    ///
    /// [`MailError::Address`] when `from` is not a mail address.
    pub fn new(jobs: Jobs, from: &str) -> Result<Self, MailError> {
        Ok(Self {
            jobs,
            settings: MailSettings::new(from)?,
        })
    }

    /// `mail`, rendered and checked as [`deliver_later_in`](Self::deliver_later_in)
    /// would queue it, without queuing it: to show or test a template. Its
    /// `Message-ID` is the queued one's when the mail names a
    /// [`unique_key`](Mail::unique_key).
    ///
    /// # Errors
    ///
    /// [`MailError`] when an address does not parse, there is no recipient
    /// or no body, or the subject holds a line break.
    pub fn render<M: Mail>(&self, mail: &M) -> Result<OutgoingMail, MailError> {
        let message_id = self.message_id::<M>(mail.unique_key(), false);
        self.outgoing(mail, message_id)
    }

    /// Queues `mail` in the transaction `conn` is in: it is sent only if
    /// that transaction commits. Returns whether a row was written (`false`:
    /// this mail was queued already). Call [`committed`](Self::committed)
    /// after the commit to have it sent at once rather than at the worker's
    /// next poll (a repository's `tx` and `IdempotencyTx` do).
    ///
    /// # Errors
    ///
    /// As [`render`](Self::render), or [`MailError::Queue`] when the row
    /// cannot be written.
    pub async fn deliver_later_in<C, M>(&self, conn: &mut C, mail: &M) -> Result<bool, MailError>
    where
        C: IdempotencyConnection + ?Sized,
        M: Mail,
    {
        let (payload, message_id) = self.queued(mail)?;
        self.jobs
            .enqueue_hook_in(conn, HOOK, payload, message_id)
            .await
            .map_err(|error| MailError::Queue(error.to_string()))
    }

    /// Queues `mail` on a connection of its own, committed at once, and
    /// wakes the worker: for mail that follows no mutation of the app's (or
    /// comes after one).
    ///
    /// # Errors
    ///
    /// As [`deliver_later_in`](Self::deliver_later_in).
    pub async fn deliver_later<M: Mail>(&self, mail: &M) -> Result<bool, MailError> {
        let (payload, message_id) = self.queued(mail)?;
        self.jobs
            .enqueue_hook(HOOK, payload, message_id)
            .await
            .map_err(|error| MailError::Queue(error.to_string()))
    }

    /// Wakes this process's worker: call after the transaction that queued
    /// mail with [`deliver_later_in`](Self::deliver_later_in) committed.
    pub fn committed(&self) {
        self.jobs.committed();
    }

    /// The payload and unique key of `mail`'s row.
    fn queued<M: Mail>(&self, mail: &M) -> Result<(String, String), MailError> {
        let message_id = self.message_id::<M>(mail.unique_key(), true);
        let outgoing = self.outgoing(mail, message_id.clone())?;
        let payload = serde_json::to_string(&outgoing)
            .map_err(|error| MailError::Build(error.to_string()))?;
        Ok((payload, message_id))
    }

    fn outgoing<M: Mail>(&self, mail: &M, message_id: String) -> Result<OutgoingMail, MailError> {
        OutgoingMail::new(
            M::NAME,
            mail.message(),
            &self.settings.from,
            message_id,
            self.jobs.context().clock().now_millis(),
        )
    }

    /// `<digest@domain>`: the digest of what makes the mail unique (its own
    /// key, else the request's key and its place among the request's mails
    /// of its kind), or of random bytes for a mail that is its own. With
    /// `take_place`, the place is used up.
    fn message_id<M: Mail>(&self, unique: Option<String>, take_place: bool) -> String {
        let mut digest = Sha256::new();
        match (unique, self.jobs.context().idempotency_key()) {
            (Some(key), _) => {
                digest.update(b"key\0");
                digest.update(M::NAME.as_bytes());
                digest.update(b"\0");
                digest.update(key.as_bytes());
            }
            (None, Some(request)) => {
                let place = if take_place {
                    self.jobs.place(M::NAME)
                } else {
                    0
                };
                digest.update(b"request\0");
                digest.update(request.as_bytes());
                digest.update(b"\0");
                digest.update(M::NAME.as_bytes());
                digest.update(place.to_be_bytes());
            }
            (None, None) => {
                let mut bytes = [0u8; 16];
                // Without randomness every such mail would share one id;
                // the clock keeps them apart then.
                if getrandom::fill(&mut bytes).is_err() {
                    bytes[..8]
                        .copy_from_slice(&self.jobs.context().clock().now_millis().to_be_bytes());
                }
                digest.update(b"random\0");
                digest.update(bytes);
            }
        }
        let local = hex::encode(&digest.finalize()[..16]);
        format!("<{local}@{}>", self.settings.domain)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Mailer {
    type Rejection = AutumnError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Some(settings) = parts.extensions.get::<MailSettings>().cloned() else {
            return Err(AutumnError::internal(
                "Mailer needs the app's mailer: call AppBuilder::with_mail()",
            ));
        };
        let jobs = Jobs::from_request_parts(parts, state).await?;
        Ok(Self { jobs, settings })
    }
}
