//! Queues and priorities: within a queue the higher priority runs first,
//! and each queue has its own slots, so a flood of slow jobs in one never
//! holds back another.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use autumn_core::jobs::{
    CommitHooks, CommitJob, CommitJobWorker, Job, JobError, Jobs, MutationContext, Queued,
};
use autumn_idempotency::clock::ManualClock;
use autumn_testkit::{eventually_async, on_databases};
use serde::{Deserialize, Serialize};

use super::pool;

const WITHIN: Duration = Duration::from_secs(10);

/// The order runs started in, per test: (tag, label).
static STARTED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn started(tag: &str) -> Vec<String> {
    STARTED
        .lock()
        .expect("started")
        .iter()
        .filter(|(t, _)| t == tag)
        .map(|(_, label)| label.clone())
        .collect()
}

#[derive(Serialize, Deserialize)]
struct Mail {
    tag: String,
    label: String,
}

impl Job for Mail {
    const NAME: &'static str = "mail.send";
    const QUEUE: &'static str = "mail";

    async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
        STARTED
            .lock()
            .expect("started")
            .push((self.tag, self.label));
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
struct Import {
    tag: String,
}

impl Job for Import {
    const NAME: &'static str = "bulk.import";
    const QUEUE: &'static str = "bulk";

    async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
        STARTED
            .lock()
            .expect("started")
            .push((self.tag, "import".to_owned()));
        // Never done: the test stops the worker, which drops the run.
        std::future::pending::<()>().await;
        Ok(())
    }
}

fn mail(tag: &str, label: &str) -> Mail {
    Mail {
        tag: tag.to_owned(),
        label: label.to_owned(),
    }
}

/// One slot for the mail queue: jobs start one by one, by priority (the
/// job's own, or the one given when queued), then by when they were due.
async fn the_higher_priority_runs_first(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let tag = format!("priority-{url}");
    let jobs = Jobs::new(pool.clone(), MutationContext::detached());
    jobs.enqueue(mail(&tag, "first low")).await.expect("queued");
    jobs.enqueue(mail(&tag, "second low"))
        .await
        .expect("queued");
    jobs.enqueue(Queued::from(mail(&tag, "urgent")).priority(10))
        .await
        .expect("queued");
    let hooks = CommitHooks::new()
        .job::<Mail>()
        .queue("mail", 1)
        .poll_every(Duration::from_millis(10));
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock)).start();
    eventually_async("three mails", WITHIN, || async { started(&tag).len() == 3 }).await;
    worker.abort();
    assert_eq!(started(&tag), ["urgent", "first low", "second low"]);
}

/// Twenty imports that hang fill the bulk queue's two slots; mail queued
/// behind them goes out all the same.
async fn a_flood_in_one_queue_holds_no_other_back(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(1_000_000);
    let tag = format!("flood-{url}");
    let jobs = Jobs::new(pool.clone(), MutationContext::detached());
    for _ in 0..20 {
        jobs.enqueue(Import { tag: tag.clone() })
            .await
            .expect("queued");
    }
    let hooks = CommitHooks::new()
        .job::<Import>()
        .job::<Mail>()
        .queue("bulk", 2)
        .queue("mail", 2)
        .poll_every(Duration::from_millis(10));
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock)).start();
    eventually_async("two imports running", WITHIN, || async {
        started(&tag).len() == 2
    })
    .await;
    for n in 0..3 {
        jobs.enqueue(mail(&tag, &format!("mail {n}")))
            .await
            .expect("queued");
    }
    eventually_async("the mail sent", WITHIN, || async {
        started(&tag)
            .iter()
            .filter(|label| label.starts_with("mail"))
            .count()
            == 3
    })
    .await;
    let imports = started(&tag)
        .iter()
        .filter(|label| *label == "import")
        .count();
    assert_eq!(imports, 2, "the bulk queue kept to its two slots");
    worker.abort();
}

on_databases!(
    the_higher_priority_runs_first,
    a_flood_in_one_queue_holds_no_other_back,
);
