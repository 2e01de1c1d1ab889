//! Where a mail goes once its job runs: [`MailTransport`], and the one
//! tests use, [`TestMailbox`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::OutgoingMail;

/// What a send returns.
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<(), SendError>> + Send + 'a>>;

/// Sends a mail: SMTP and files from `[mail]`, [`TestMailbox`] in tests,
/// or a transport of the app's own (an HTTP mail API), given to
/// `AppBuilder::mail_transport`.
///
/// A send is called once per attempt of the mail's job. It may be called
/// again for a mail the last attempt sent, when the process died after the
/// relay accepted it and before the job was marked done: the mail then
/// carries the same `Message-ID`, which a transport with an idempotency key
/// of its own should pass on.
pub trait MailTransport: Send + Sync + 'static {
    /// Sends `mail`.
    fn send<'a>(&'a self, mail: &'a OutgoingMail) -> SendFuture<'a>;

    /// Its name in log lines (`smtp`, `file`, `test`).
    fn name(&self) -> &'static str;
}

/// Why a mail was not sent.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// Worth another try (a relay that is down, a 4xx answer, a timeout):
    /// the job is retried after its backoff.
    #[error("{0}")]
    Transient(String),
    /// Another try would fail the same way (a 5xx answer, a recipient the
    /// relay refuses): the job is dead at once.
    #[error("{0}")]
    Permanent(String),
}

/// A transport that keeps what it is given, for tests: hand a clone to
/// `AppBuilder::mail_transport` and read [`sent`](Self::sent) after.
///
/// ```
/// use autumn_core::mail::TestMailbox;
///
/// let mailbox = TestMailbox::new();
/// mailbox.fail_next(1); // the first send fails as a relay that is down would
/// assert!(mailbox.sent().is_empty());
/// ```
#[derive(Debug, Clone, Default)]
pub struct TestMailbox {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    changed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    sent: Vec<OutgoingMail>,
    failures_left: u32,
    attempts: u32,
}

impl TestMailbox {
    /// An empty mailbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every mail sent so far, in the order sent.
    pub fn sent(&self) -> Vec<OutgoingMail> {
        self.state().sent.clone()
    }

    /// How many sends were asked for, failed ones included.
    pub fn attempts(&self) -> u32 {
        self.state().attempts
    }

    /// The next `count` sends fail as [`SendError::Transient`].
    pub fn fail_next(&self, count: u32) {
        self.state().failures_left = count;
    }

    /// Waits until at least `count` mails were sent, at most `limit`:
    /// what was sent by then.
    pub async fn wait_for(&self, count: usize, limit: Duration) -> Vec<OutgoingMail> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let changed = self.inner.changed.notified();
            let sent = self.sent();
            if sent.len() >= count {
                return sent;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.sent();
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl MailTransport for TestMailbox {
    fn send<'a>(&'a self, mail: &'a OutgoingMail) -> SendFuture<'a> {
        Box::pin(async move {
            let result = {
                let mut state = self.state();
                state.attempts += 1;
                if state.failures_left > 0 {
                    state.failures_left -= 1;
                    Err(SendError::Transient(
                        "the test mailbox was told to fail".into(),
                    ))
                } else {
                    state.sent.push(mail.clone());
                    Ok(())
                }
            };
            self.inner.changed.notify_waiters();
            result
        })
    }

    fn name(&self) -> &'static str {
        "test"
    }
}
