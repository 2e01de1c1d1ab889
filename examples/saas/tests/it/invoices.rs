//! The invoice form in a real browser (headless Chromium through
//! chromedriver), against the example served in-process over a SQLite file
//! of the test's own, each form post slowed to 400 ms so a double-click
//! really sends two overlapping posts: two line items added with the "Add
//! line item" button, then a double-click on Save, create one invoice, two
//! line items and one outbox email (written by the after-create hook,
//! after the commit). The same invoice sent twice over the JSON API with one
//! `Idempotency-Key` is created once and emailed once.

use crate::support::chromium;

use std::time::Duration;

use autumn_web::config::AutumnConfig;
use chromium::{Chromedriver, Served, browser};
use fantoccini::{Client, Locator};
use saas::invoices::InvoiceStats;

/// How long the browser gets to settle on a page, and the hook to run.
const WAIT: Duration = Duration::from_secs(20);

async fn fill(client: &Client, css: &str, text: &str) {
    let input = client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    input.clear().await.expect("clear the input");
    input.send_keys(text).await.expect("type into the input");
}

async fn click_button(client: &Client, label: &str) {
    client
        .find(Locator::XPath(&format!(
            "//button[normalize-space()='{label}']"
        )))
        .await
        .unwrap_or_else(|e| panic!("the {label} button: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {label}: {e}"));
}

async fn stats(base: &str) -> InvoiceStats {
    get_json(&format!("{base}/invoices/stats.json")).await
}

async fn get_json<T: serde::de::DeserializeOwned>(url: &str) -> T {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let request = http::Request::get(url)
        .body(http_body_util::Full::default())
        .expect("request");
    let (status, body) = send(&client, request).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

async fn send(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
    request: http::Request<http_body_util::Full<bytes::Bytes>>,
) -> (u16, String) {
    use http_body_util::BodyExt as _;
    let response = client.request(request).await.expect("an answer");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Polls the stats until `check` holds, within [`WAIT`]: the hook runs on
/// the worker's task after the commit.
async fn until(base: &str, what: &str, check: impl Fn(&InvoiceStats) -> bool) -> InvoiceStats {
    let check = &check;
    autumn_testkit::eventually_async(what, WAIT, move || async move {
        let now = stats(base).await;
        if check(&now) {
            Ok(now)
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_line_items_and_a_double_click_on_save_make_one_invoice_and_one_email() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("saas.db").display());
    let config =
        AutumnConfig::from_toml_str(&format!("[database]\nurl = \"{url}\"\n")).expect("config");
    let served = Served::start(
        saas::app_with_delay(false, Duration::from_millis(400))
            .with_config(saas::configure(config)),
    )
    .await;
    let base = format!("http://{}", served.address);

    let driver = Chromedriver::start();
    let profile = tempfile::tempdir().expect("temp dir");
    let client = browser(&driver, profile.path()).await;
    client
        .goto(&format!("{base}/invoices/new"))
        .await
        .expect("GET /invoices/new");
    fill(&client, "input[name=customer]", "Acme Corp").await;
    fill(&client, "input[name='lines[0][description]']", "Paper").await;
    fill(&client, "input[name='lines[0][quantity]']", "3").await;
    fill(&client, "input[name='lines[0][unit_cents]']", "250").await;
    click_button(&client, "Add line item").await;
    fill(&client, "input[name='lines[1][description]']", "Ink").await;
    fill(&client, "input[name='lines[1][quantity]']", "2").await;
    fill(&client, "input[name='lines[1][unit_cents]']", "1000").await;
    assert_eq!(
        client
            .find(Locator::Css("input[name='lines[0][description]']"))
            .await
            .expect("row 0 kept")
            .prop("value")
            .await
            .expect("value"),
        Some("Paper".to_owned()),
        "adding a row keeps what was typed"
    );

    let save = client
        .find(Locator::XPath("//button[normalize-space()='Save']"))
        .await
        .expect("the Save button");
    chromium::double_click(&client, &save, Duration::from_millis(50)).await;

    let total = client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#total"))
        .await
        .expect("the invoice page")
        .text()
        .await
        .expect("total");
    assert_eq!(total, "2750 cents");
    let path = client
        .current_url()
        .await
        .expect("the URL")
        .path()
        .to_owned();
    assert!(path.starts_with("/invoices/"), "{path}");

    let after_form = until(&base, "the email is in the outbox", |s| s.outbox >= 1).await;
    assert_eq!(
        (
            after_form.invoices,
            after_form.line_items,
            after_form.outbox
        ),
        (1, 2, 1),
        "one invoice, two line items, one email"
    );

    // The API: the same invoice twice under one key.
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let body = r#"{"customer": "Api Corp", "lines": [{"description": "Toner", "quantity": 1, "unit_cents": 5000}]}"#;
    let post = || {
        http::Request::post(format!("{base}/api/invoices"))
            .header("content-type", "application/json")
            .header("idempotency-key", "invoice-api-1")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                body.as_bytes(),
            )))
            .expect("request")
    };
    let (first, created) = send(&http, post()).await;
    assert_eq!(first, 201, "{created}");
    until(&base, "the API invoice's email", |s| s.outbox == 2).await;
    let (retry, replayed) = send(&http, post()).await;
    assert_eq!(
        (retry, replayed),
        (201, created),
        "the retry is the first answer"
    );
    // The retry queued no job of its own, and once no job is pending no
    // hook can send anything more: the counts below are final.
    let end = until(&base, "no hook job or mail is pending", |s| {
        s.hook_jobs_pending == 0 && s.mails_pending == 0
    })
    .await;
    assert_eq!(end.hook_jobs, 2, "one job per invoice: {end:?}");
    assert_eq!(end.mails, 2, "one mail per invoice: {end:?}");
    assert_eq!(
        (
            end.invoices,
            end.line_items,
            end.outbox,
            end.emails_on_first_attempt
        ),
        (2, 3, 2, 2),
        "no second invoice or email for the retry"
    );

    let _ = client.close().await;
    served.stop().await;
}
