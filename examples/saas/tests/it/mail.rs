//! The app's mail, sent once: a sign-up confirmation per account however the
//! form is double-submitted, an invoice mail per invoice however often the
//! API request is retried, and, with the real binary and a real SMTP server
//! (aiosmtpd), one confirmation when the process is killed while the relay
//! holds the mail's DATA unanswered and a restarted process sends it again.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use autumn_testkit::smtp::{SmtpOptions, SmtpSink};
use autumn_web::config::AutumnConfig;
use autumn_web::mail::TestMailbox;
use autumn_web::test::{ServerProcess, TestApp, TestClient};
use saas::SignupGate;
use saas::invoices::InvoiceStats;

/// The longest a wait here may take.
const DEADLINE: Duration = Duration::from_secs(30);

/// `app` with `mailbox` on a fresh SQLite file in `dir`, configured as
/// `main` configures it.
fn client_in(dir: &Path, app: autumn_web::AppBuilder, mailbox: &TestMailbox) -> TestClient {
    let url = format!("sqlite://{}", dir.join("saas.db").display());
    let config = AutumnConfig::from_toml_str(&format!(
        "[database]\nurl = \"{url}\"\n[security.submit_token]\nin_flight_wait_ms = 5000\n"
    ))
    .expect("config");
    TestApp::from_builder(app.mail_transport(mailbox.clone()))
        .with_config(saas::configure(config))
        .build()
}

/// The first form's submit token on the page at `html`.
fn token_in(html: &str) -> String {
    html.split(r#"name="_submit_token" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a submit token field")
        .to_owned()
}

async fn stats(client: &TestClient) -> InvoiceStats {
    client.get("/invoices/stats.json").send().await.json()
}

/// Waits until no mail is pending: nothing can be sent after that.
async fn mails_settled(client: &TestClient) -> InvoiceStats {
    autumn_testkit::eventually_async("no mail pending", DEADLINE, || async {
        let now = stats(client).await;
        if now.mails > 0 && now.mails_pending == 0 {
            Ok(now)
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_submitted_signup_sends_one_confirmation() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mailbox = TestMailbox::new();
    let gate = SignupGate::default();
    let client = client_in(
        dir.path(),
        saas::app_with_gate(false, gate.clone()),
        &mailbox,
    );
    let token = token_in(&client.get("/signup").send().await.text());
    let post = || {
        let (client, token) = (client.clone(), token.clone());
        tokio::spawn(async move {
            client
                .post("/signup")
                .form(&[
                    ("_submit_token", token.as_str()),
                    ("email", "ada@example.com"),
                    ("name", "Ada"),
                    ("password", "correct horse battery"),
                ])
                .send()
                .await
                .status()
        })
    };
    // The double-click: the second post arrives while the first is in its
    // handler, before it created the account.
    let first = post();
    gate.started().await;
    let second = post();
    gate.open();
    let statuses = (first.await.expect("first"), second.await.expect("second"));
    assert_eq!((statuses.0.as_u16(), statuses.1.as_u16()), (303, 303));
    mails_settled(&client).await;
    let sent = mailbox.sent();
    assert_eq!(sent.len(), 1, "one confirmation: {sent:?}");
    assert_eq!(sent[0].to(), ["Ada <ada@example.com>"]);
    assert_eq!(sent[0].subject(), "Welcome to Saas, Ada");
    assert!(
        sent[0]
            .html()
            .unwrap_or_default()
            .contains("<strong>ada@example.com</strong>"),
        "{:?}",
        sent[0].html()
    );
    // The form posted again, with a new token and the same address: no
    // account, and so no mail. (The gate lets it through at once.)
    gate.open();
    let again = token_in(&client.get("/signup").send().await.text());
    let refused = client
        .post("/signup")
        .form(&[
            ("_submit_token", again.as_str()),
            ("email", "ada@example.com"),
            ("name", "Ada"),
            ("password", "correct horse battery"),
        ])
        .send()
        .await;
    refused.assert_status(422);
    assert_eq!(stats(&client).await.mails, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_invoice_request_sends_one_invoice_mail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mailbox = TestMailbox::new();
    // The first send fails as a relay that is down would: retried, still
    // one mail.
    mailbox.fail_next(1);
    let client = client_in(dir.path(), saas::app(false), &mailbox);
    let body = serde_json::json!({
        "customer": "Acme Ltd",
        "lines": [{"description": "Widget", "quantity": 3, "unit_cents": 250}]
    });
    let post = || {
        let client = client.clone();
        let body = body.clone();
        tokio::spawn(async move {
            client
                .post("/api/invoices")
                .header("idempotency-key", "invoice-1")
                .json(&body)
                .send()
                .await
                .status()
        })
    };
    // Three at once, then a retry: one invoice, one mail.
    let at_once = [post(), post(), post()];
    for attempt in at_once {
        let status = attempt.await.expect("a request");
        assert!(status == 201 || status == 409, "{status}");
    }
    assert_eq!(post().await.expect("the retry"), 201);
    let end = mails_settled(&client).await;
    assert_eq!((end.invoices, end.mails), (1, 1), "{end:?}");
    let sent = mailbox.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].to(), ["billing+acme-ltd@example.com"]);
    assert!(sent[0].text().unwrap_or_default().contains("Total: 7.50"));
    assert_eq!(mailbox.attempts(), 2, "the failed send was retried");
}

fn start_binary(dir: &Path, smtp_port: u16) -> ServerProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_saas"));
    command
        .current_dir(dir)
        .env(
            "AUTUMN_DATABASE__URL",
            format!("sqlite://{}", dir.join("saas.db").display()),
        )
        .env("AUTUMN_MAIL__TRANSPORT", "smtp")
        .env("AUTUMN_MAIL__SMTP__HOST", "127.0.0.1")
        .env("AUTUMN_MAIL__SMTP__PORT", smtp_port.to_string())
        .env("AUTUMN_MAIL__SMTP__TLS", "none")
        // A crashed worker's job is taken over after 1 s, not 60.
        .env(saas::JOB_LEASE_VAR, "1000")
        .env_remove(saas::POST_DELAY_VAR)
        .env_remove(saas::JOBS_PAUSED_VAR);
    ServerProcess::start(command)
}

/// The real binary is killed (SIGKILL) while the relay holds its
/// confirmation's DATA unanswered; restarted on the same database, its
/// worker takes the job over after the lease and the relay accepts the
/// confirmation once. The killed attempt was never accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_send_sends_the_confirmation_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sink = SmtpSink::start(&SmtpOptions {
        stall_first: true,
        ..SmtpOptions::default()
    });
    let server = start_binary(dir.path(), sink.port());
    let client = server.client();
    let token = token_in(&client.get("/signup").send().await.text());
    client
        .post("/signup")
        .form(&[
            ("_submit_token", token.as_str()),
            ("email", "grace@example.com"),
            ("name", "Grace"),
            ("password", "correct horse battery"),
        ])
        .send()
        .await
        .assert_status(303);
    let stalled = tokio::task::spawn_blocking({
        let sink = std::sync::Arc::new(sink);
        let waiting = sink.clone();
        move || {
            (
                waiting.wait_until(DEADLINE, |_, stalled| stalled == 1),
                sink,
            )
        }
    });
    let (reached, sink) = stalled.await.expect("the wait");
    assert!(reached, "the confirmation's DATA reached the relay");
    // SIGKILL mid-send: `ServerProcess` kills its child when dropped.
    drop(server);

    let restarted = start_binary(dir.path(), sink.port());
    let client = restarted.client();
    let end = mails_settled(&client).await;
    assert_eq!(end.mails, 1, "{end:?}");
    let accepted = sink.accepted();
    assert_eq!(accepted.len(), 1, "accepted once: {accepted:?}");
    assert_eq!(
        accepted[0].header("Subject").as_deref(),
        Some("Welcome to Saas, Grace")
    );
    // No mail is pending, so nothing more can be sent: the count is final.
    assert_eq!(accepted[0].rcpt_tos, ["grace@example.com"]);
}
