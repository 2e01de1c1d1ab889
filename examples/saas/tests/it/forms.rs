//! The sign-up form in a real browser (headless Chromium through
//! chromedriver): a rejected post is rendered again, 422, with the message
//! next to its field, the values entered and a new submit token; the
//! corrected post redirects to the account page, which shows the welcome
//! flash once.
//!
//! The app is the example's own, served in-process on a loopback port over
//! a SQLite file of the test's own. The browser comes from
//! `support/` (autumn-testkit's Chromium), shared with `error_pages.rs`.

use crate::support::chromium;

use std::time::Duration;

use autumn_web::config::AutumnConfig;
use chromium::{Chromedriver, Served, browser};
use fantoccini::{Client, Locator};

/// How long the browser gets to settle on a page.
const PAGE_WAIT: Duration = Duration::from_secs(10);

/// The status and the number of redirects of the page the browser shows,
/// from the Navigation Timing entry of its last navigation.
async fn navigation(client: &Client) -> (u64, u64) {
    let entry = client
        .execute(
            "const [nav] = performance.getEntriesByType('navigation'); \
             return [nav.responseStatus, nav.redirectCount];",
            vec![],
        )
        .await
        .expect("the navigation entry");
    let number = |index: usize| entry[index].as_u64().unwrap_or_else(|| panic!("{entry}"));
    (number(0), number(1))
}

async fn value_of(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .prop("value")
        .await
        .unwrap_or_else(|e| panic!("{css}'s value: {e}"))
        .unwrap_or_default()
}

async fn fill(client: &Client, css: &str, text: &str) {
    let input = client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    input.clear().await.expect("clear the input");
    input.send_keys(text).await.expect("type into the input");
}

/// The text of each element `css` matches, in document order.
async fn texts(client: &Client, css: &str) -> Vec<String> {
    let mut texts = Vec::new();
    for element in client.find_all(Locator::Css(css)).await.expect(css) {
        texts.push(element.text().await.expect("element text"));
    }
    texts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_signup_is_rendered_again_and_the_accepted_one_greets_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("saas.db").display());
    let config =
        AutumnConfig::from_toml_str(&format!("[database]\nurl = \"{url}\"\n")).expect("config");
    let served = Served::start(
        saas::app_with_delay(false, Duration::ZERO).with_config(saas::configure(config)),
    )
    .await;
    let address = served.address;

    let driver = Chromedriver::start();
    let profile = tempfile::tempdir().expect("temp dir");
    let client = browser(&driver, profile.path()).await;
    client
        .goto(&format!("http://{address}/signup"))
        .await
        .expect("GET /signup");
    let token = "input[name=_submit_token]";
    let first_token = value_of(&client, token).await;
    assert_eq!(first_token.len(), 32, "a token: {first_token:?}");

    fill(&client, "#email", "rita.example.com").await;
    fill(&client, "#name", "Rita Forms").await;
    fill(&client, "#password", "a long enough password").await;
    client
        .find(Locator::Css("form button"))
        .await
        .expect("the form's button")
        .click()
        .await
        .expect("submit");

    // Rendered again: the message in the field's own paragraph, next to it.
    let message = client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::XPath(
            "//input[@id='email']/following-sibling::span[@class='error']",
        ))
        .await
        .expect("the email's message next to the field")
        .text()
        .await
        .expect("message text");
    assert_eq!(message, "Enter an email address like name@example.com.");
    assert_eq!(navigation(&client).await, (422, 0), "422, not redirected");
    assert_eq!(
        texts(&client, "span.error").await,
        ["Enter an email address like name@example.com."],
        "only the email was wrong"
    );
    assert_eq!(
        client
            .find(Locator::Css("#email"))
            .await
            .expect("#email")
            .attr("aria-invalid")
            .await
            .expect("aria-invalid"),
        Some("true".to_owned())
    );
    assert_eq!(value_of(&client, "#email").await, "rita.example.com");
    assert_eq!(value_of(&client, "#name").await, "Rita Forms");
    assert_eq!(value_of(&client, "#password").await, "", "never shown back");
    let second_token = value_of(&client, token).await;
    assert_eq!(second_token.len(), 32, "a token: {second_token:?}");
    assert_ne!(second_token, first_token, "the re-render has a new token");

    fill(&client, "#email", "rita@example.com").await;
    fill(&client, "#password", "a long enough password").await;
    client
        .find(Locator::Css("form button"))
        .await
        .expect("the form's button")
        .click()
        .await
        .expect("submit");
    let flash = client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css("p.flash"))
        .await
        .expect("the welcome flash")
        .text()
        .await
        .expect("flash text");
    assert_eq!(flash, "Welcome, Rita Forms!");
    let current = client.current_url().await.expect("the URL");
    assert_eq!(current.path(), "/account");
    assert_eq!(navigation(&client).await, (200, 1), "a redirect, then 200");

    client.refresh().await.expect("reload /account");
    client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css("#who"))
        .await
        .expect("the account page again");
    assert_eq!(
        texts(&client, "p.flash").await,
        Vec::<String>::new(),
        "the flash is shown once"
    );

    let _ = client.close().await;
    served.stop().await;
}
