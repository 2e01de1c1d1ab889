//! Scheduled jobs: each tick queued once across replicas, a restart that
//! queues nothing twice, downtime caught up with one run, and schedules
//! from `[jobs.schedule]`. The clock is
//! a manual one; nothing waits for a tick.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use autumn_core::config::AutumnConfig;
use autumn_core::jobs::{CommitHooks, CommitJob, CommitJobWorker, Cron, Job, JobError};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::database::DbPool;
use autumn_testkit::on_databases;
use serde::{Deserialize, Serialize};

use super::{pool, rows};

/// 2026-12-07 00:00 UTC.
const MIDNIGHT: u64 = 1_796_601_600_000;
const MINUTE: Duration = Duration::from_secs(60);

/// The tag of each report run, one entry per run.
static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

#[derive(Serialize, Deserialize)]
struct Report {
    tag: String,
}

impl Job for Report {
    const NAME: &'static str = "reports.every_five_minutes";

    async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
        RAN.lock().expect("ran").push(self.tag);
        Ok(())
    }
}

fn ran(tag: &str) -> usize {
    RAN.lock()
        .expect("ran")
        .iter()
        .filter(|t| *t == tag)
        .count()
}

/// A replica's worker with the schedule: every five minutes.
fn replica(pool: &DbPool, clock: &ManualClock, tag: &str) -> CommitJobWorker {
    let every_five: Cron = "*/5 * * * *".parse().expect("cron");
    let hooks = CommitHooks::new().schedule(
        "five-minute-report",
        every_five,
        Report {
            tag: tag.to_owned(),
        },
    );
    CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock.clone()))
}

async fn each_tick_is_queued_once_across_replicas(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(MIDNIGHT + 2 * 60_000);
    let tag = format!("replicas-{url}");
    let replicas = [
        replica(&pool, &clock, &tag),
        replica(&pool, &clock, &tag),
        replica(&pool, &clock, &tag),
    ];
    let mut written = 0;
    for _ in 0..3 {
        for worker in &replicas {
            written += worker.schedule_due().await.expect("schedule");
        }
    }
    assert_eq!(written, 1, "00:00 queued by one replica");
    clock.advance(3 * MINUTE);
    let queued = futures_util::future::join_all(replicas.iter().map(CommitJobWorker::schedule_due))
        .await
        .into_iter()
        .map(|written| written.expect("schedule"))
        .sum::<usize>();
    assert_eq!(queued, 1, "00:05, queued at once by three replicas: once");
    let done: usize = futures_util::future::join_all(replicas.iter().map(CommitJobWorker::run_due))
        .await
        .into_iter()
        .map(|run| run.expect("run").done)
        .sum();
    assert_eq!(done, 2);
    assert_eq!(ran(&tag), 2);
}

async fn a_restart_queues_no_tick_twice_and_downtime_is_caught_up_once(url: String) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(MIDNIGHT + 60_000);
    let tag = format!("restart-{url}");
    assert_eq!(
        replica(&pool, &clock, &tag)
            .schedule_due()
            .await
            .expect("schedule"),
        1
    );
    // A restart within the same tick: its row is there.
    assert_eq!(
        replica(&pool, &clock, &tag)
            .schedule_due()
            .await
            .expect("schedule"),
        0
    );
    // An hour down: twelve ticks missed, one queued.
    clock.advance(60 * MINUTE);
    let restarted = replica(&pool, &clock, &tag);
    assert_eq!(restarted.schedule_due().await.expect("schedule"), 1);
    assert_eq!(restarted.schedule_due().await.expect("schedule"), 0);
    assert_eq!(restarted.run_due().await.expect("run").done, 2);
    let ticks: Vec<String> = rows(&pool)
        .await
        .into_iter()
        .map(|row| row.record_id)
        .collect();
    assert_eq!(
        ticks,
        [MIDNIGHT.to_string(), (MIDNIGHT + 60 * 60_000).to_string()],
        "00:00 and 01:00"
    );
    // Past the done retention (7 days) nothing is caught up but the
    // latest tick within it.
    clock.advance(Duration::from_secs(30 * 24 * 3600));
    assert_eq!(restarted.schedule_due().await.expect("schedule"), 1);
}

/// A digest for an audience: what it is for comes from the schedule's
/// payload in the configuration.
#[derive(Serialize, Deserialize)]
struct Digest {
    audience: String,
    copies: u32,
}

impl Job for Digest {
    const NAME: &'static str = "reports.digest";

    async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
        let tag = format!("{} x{}", self.audience, self.copies);
        RAN.lock().expect("ran").push(tag);
        Ok(())
    }
}

/// `[jobs.schedule.digest]` queues its job at each tick, once, with the
/// table's payload; the code's five-minute report, switched off by its
/// table, and a table switched off on its own queue nothing.
async fn a_schedule_from_the_configuration_queues_its_job_once_per_tick_with_its_payload(
    url: String,
) {
    let pool = pool(&url);
    let clock = ManualClock::starting_at(MIDNIGHT + 2 * 60_000);
    let audience = format!("ops-{url}");
    let report_tag = format!("configured-{url}");
    let config = AutumnConfig::from_toml_str(&format!(
        r#"
        [database]
        url = "{url}"

        [jobs.schedule.digest]
        cron = "*/5 * * * *"
        job = "reports.digest"
        payload = {{ audience = "{audience}", copies = 2 }}

        [jobs.schedule.five-minute-report]
        enabled = false

        [jobs.schedule.hourly-digest]
        cron = "@hourly"
        job = "reports.digest"
        payload = {{ audience = "{audience}-hourly", copies = 1 }}
        enabled = false
        "#
    ))
    .expect("config");
    let every_five: Cron = "*/5 * * * *".parse().expect("cron");
    let hooks = CommitHooks::new()
        .job::<Digest>()
        .schedule(
            "five-minute-report",
            every_five,
            Report {
                tag: report_tag.clone(),
            },
        )
        .configured(&config)
        .expect("the schedules fit the jobs");
    let worker = CommitJobWorker::new(pool.clone(), hooks, Arc::new(clock.clone()));

    assert_eq!(worker.schedule_due().await.expect("schedule"), 1, "00:00");
    assert_eq!(
        worker.schedule_due().await.expect("schedule"),
        0,
        "still 00:00"
    );
    clock.advance(3 * MINUTE);
    assert_eq!(worker.schedule_due().await.expect("schedule"), 1, "00:05");
    assert_eq!(worker.run_due().await.expect("run").done, 2);
    let ticks: Vec<String> = rows(&pool)
        .await
        .into_iter()
        .map(|row| row.record_id)
        .collect();
    assert_eq!(
        ticks,
        [MIDNIGHT.to_string(), (MIDNIGHT + 5 * 60_000).to_string()]
    );
    assert_eq!(ran(&format!("{audience} x2")), 2, "the table's payload");
    assert_eq!(ran(&format!("{audience}-hourly x1")), 0, "switched off");
    assert_eq!(ran(&report_tag), 0, "the code schedule, switched off");
}

on_databases!(
    each_tick_is_queued_once_across_replicas,
    a_restart_queues_no_tick_twice_and_downtime_is_caught_up_once,
    a_schedule_from_the_configuration_queues_its_job_once_per_tick_with_its_payload,
);
