//! One trace from request to job to mail, exported over OTLP/HTTP to a
//! collector the test starts: the request's span joins the trace its
//! caller names in `traceparent`, the job row keeps the request's trace
//! context, and the worker's job spans (a typed job's and a mail's) link to
//! it, the send a span inside the mail's job. A malformed `traceparent`
//! starts a trace of its own; with export off nothing is kept or sent.

use std::time::Duration;

use autumn_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use autumn_web::config::AutumnConfig;
use autumn_web::db::{Db, PgConnection};
use autumn_web::idempotency::IdempotencyContext;
use autumn_web::jobs::{CommitHooks, CommitJob, Job, JobError, Jobs};
use autumn_web::mail::{Mail, Mailer, Message, TestMailbox};
use autumn_web::prelude::*;
use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;
use autumn_web::test::TestApp;
use serde::{Deserialize, Serialize};
use tracing_subscriber::layer::SubscriberExt as _;

use crate::support::database::{count, eventually};

/// The caller's trace and span.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// The longest a wait here may take.
const DEADLINE: Duration = Duration::from_secs(30);

/// Work the sign-up queues beside its mail.
#[derive(Serialize, Deserialize)]
struct Audit {
    account: i64,
}

impl Job for Audit {
    const NAME: &'static str = "traces.audit";

    async fn perform(self, _run: CommitJob) -> Result<(), JobError> {
        let _ = self.account;
        Ok(())
    }
}

/// The confirmation the sign-up sends.
struct Confirm;

impl Mail for Confirm {
    const NAME: &'static str = "traces.confirm";

    fn message(&self) -> Message {
        Message::to("ann@example.com")
            .subject("Confirm")
            .text("Please confirm.")
    }
}

/// Queues a job and a mail in one transaction, and answers with the
/// `traceparent` it would send a downstream service.
#[post("/signups")]
async fn sign_up(
    mut db: Db<PgConnection>,
    jobs: Jobs,
    mailer: Mailer,
    idempotency: IdempotencyContext,
) -> AutumnResult<(StatusCode, HeaderMap)> {
    db.tx(|conn| {
        let (jobs, mailer) = (jobs.clone(), mailer.clone());
        async move {
            jobs.enqueue_in(conn, Audit { account: 1 }).await?;
            mailer.deliver_later_in(conn, &Confirm).await?;
            Ok::<_, AutumnError>(())
        }
        .scope_boxed()
    })
    .await?;
    jobs.committed();
    mailer.committed();
    let outgoing = autumn_web::telemetry::outgoing_headers(&idempotency, "charge");
    let mut answer = HeaderMap::new();
    for (name, into) in [
        ("traceparent", "x-outgoing-traceparent"),
        ("idempotency-key", "x-outgoing-key"),
    ] {
        if let Some(value) = outgoing.get(name) {
            answer.insert(into, value.clone());
        }
    }
    Ok((StatusCode::CREATED, answer))
}

/// The app: its worker polls often, mail goes to `mailbox`.
fn app(url: &str, mailbox: &TestMailbox, telemetry: &str) -> autumn_web::test::TestClient {
    let config = AutumnConfig::from_toml_str(&format!(
        "[idempotency]\nbackend = \"database\"\n[database]\nurl = \"{url}\"\npool_size = 4\n\
         [mail]\nfrom = \"Shop <shop@example.com>\"\n{telemetry}"
    ))
    .expect("config");
    let hooks = CommitHooks::new()
        .job::<Audit>()
        .poll_every(Duration::from_millis(10));
    TestApp::from_builder(
        autumn_web::app()
            .mail_transport(mailbox.clone())
            .with_commit_hooks(hooks),
    )
    .routes(routes![sign_up])
    .idempotent()
    .with_config(config)
    .build()
}

/// The spans `receiver` holds once `done` holds of them, flushing the
/// exporter's batch on each look.
async fn received_until(
    receiver: &OtlpReceiver,
    what: &str,
    done: impl Fn(&[ReceivedSpan]) -> bool,
) -> Vec<ReceivedSpan> {
    autumn_testkit::eventually_async(what, DEADLINE, || async {
        autumn_web::telemetry::flush_traces().await;
        let spans = receiver.spans();
        if done(&spans) {
            Ok(spans)
        } else {
            Err(format!("{spans:#?}"))
        }
    })
    .await
}

// On the test's one thread: the request, the worker and the subscriber
// that turns their spans into OpenTelemetry spans all run on it.
#[tokio::test]
async fn a_request_its_job_and_its_mail_are_one_trace() {
    let schema = autumn_testkit::framework::fresh_postgres_schema();
    let url = schema.url().to_owned();
    let receiver = OtlpReceiver::start();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .with(autumn_web::telemetry::otlp_layer());
    let _traced = tracing::subscriber::set_default(subscriber);
    let mailbox = TestMailbox::new();
    let client = app(
        &url,
        &mailbox,
        &format!(
            "[telemetry.otlp]\nenabled = true\nendpoint = \"{}\"\nservice_name = \"shop\"\n",
            receiver.endpoint()
        ),
    );

    let response = client
        .post("/signups")
        .header("idempotency-key", "signup-1")
        .header("traceparent", &format!("00-{TRACE_ID}-{PARENT_ID}-01"))
        .header("tracestate", "vendor=value")
        .send()
        .await;
    response.assert_status(201);
    let outgoing = response
        .header("x-outgoing-traceparent")
        .expect("a traceparent for the downstream call");
    assert!(
        outgoing.starts_with(&format!("00-{TRACE_ID}-")),
        "the downstream call continues the caller's trace: {outgoing}"
    );
    assert!(response.header("x-outgoing-key").is_some());

    // Each row keeps the traceparent of the span that queued it.
    let pool = autumn_web::db::DbPool::new(&url, 2, Duration::from_secs(5)).expect("pool");
    assert_eq!(
        count(
            &pool,
            &format!(
                "SELECT COUNT(*) AS n FROM autumn_commit_jobs \
                 WHERE trace_context LIKE '00-{TRACE_ID}-%'"
            )
        )
        .await,
        2,
        "the job's row and the mail's"
    );
    eventually(
        &pool,
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE state = 'done'",
        2,
    )
    .await;
    assert_eq!(mailbox.wait_for(1, DEADLINE).await.len(), 1);

    let spans = received_until(
        &receiver,
        "the request, job, mail and send spans",
        |spans| {
            ["POST", "traces.audit", "autumn.mail", "mail.send"]
                .iter()
                .all(|name| spans.iter().any(|span| span.name == *name))
        },
    )
    .await;
    let request = spans
        .iter()
        .find(|span| span.name == "POST")
        .expect("the request's span");
    assert_eq!(request.trace_id, TRACE_ID, "{request:#?}");
    assert_eq!(
        request.parent_span_id.as_deref(),
        Some(PARENT_ID),
        "a child of the caller's span: {request:#?}"
    );
    assert_eq!(request.service_name.as_deref(), Some("shop"));
    assert_eq!(request.attribute("http.response.status_code"), Some("201"));
    assert_eq!(
        outgoing,
        format!("00-{TRACE_ID}-{}-01", request.span_id),
        "the downstream call names the request's span as its parent"
    );
    for name in ["traces.audit", "autumn.mail"] {
        let job = spans
            .iter()
            .find(|span| span.name == name)
            .expect("the job's span");
        assert_eq!(
            job.links,
            [(TRACE_ID.to_owned(), request.span_id.clone())],
            "{name} links to the request that queued it: {job:#?}"
        );
        assert_ne!(job.trace_id, TRACE_ID, "a trace of its own: {job:#?}");
        assert_eq!(job.parent_span_id, None, "{job:#?}");
    }
    let mail_job = spans
        .iter()
        .find(|span| span.name == "autumn.mail")
        .expect("the mail job's span");
    let send = spans
        .iter()
        .find(|span| span.name == "mail.send")
        .expect("the send's span");
    assert_eq!(send.trace_id, mail_job.trace_id, "{send:#?}");
    assert_eq!(send.parent_span_id.as_ref(), Some(&mail_job.span_id));

    // A malformed traceparent: answered as any request, in a trace of its
    // own.
    let response = client
        .post("/signups")
        .header("idempotency-key", "signup-2")
        .header("traceparent", "00-not-a-trace-01")
        .send()
        .await;
    response.assert_status(201);
    let own = response
        .header("x-outgoing-traceparent")
        .expect("a traceparent of the request's own trace");
    assert!(!own.contains(TRACE_ID), "{own}");
    let spans = received_until(&receiver, "the second request's span", |spans| {
        spans.iter().filter(|span| span.name == "POST").count() == 2
    })
    .await;
    let second = spans
        .iter()
        .filter(|span| span.name == "POST")
        .find(|span| span.trace_id != TRACE_ID)
        .expect("the second request's span");
    assert_eq!(second.parent_span_id, None, "a root: {second:#?}");
    assert!(
        own.starts_with(&format!("00-{}-", second.trace_id)),
        "{own}"
    );
}

/// Export off (the default), a collector configured all the same: the rows
/// keep no trace context, and the collector hears nothing.
#[tokio::test]
async fn with_export_off_nothing_is_kept_or_sent() {
    let schema = autumn_testkit::framework::fresh_postgres_schema();
    let url = schema.url().to_owned();
    let receiver = OtlpReceiver::start();
    let mailbox = TestMailbox::new();
    let client = app(
        &url,
        &mailbox,
        &format!("[telemetry.otlp]\nendpoint = \"{}\"\n", receiver.endpoint()),
    );
    let response = client
        .post("/signups")
        .header("idempotency-key", "signup-1")
        .header("traceparent", &format!("00-{TRACE_ID}-{PARENT_ID}-01"))
        .send()
        .await;
    response.assert_status(201);
    assert_eq!(response.header("x-outgoing-traceparent"), None);
    let pool = autumn_web::db::DbPool::new(&url, 2, Duration::from_secs(5)).expect("pool");
    eventually(
        &pool,
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE state = 'done'",
        2,
    )
    .await;
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE trace_context IS NULL"
        )
        .await,
        2
    );
    autumn_web::telemetry::flush_traces().await;
    assert_eq!(receiver.requests(), 0, "{:?}", receiver.spans());
}

/// Export on with no usable collector: launch refuses, naming the key.
#[test]
fn export_without_an_endpoint_is_refused_naming_the_key() {
    for (otlp, key) in [
        ("enabled = true\n", "telemetry.otlp.endpoint"),
        (
            "enabled = true\nendpoint = \"ftp://collector/v1/traces\"\n",
            "telemetry.otlp.endpoint",
        ),
        (
            "enabled = true\nendpoint = \"http://127.0.0.1:4318/v1/traces\"\ntimeout_ms = 0\n",
            "telemetry.otlp.timeout_ms",
        ),
    ] {
        let error =
            AutumnConfig::from_toml_str(&format!("[telemetry.otlp]\n{otlp}")).expect_err(otlp);
        assert_eq!(error.key(), Some(key), "{error}");
        assert!(error.to_string().contains(key), "{error}");
    }
}
