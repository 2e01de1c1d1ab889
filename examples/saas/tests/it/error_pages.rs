//! A double-clicked slow form in a real browser (headless Chromium through
//! chromedriver) shows a readable HTML error page, not raw JSON.
//!
//! The app is served in-process on a loopback port: a form page with a
//! submit token, and a post handler that waits until the test lets it go,
//! with `security.submit_token.in_flight_wait_ms = 0`. The double-click's
//! second post arrives while the first still runs, so it is answered 409
//! `submit_token_in_flight` at once; the browser shows that answer, and
//! because the browser's `Accept` prefers HTML it is a page with the detail.
//!
//! The browser comes from `support/` (autumn-testkit's Chromium), shared with `forms.rs`.

use crate::support::chromium;

use std::time::Duration;

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use chromium::{Chromedriver, Served, browser};
use fantoccini::Locator;
use serde_json::json;
use tokio::sync::Semaphore;

/// The gap between the two clicks of a double-click.
const DOUBLE_CLICK_GAP: Duration = Duration::from_millis(50);
/// How long the browser gets to settle on a page.
const PAGE_WAIT: Duration = Duration::from_secs(10);

/// The post handler waits for a permit: the test adds one when it is done.
static RELEASE: Semaphore = Semaphore::const_new(0);

#[get("/order")]
async fn order_form(token: SubmitToken, field: SubmitFormField) -> Markup {
    html! {
        (maud::DOCTYPE)
        html { body {
            form method="POST" action="/order" {
                (submit_token_field(&token, &field))
                input type="text" name="item" value="book";
                button type="submit" { "Order" }
            }
        } }
    }
}

#[derive(serde::Deserialize)]
struct Item {
    item: String,
}

#[post("/order")]
async fn place_order(Form(order): Form<Item>) -> AutumnResult<Redirect> {
    let _permit = RELEASE
        .acquire()
        .await
        .map_err(|_| AutumnError::unavailable("closed"))?;
    Ok(Redirect::to(&format!("/ordered/{}", order.item)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_clicked_slow_form_shows_an_html_409_page() {
    let config = AutumnConfig::from_toml_str("[security.submit_token]\nin_flight_wait_ms = 0\n")
        .expect("config");
    let served = Served::start(
        autumn_web::app()
            .routes(routes![order_form, place_order])
            .with_config(config),
    )
    .await;
    let address = served.address;

    let driver = Chromedriver::start();
    let profile = tempfile::tempdir().expect("temp dir");
    let client = browser(&driver, profile.path()).await;
    client
        .goto(&format!("http://{address}/order"))
        .await
        .expect("GET /order");
    let button = client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css("form button"))
        .await
        .expect("the form's button");
    chromium::double_click(&client, &button, DOUBLE_CLICK_GAP).await;

    // The second post's answer: the 409 page, with the detail and the code.
    let detail = client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css("main p.detail"))
        .await
        .expect("an error page after the double-click")
        .text()
        .await
        .expect("detail text");
    assert_eq!(
        detail,
        "this form was already submitted and is still being processed; wait a moment and reload"
    );
    let heading = client
        .find(Locator::Css("h1"))
        .await
        .expect("a heading")
        .text()
        .await
        .expect("heading text");
    assert_eq!(heading, "409 Conflict");
    let content_type = client
        .execute("return document.contentType;", vec![])
        .await
        .expect("document.contentType");
    assert_eq!(content_type, json!("text/html"));
    let text = client
        .find(Locator::Css("body"))
        .await
        .expect("body")
        .text()
        .await
        .expect("page text");
    assert!(
        !text.trim_start().starts_with('{'),
        "raw JSON shown: {text}"
    );
    assert!(text.contains("submit_token_in_flight"), "{text}");

    let _ = client.close().await;
    // Let the first post finish, then stop the server.
    RELEASE.add_permits(1);
    served.stop().await;
}
