//! The mailer in an app: a handler queues mail with the `Mailer` extractor
//! in its transaction, the worker sends it to a real SMTP server (aiosmtpd,
//! STARTTLS with a CA made here, AUTH), a retried request sends nothing
//! twice, a send cut off mid-DATA is sent once, STARTTLS is never skipped,
//! the test transport records, the file transport feeds the dev-only
//! preview page, and launch refuses a mailer it cannot run, naming the key.

use std::time::Duration;

use autumn_testkit::on_databases;
use autumn_testkit::smtp::{SmtpOptions, SmtpSink};
use autumn_testkit::tls::TestCa;
use autumn_web::LaunchError;
use autumn_web::base::clock::ManualClock;
use autumn_web::config::AutumnConfig;
use autumn_web::db::{Db, PgConnection, SqliteConnection};
use autumn_web::jobs::CommitHooks;
use autumn_web::mail::{JOB_NAME, Mail, Mailer, Message, TestMailbox};
use autumn_web::prelude::*;
use autumn_web::reexports::scoped_futures::ScopedFutureExt as _;
use autumn_web::test::TestApp;

use crate::support::database::{count, eventually};

/// The longest a wait here may take.
const DEADLINE: Duration = Duration::from_secs(30);

/// The confirmation a sign-up sends.
struct Confirm {
    email: String,
    name: String,
}

impl Mail for Confirm {
    const NAME: &'static str = "accounts.confirm";

    fn message(&self) -> Message {
        Message::to(format!("{} <{}>", self.name, self.email))
            .subject(format!("Confirm your address, {}", self.name))
            .html(html! { p { "Hello " (self.name) ", please confirm." } })
            .text(format!("Hello {}, please confirm.", self.name))
    }
}

/// A welcome that is one of a kind per address, whatever request queues it.
struct Welcome {
    email: String,
}

impl Mail for Welcome {
    const NAME: &'static str = "accounts.welcome";

    fn message(&self) -> Message {
        Message::to(&self.email)
            .subject("Welcome")
            .text("Welcome aboard.")
    }

    fn unique_key(&self) -> Option<String> {
        Some(self.email.clone())
    }
}

/// Queues a confirmation and a welcome in one transaction (`?to=` names the
/// address); `x-fail-after-commit` makes it fail after the commit, so the
/// key is released and the retry runs the handler again.
macro_rules! sign_up_on {
    ($name:ident, $conn:ty) => {
        #[post("/signups")]
        async fn $name(
            mut db: Db<$conn>,
            mailer: Mailer,
            headers: HeaderMap,
        ) -> AutumnResult<StatusCode> {
            let email = headers
                .get("x-email")
                .and_then(|value| value.to_str().ok())
                .unwrap_or("ann@example.com")
                .to_owned();
            db.tx(|conn| {
                let mailer = mailer.clone();
                async move {
                    let confirm = Confirm {
                        email: email.clone(),
                        name: "Ann".into(),
                    };
                    mailer.deliver_later_in(conn, &confirm).await?;
                    mailer.deliver_later_in(conn, &Welcome { email }).await?;
                    Ok::<_, AutumnError>(())
                }
                .scope_boxed()
            })
            .await?;
            mailer.committed();
            if headers.contains_key("x-fail-after-commit") {
                return Err(AutumnError::internal("failed after the commit"));
            }
            Ok(StatusCode::CREATED)
        }
    };
}

sign_up_on!(sign_up_postgres, PgConnection);
sign_up_on!(sign_up_sqlite, SqliteConnection);

fn routes_for(url: &str) -> Vec<Route> {
    if url.starts_with("sqlite") {
        routes![sign_up_sqlite]
    } else {
        routes![sign_up_postgres]
    }
}

fn config(url: &str, mail: &str) -> AutumnConfig {
    AutumnConfig::from_toml_str(&format!(
        "[idempotency]\nbackend = \"database\"\n[database]\nurl = \"{url}\"\npool_size = 4\n\
         [mail]\nfrom = \"Shop <shop@example.com>\"\n{mail}"
    ))
    .expect("config")
}

fn pool(url: &str) -> autumn_web::db::DbPool {
    autumn_web::db::DbPool::new(url, 2, Duration::from_secs(5)).expect("pool")
}

/// SMTP with STARTTLS and a login, to a relay whose certificate a CA of the
/// test's own signed: the mail arrives once, encrypted and authenticated,
/// with both parts and the `Message-ID` its job is unique by, however often
/// the request is retried.
// On two threads: the relay is waited for by blocking this one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_goes_out_over_starttls_with_a_login_once_per_request() {
    let schema = autumn_testkit::framework::fresh_postgres_schema();
    let url = schema.url().to_owned();
    let ca = TestCa::new();
    let cert = ca.server_cert(&["127.0.0.1"]);
    let sink = SmtpSink::start(&SmtpOptions {
        tls: Some((cert.cert.clone(), cert.key.clone())),
        auth: Some(("mailer".into(), "s3cret-pass".into())),
        stall_first: false,
    });
    let smtp = format!(
        "transport = \"smtp\"\n[mail.smtp]\nhost = \"127.0.0.1\"\nport = {}\ntls = \"starttls\"\n\
         username = \"mailer\"\npassword = \"s3cret-pass\"\ntls_ca_file = \"{}\"\n",
        sink.port(),
        ca.ca_file().display()
    );
    let client = TestApp::from_builder(autumn_web::app().with_mail())
        .routes(routes_for(&url))
        .idempotent()
        .with_config(config(&url, &smtp))
        .build();
    let post = || {
        client
            .post("/signups")
            .header("idempotency-key", "signup-1")
    };
    post()
        .header("x-fail-after-commit", "1")
        .send()
        .await
        .assert_status(500);
    post().send().await.assert_status(201);
    post().send().await.assert_status(201);

    let pool = pool(&url);
    assert_eq!(
        count(
            &pool,
            &format!("SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE hook = '{JOB_NAME}'")
        )
        .await,
        2,
        "one row per mail, however often the request ran"
    );
    eventually(
        &pool,
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE state = 'done'",
        2,
    )
    .await;
    assert!(sink.wait_until(DEADLINE, |accepted, _| accepted.len() >= 2));
    let accepted = sink.accepted();
    assert_eq!(accepted.len(), 2, "two mails, each once: {accepted:?}");
    let confirm = accepted
        .iter()
        .find(|mail| mail.header("Subject").as_deref() == Some("Confirm your address, Ann"))
        .expect("the confirmation");
    assert!(confirm.tls, "sent after STARTTLS");
    assert_eq!(confirm.login.as_deref(), Some("mailer"));
    assert_eq!(confirm.mail_from, "shop@example.com");
    assert_eq!(confirm.rcpt_tos, ["ann@example.com"]);
    assert!(
        confirm.data.contains("multipart/alternative"),
        "{}",
        confirm.data
    );
    assert!(confirm.data.contains("please confirm."), "{}", confirm.data);
    let message_id = confirm.header("Message-ID").expect("a Message-ID");
    assert!(message_id.ends_with("@example.com>"), "{message_id}");
    assert_eq!(
        count(
            &pool,
            &format!(
                "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE record_id = '{message_id}'"
            )
        )
        .await,
        1,
        "the job is unique by the mail's Message-ID"
    );
}

/// `tls = "starttls"` (the default) toward a relay that offers no
/// STARTTLS: nothing is sent in clear, the job is retried.
// On two threads: the relay is waited for by blocking this one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_without_starttls_gets_nothing_in_clear() {
    let schema = autumn_testkit::framework::fresh_postgres_schema();
    let url = schema.url().to_owned();
    let ca = TestCa::new();
    let sink = SmtpSink::start(&SmtpOptions::default());
    let smtp = format!(
        "transport = \"smtp\"\n[mail.smtp]\nhost = \"127.0.0.1\"\nport = {}\ntls_ca_file = \"{}\"\n",
        sink.port(),
        ca.ca_file().display()
    );
    let client = TestApp::from_builder(autumn_web::app().with_mail())
        .routes(routes_for(&url))
        .with_config(config(&url, &smtp))
        .build();
    client.post("/signups").send().await.assert_status(201);
    let pool = pool(&url);
    eventually(
        &pool,
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs \
         WHERE state = 'pending' AND attempts >= 1 AND last_error LIKE '%TLS%'",
        2,
    )
    .await;
    assert!(
        sink.accepted().is_empty(),
        "nothing accepted without TLS: {:?}",
        sink.accepted()
    );
}

/// The relay never answers the first mail's DATA; the run is cut off at its
/// timeout (moved past on the app's clock), retried, and the relay accepts
/// the mail once: the cut-off attempt was never accepted.
// On two threads: the relay is waited for by blocking this one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_cut_off_mid_data_is_sent_once() {
    let schema = autumn_testkit::framework::fresh_postgres_schema();
    let url = schema.url().to_owned();
    let sink = SmtpSink::start(&SmtpOptions {
        stall_first: true,
        ..SmtpOptions::default()
    });
    let smtp = format!(
        "transport = \"smtp\"\n[mail.smtp]\nhost = \"127.0.0.1\"\nport = {}\ntls = \"none\"\n",
        sink.port()
    );
    let clock = ManualClock::new();
    // A lease longer than the timeout: the clock's jump ends the run by
    // its timeout, not by another worker taking the job over.
    let hooks = CommitHooks::new()
        .timeout_for(JOB_NAME, Duration::from_secs(60))
        .lease(Duration::from_secs(600))
        .poll_every(Duration::from_millis(10));
    let client = TestApp::from_builder(autumn_web::app().with_mail().with_commit_hooks(hooks))
        .routes(routes![sign_up_postgres_once])
        .with_config(config(&url, &smtp))
        .with_clock(std::sync::Arc::new(clock.clone()))
        .build();
    client.post("/signups").send().await.assert_status(201);
    assert!(
        sink.wait_until(DEADLINE, |_, stalled| stalled == 1),
        "the first DATA reached the relay"
    );
    let pool = pool(&url);
    // Past the run's timeout: the worker drops the send mid-DATA.
    clock.advance(Duration::from_secs(61));
    eventually(
        &pool,
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE last_error IS NOT NULL",
        1,
    )
    .await;
    // Past the backoff: the retry sends it.
    clock.advance(Duration::from_secs(5));
    assert!(sink.wait_until(DEADLINE, |accepted, _| !accepted.is_empty()));
    eventually(
        &pool,
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE state = 'done' AND attempts = 2",
        1,
    )
    .await;
    assert_eq!(sink.accepted().len(), 1, "accepted once");
}

/// One confirmation, for the stalled-relay test.
#[post("/signups")]
async fn sign_up_postgres_once(mailer: Mailer) -> AutumnResult<StatusCode> {
    let confirm = Confirm {
        email: "bob@example.com".into(),
        name: "Bob".into(),
    };
    mailer.deliver_later(&confirm).await?;
    Ok(StatusCode::CREATED)
}

/// The test transport records each mail once, retried sends included, and a
/// mail with a unique key of its own is queued once whatever request queues
/// it.
async fn the_test_mailbox_records_each_mail_once(url: String) {
    let mailbox = TestMailbox::new();
    mailbox.fail_next(1);
    let hooks = CommitHooks::new()
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
        .poll_every(Duration::from_millis(10));
    let client = TestApp::from_builder(
        autumn_web::app()
            .mail_transport(mailbox.clone())
            .with_commit_hooks(hooks),
    )
    .routes(routes_for(&url))
    .idempotent()
    .with_config(config(&url, ""))
    .build();
    client
        .post("/signups")
        .header("idempotency-key", "a")
        .send()
        .await
        .assert_status(201);
    client
        .post("/signups")
        .header("idempotency-key", "a")
        .send()
        .await
        .assert_status(201);
    // Another request for the same address: a second confirmation, but the
    // welcome is one of a kind per address.
    client
        .post("/signups")
        .header("idempotency-key", "b")
        .send()
        .await
        .assert_status(201);
    let sent = mailbox.wait_for(3, DEADLINE).await;
    let pool = pool(&url);
    eventually(
        &pool,
        "SELECT COUNT(*) AS n FROM autumn_commit_jobs WHERE state = 'done'",
        3,
    )
    .await;
    let sent_now = mailbox.sent();
    assert_eq!(sent_now.len(), 3, "{sent:?}");
    assert_eq!(
        sent_now
            .iter()
            .filter(|mail| mail.name() == "accounts.welcome")
            .count(),
        1
    );
    assert_eq!(mailbox.attempts(), 4, "the failed send was retried");
    let ids: std::collections::BTreeSet<&str> =
        sent_now.iter().map(|mail| mail.message_id()).collect();
    assert_eq!(ids.len(), 3, "each mail its own Message-ID");
}

on_databases!(the_test_mailbox_records_each_mail_once);

/// An address that is not one is refused when the mail is queued (the
/// handler's 500), and nothing is queued.
#[tokio::test]
async fn a_bad_address_is_refused_when_queued() {
    let url = autumn_testkit::framework::fresh_sqlite_file();
    let mailbox = TestMailbox::new();
    let client = TestApp::from_builder(autumn_web::app().mail_transport(mailbox))
        .routes(routes![sign_up_sqlite])
        .with_config(config(&url, ""))
        .build();
    client
        .post("/signups")
        .header("x-email", "not an address")
        .send()
        .await
        .assert_status(500);
    assert_eq!(
        count(&pool(&url), "SELECT COUNT(*) AS n FROM autumn_commit_jobs").await,
        0
    );
}

/// Under `dev`, the file transport writes each mail and `/dev/mail` lists
/// it; the HTML part is served sandboxed. Under any other profile the page
/// is not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_preview_lists_mail_the_file_transport_wrote() {
    let url = autumn_testkit::framework::fresh_sqlite_file();
    let dir = tempfile::tempdir().expect("a folder");
    let mail = format!(
        "transport = \"file\"\n[mail.file]\ndir = \"{}\"\n",
        dir.path().display()
    );
    let mut dev = config(&url, &mail);
    dev.profile = autumn_web::config::Profile::new("dev");
    // Served for real: the test client runs apps under the `test` profile.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        autumn_web::app()
            .with_mail()
            .routes(routes![sign_up_sqlite])
            .with_config(dev)
            .serve(listener, async move {
                let _ = stopped.await;
            }),
    );
    let client = autumn_web::test::TestClient::for_server(&base);
    client.post("/signups").send().await.assert_status(201);
    let index = autumn_testkit::eventually_async("two mails listed", DEADLINE, || async {
        let page = client.get("/dev/mail").send().await;
        let text = page.text();
        if text.contains("Mail sent (2)") {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    assert!(index.contains("Confirm your address, Ann"), "{index}");
    let eml = std::fs::read_dir(dir.path())
        .expect("the folder")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "eml"))
        .count();
    assert_eq!(eml, 2, "an .eml per mail");
    // The confirmation's row, and its link.
    let link = index
        .split("<tr>")
        .find(|row| row.contains("Confirm your address, Ann"))
        .and_then(|row| row.split("href=\"/dev/mail/").nth(1))
        .and_then(|rest| rest.split('"').next())
        .expect("a link to the confirmation")
        .to_owned();
    let shown = client.get(&format!("/dev/mail/{link}")).send().await;
    shown.assert_status(200);
    let text = shown.text();
    assert!(text.contains("Message-ID"), "{text}");
    assert!(
        text.contains("Hello Ann, please confirm."),
        "the text part: {text}"
    );
    let html = client.get(&format!("/dev/mail/{link}/html")).send().await;
    html.assert_status(200);
    assert!(
        html.text().contains("<p>Hello Ann, please confirm.</p>"),
        "{}",
        html.text()
    );
    let csp = html.header("content-security-policy").expect("a CSP");
    assert!(csp.starts_with("sandbox"), "{csp}");
    client
        .get("/dev/mail/nosuchmail")
        .send()
        .await
        .assert_status(404);

    let mut staging = config(&url, &mail);
    staging.profile = autumn_web::config::Profile::new("staging");
    let client = TestApp::from_builder(autumn_web::app().with_mail())
        .routes(routes![sign_up_sqlite])
        .with_config(staging)
        .build();
    client.get("/dev/mail").send().await.assert_status(404);
}

/// Launch refuses a mailer that cannot work, naming the key to fix.
#[test]
fn launch_names_the_mail_key_to_fix() {
    let url = autumn_testkit::framework::fresh_sqlite_file();
    let key_of = |config: AutumnConfig| -> String {
        match TestApp::from_builder(autumn_web::app().with_mail())
            .with_config(config)
            .try_build()
        {
            Err(LaunchError::Config(error)) => error.key().unwrap_or_default().to_owned(),
            Err(other) => panic!("another error: {other}"),
            Ok(_) => panic!("launched"),
        }
    };
    let staging = |mail: &str| {
        let mut config = config(&url, mail);
        config.profile = autumn_web::config::Profile::new("staging");
        config
    };
    assert_eq!(
        key_of(staging("")),
        "mail.smtp.host",
        "SMTP by default outside dev and test"
    );
    assert_eq!(
        key_of(staging(
            "[mail.smtp]\nhost = \"smtp.example.com\"\ntls = \"none\"\n"
        )),
        "mail.smtp.tls",
        "no clear text to another host"
    );
    assert_eq!(
        key_of(staging(
            "[mail.smtp]\nhost = \"127.0.0.1\"\ntls = \"none\"\nusername = \"u\"\npassword = \"p\"\n"
        )),
        "mail.smtp.tls",
        "no password in clear"
    );
    let mut no_from = config(&url, "");
    no_from.mail.from = None;
    assert_eq!(key_of(no_from), "mail.from");
    let mut bad_from = config(&url, "");
    bad_from.mail.from = Some("shop".into());
    assert_eq!(key_of(bad_from), "mail.from");
    let mut no_database = config(&url, "");
    no_database.database.url = None;
    no_database.idempotency.backend = autumn_web::config::Backend::Memory;
    assert_eq!(key_of(no_database), "database.url");
}
