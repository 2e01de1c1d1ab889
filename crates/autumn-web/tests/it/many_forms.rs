//! A page with many forms: each gets a submit token of its own, so a row of
//! delete buttons posting to one path deletes each row once, and posting
//! one row never answers for another.

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
