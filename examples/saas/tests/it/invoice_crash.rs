//! A crash between the commit and the hook, with the example's real
//! binary: started with `SAAS_JOBS_PAUSED=1` (it writes queue rows and runs
//! no hook), it creates an invoice over the API and is killed with SIGKILL
//! before any worker ran; restarted normally on the same SQLite file, its
//! worker finds the row and emails the invoice once, on the first attempt,
//! and a retry of the request with the same key is answered from the stored
//! response, creating nothing.

use std::process::Command;
use std::time::{Duration, Instant};

use autumn_web::test::ServerProcess;
use saas::invoices::InvoiceStats;

/// The longest a wait here may take.
const DEADLINE: Duration = Duration::from_secs(30);

const BODY: &str = r#"{"customer": "Crash Corp", "lines": [{"description": "Fuse", "quantity": 4, "unit_cents": 125}]}"#;

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

fn start(dir: &std::path::Path, paused: bool) -> ServerProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_saas"));
    command
        .current_dir(dir)
        .env(
            "AUTUMN_DATABASE__URL",
            format!("sqlite://{}", dir.join("saas.db").display()),
        )
        .env_remove(saas::POST_DELAY_VAR)
        .env_remove(saas::JOBS_PAUSED_VAR);
    if paused {
        command.env(saas::JOBS_PAUSED_VAR, "1");
    }
    ServerProcess::start(command)
}

async fn send(
    client: &Client,
    request: http::Request<http_body_util::Full<bytes::Bytes>>,
) -> (u16, bool, String) {
    use http_body_util::BodyExt as _;
    let response = client.request(request).await.expect("an answer");
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("x-idempotent-replayed")
        .is_some_and(|value| value == "true");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        replayed,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

async fn create(client: &Client, server: &ServerProcess) -> (u16, bool, String) {
    let request = http::Request::post(server.url("/api/invoices"))
        .header("content-type", "application/json")
        .header("idempotency-key", "crash-invoice-1")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            BODY.as_bytes(),
        )))
        .expect("request");
    send(client, request).await
}

async fn stats(client: &Client, server: &ServerProcess) -> InvoiceStats {
    let request = http::Request::get(server.url("/invoices/stats.json"))
        .body(http_body_util::Full::default())
        .expect("request");
    let (status, _, body) = send(client, request).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("stats")
}

#[tokio::test]
async fn killed_after_commit_before_the_hook_the_restart_emails_once_and_the_retry_replays() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client: Client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();

    let paused = start(dir.path(), true);
    let (status, replayed, created) = create(&client, &paused).await;
    assert_eq!((status, replayed), (201, false), "{created}");
    let before = stats(&client, &paused).await;
    assert_eq!(
        (before.invoices, before.line_items, before.outbox),
        (1, 1, 0),
        "committed, and no hook ran"
    );
    // SIGKILL: `ServerProcess` kills its child when dropped.
    drop(paused);

    let restarted = start(dir.path(), false);
    let start = Instant::now();
    loop {
        let now = stats(&client, &restarted).await;
        if now.outbox > 0 {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the restarted worker never emailed: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, replayed, answer) = create(&client, &restarted).await;
    assert_eq!((status, replayed), (201, true), "{answer}");
    assert_eq!(answer, created, "the stored answer of the first attempt");
    // One queued job, run and done: nothing is left that could send a
    // second email, so the counts below are final.
    let start = Instant::now();
    let end = loop {
        let now = stats(&client, &restarted).await;
        if now.hook_jobs_pending == 0 && now.mails_pending == 0 {
            break now;
        }
        assert!(start.elapsed() < DEADLINE, "a job stayed pending: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(end.hook_jobs, 1, "the retry queued no second job: {end:?}");
    assert_eq!(end.mails, 1, "nor a second invoice mail: {end:?}");
    assert_eq!(
        (
            end.invoices,
            end.line_items,
            end.outbox,
            end.emails_on_first_attempt
        ),
        (1, 1, 1, 1),
        "one invoice, one email, sent by the job's first run"
    );
}
