//! The job that sends a queued mail through the app's transport.

use std::sync::Arc;
use std::time::Duration;

use super::OutgoingMail;
use super::transport::{MailTransport, SendError};
use crate::jobs::{CommitHooks, CommitJob, JobError};

/// The name mail jobs are queued under: give it to
/// [`CommitHooks::timeout_for`] to change how long one send may take (2 min
/// by default), or to the `jobs` command's listing to find a dead mail.
pub const HOOK: &str = "autumn.mail";

/// The queue mail runs in, with slots of its own, so a flood of other jobs
/// never holds mail back: [`CommitHooks::queue`] sets how many a process
/// sends at once.
pub const QUEUE: &str = "mail";

/// How long one send may take: longer than an SMTP conversation's commands
/// each may (`[mail.smtp] timeout_secs`), short enough that a relay that
/// hangs does not hold a slot for the default five minutes.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The hook that sends mail rows through `transport`.
pub(crate) fn hooks(transport: Arc<dyn MailTransport>) -> CommitHooks {
    CommitHooks::new()
        .hook(HOOK, move |run: CommitJob| {
            let transport = transport.clone();
            async move { send(transport.as_ref(), &run).await }
        })
        .in_queue(HOOK, QUEUE)
        .timeout_for(HOOK, TIMEOUT)
}

async fn send(transport: &dyn MailTransport, run: &CommitJob) -> Result<(), JobError> {
    let mail: OutgoingMail = run.record()?;
    // The send as a span of its own inside the job's: in a trace, the time
    // the relay took apart from the job's bookkeeping.
    let span = tracing::info_span!(
        "mail.send",
        transport = transport.name(),
        message_id = mail.message_id(),
        otel.kind = "client",
    );
    let sent = tracing::Instrument::instrument(transport.send(&mail), span).await;
    match sent {
        Ok(()) => {
            // Who it went to is personal data: the count and the id say
            // enough to find it.
            tracing::info!(
                target: "autumn::mail",
                transport = transport.name(),
                mail = mail.name(),
                message_id = mail.message_id(),
                recipients = mail.to().len() + mail.cc().len(),
                attempt = run.attempt(),
                "mail sent"
            );
            Ok(())
        }
        Err(SendError::Permanent(reason)) => Err(JobError::permanent(reason)),
        Err(error) => Err(JobError::retry(error)),
    }
}
