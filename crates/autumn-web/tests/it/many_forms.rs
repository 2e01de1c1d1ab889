//! A page with many forms: each gets a submit token of its own, so a row of
//! delete buttons posting to one path deletes each row once, and posting
//! one row never answers for another: through the test client, and in
//! Chromium with the Back button.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken, submit_token_field};
use autumn_web::test::{TestApp, TestClient};

/// Deletes per (list, row): tests run in parallel, each with its list.
static DELETES: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn deletes(list: &str, row: u32) -> usize {
    DELETES
        .lock()
        .expect("deletes")
        .get(&format!("{list}/{row}"))
        .copied()
        .unwrap_or(0)
}

#[derive(serde::Deserialize)]
struct Delete {
    list: String,
    row: u32,
}

/// Twenty rows, each with a delete button in a form of its own, all posting
/// to one path.
#[get("/lists/{list}")]
async fn list(Path(list): Path<String>, token: SubmitToken, field: SubmitFormField) -> Markup {
    html! {
        @for row in 1..=20u32 {
            form method="POST" action="/rows/delete" {
                (submit_token_field(&token, &field))
                input type="hidden" name="list" value=(list);
                input type="hidden" name="row" value=(row);
                button type="submit" { "Delete row " (row) }
            }
        }
    }
}

#[post("/rows/delete")]
async fn delete_row(Form(delete): Form<Delete>) -> String {
    let mut deletes = DELETES.lock().expect("deletes");
    *deletes
        .entry(format!("{}/{}", delete.list, delete.row))
        .or_default() += 1;
    format!("deleted row {}", delete.row)
}

fn app() -> TestClient {
    TestApp::new().routes(routes![list, delete_row]).build()
}

/// The tokens of the page's forms, in order.
fn tokens(page: &str) -> Vec<String> {
    page.split("name=\"_submit_token\" value=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn each_form_on_a_page_gets_its_own_token_and_deletes_its_own_row_once() {
    let browser = app();
    let page = browser.get("/lists/groceries").send().await.text();
    let tokens = tokens(&page);
    assert_eq!(tokens.len(), 20, "one token per form: {page}");
    let mut distinct = tokens.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 20, "every form's token is its own");

    let delete = |row: u32| {
        let token = tokens[row as usize - 1].clone();
        let browser = &browser;
        async move {
            browser
                .post("/rows/delete")
                .header("accept", "application/json")
                .form(&[
                    ("_submit_token", token.as_str()),
                    ("list", "groceries"),
                    ("row", &row.to_string()),
                ])
                .send()
                .await
        }
    };
    assert_eq!(delete(3).await.text(), "deleted row 3");
    // Back to the same page and another row: it runs, and says so.
    let seventh = delete(7).await;
    assert_eq!(seventh.text(), "deleted row 7");
    assert_eq!(seventh.header("x-submit-token-replayed"), None);
    // The third row's form sent again (Back, then submit): its own replay.
    let again = delete(3).await;
    again.assert_header("x-submit-token-replayed", "true");
    assert_eq!(again.text(), "deleted row 3");
    assert_eq!(deletes("groceries", 3), 1);
    assert_eq!(deletes("groceries", 7), 1);
}

/// In Chromium: delete a row, go Back to the list, delete another row, go
/// Back and press the first row's button again. Each delete runs once, the
/// second is not answered with the first's response, and the resend of the
/// first is its replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_back_and_a_second_delete_runs_the_second_row() {
    use autumn_testkit::chromium::{Chromedriver, browser_with};
    use fantoccini::Locator;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind port 0");
    let address = listener.local_addr().expect("bound address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // Plain HTTP on loopback: the session cookie may not be Secure here.
    let config = autumn_web::config::AutumnConfig::from_toml_str("[session]\nsecure = false\n")
        .expect("config");
    tokio::spawn(
        autumn_web::app()
            .routes(routes![list, delete_row])
            .with_config(config)
            .serve(listener, async move {
                let _ = stopped.await;
            }),
    );
    let driver = Chromedriver::start();
    let profile = tempfile::tempdir().expect("a browser profile");
    // No back/forward cache: Back reloads the list from the cache or the
    // server as an ordinary navigation would, the harder case.
    let client = browser_with(&driver, profile.path(), &["--disable-back-forward-cache"]).await;
    let list = format!("http://{address}/lists/chromium");
    let press = |row: u32| {
        let client = client.clone();
        async move {
            let button = client
                .find(Locator::XPath(&format!(
                    "//button[normalize-space()='Delete row {row}']"
                )))
                .await
                .expect("the row's button");
            button.click().await.expect("a click");
            // The answer replaces the page.
            for _ in 0..100 {
                if let Ok(body) = client.find(Locator::Css("body")).await
                    && let Ok(text) = body.text().await
                    && text.starts_with("deleted row")
                {
                    return text;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("no answer to the delete of row {row}");
        }
    };
    client.goto(&list).await.expect("the list");
    assert_eq!(press(3).await, "deleted row 3");
    client.back().await.expect("back to the list");
    assert_eq!(press(7).await, "deleted row 7");
    client.back().await.expect("back to the list");
    assert_eq!(press(3).await, "deleted row 3");
    assert_eq!(deletes("chromium", 3), 1, "row 3 was deleted once");
    assert_eq!(deletes("chromium", 7), 1, "row 7 was deleted, once");
    client.close().await.expect("the browser closes");
    let _ = stop.send(());
}
