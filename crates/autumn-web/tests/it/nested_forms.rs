//! A master-detail form through the real launch path: `NestedChangesetForm`
//! with one submit token for the parent and its rows, the add and remove
//! buttons (GET, no token spent), per-child errors under indexed names in
//! the 422 re-render, and a double submission saving once.

use crate::support::token_in;
use std::sync::Mutex;

use autumn_web::config::AutumnConfig;
use autumn_web::forms::{Changeset, FieldErrors, FormPage, NestedChangesetForm, NestedFormData};
use autumn_web::prelude::*;
use autumn_web::security::{SubmitFormField, SubmitToken};
use autumn_web::test::{TestApp, TestClient};

/// An order: the customer and its items (description, quantity).
type Order = (String, Vec<(String, u32)>);

/// Saved orders.
static SAVED: Mutex<Vec<Order>> = Mutex::new(Vec::new());

fn saved_for(customer: &str) -> usize {
    SAVED
        .lock()
        .expect("saved")
        .iter()
        .filter(|(c, _)| c == customer)
        .count()
}

fn render(
    data: &NestedFormData,
    errors: &FieldErrors,
    token: &SubmitToken,
    field: &SubmitFormField,
) -> Markup {
    NestedChangesetForm::new("/orders", "/orders/new", "items", data, errors)
        .with_submit_token(token, field)
        .parent(html! {
            input name="customer" value=(data.field("customer"));
            @if let Some(message) = errors.get("customer") { span .error { (message) } }
        })
        .add_label("Add item")
        .render(|row| {
            html! {
                input name=(row.name("description")) value=(row.value("description"));
                input name=(row.name("quantity")) value=(row.value("quantity"));
                @if let Some(message) = row.error("quantity") { span .error { (message) } }
            }
        })
}

#[get("/orders/new")]
async fn new_order(
    token: SubmitToken,
    field: SubmitFormField,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Markup {
    let data = NestedFormData::from_pairs(pairs, "items").with_min_rows(1);
    render(&data, &FieldErrors::new(), &token, &field)
}

fn validate(data: &NestedFormData) -> Result<Order, FieldErrors> {
    let mut order = Changeset::new();
    let customer = order.required("customer", data.field("customer"));
    let mut items = Vec::new();
    for (index, child) in data.children().iter().enumerate() {
        let mut item = Changeset::nested("items", index);
        let description = item.required(
            "description",
            child.get("description").map_or("", String::as_str),
        );
        let quantity = item.parse::<u32>(
            "quantity",
            child.get("quantity").map_or("", String::as_str),
            "Enter a whole number.",
        );
        if let Some(quantity) = quantity {
            item.check("quantity", quantity > 0, "At least 1.");
        }
        if let (Some(description), Some(quantity)) = (description, quantity) {
            items.push((description, quantity));
        }
        order.merge(item);
    }
    order.check(
        "items",
        !data.children().is_empty(),
        "Add at least one item.",
    );
    order.finish(|| Some((customer?, items)))
}

#[post("/orders")]
async fn create_order(
    token: SubmitToken,
    field: SubmitFormField,
    Form(pairs): Form<Vec<(String, String)>>,
) -> FormPage {
    let data = NestedFormData::from_pairs(pairs, "items");
    match validate(&data) {
        Ok(order) => {
            SAVED.lock().expect("saved").push(order);
            FormPage::redirect("/orders/new")
        }
        Err(errors) => FormPage::invalid(render(&data, &errors, &token, &field)),
    }
}

fn app() -> TestClient {
    TestApp::new()
        .routes(routes![new_order, create_order])
        .with_config(AutumnConfig::default())
        .build()
}

#[tokio::test]
async fn the_add_and_remove_buttons_re_render_the_rows_without_spending_a_token() {
    let client = app();
    let page = client.get("/orders/new").send().await.text();
    assert!(page.contains(r#"name="items[0][description]""#), "{page}");
    assert!(!page.contains("items[1]"), "{page}");
    let token = token_in(&page);
    // What the browser sends for "Add item": the fields, with GET.
    let added = client
        .get(&format!(
            "/orders/new?_submit_token={token}&customer=ACME&items%5B0%5D%5Bdescription%5D=Ink&items%5B0%5D%5Bquantity%5D=2&_add_row=1"
        ))
        .send()
        .await
        .text();
    assert!(added.contains(r#"name="items[1][quantity]""#), "{added}");
    assert!(added.contains(r#"value="Ink""#) && added.contains(r#"value="ACME""#));
    let removed = client
        .get("/orders/new?items%5B0%5D%5Bdescription%5D=Ink&items%5B1%5D%5Bdescription%5D=Paper&_remove_row=0")
        .send()
        .await
        .text();
    assert!(
        removed.contains(r#"value="Paper""#) && !removed.contains(r#"value="Ink""#),
        "{removed}"
    );
    assert!(
        !removed.contains("items[1]"),
        "the rows are renumbered: {removed}"
    );
}

#[tokio::test]
async fn a_child_error_is_shown_on_its_row_and_a_double_submit_saves_once() {
    let client = app();
    let token = token_in(&client.get("/orders/new").send().await.text());
    let post = |token: String, quantity: &'static str| {
        client.post("/orders").form(&[
            ("_submit_token", token.as_str()),
            ("customer", "Nested Ltd"),
            ("items[0][description]", "Ink"),
            ("items[0][quantity]", "2"),
            ("items[1][description]", "Paper"),
            ("items[1][quantity]", quantity),
        ])
    };
    let rejected = post(token, "many").send().await;
    rejected.assert_status(422);
    let page = rejected.text();
    assert!(page.contains("Enter a whole number."), "{page}");
    // The error sits in the second row, after its input and before the
    // third row's (there is none) or the add button.
    let row = page.find(r#"data-nested-row="1""#).expect("row 1");
    assert!(page[row..].find("Enter a whole number.").is_some());
    assert!(
        page[..row].find("Enter a whole number.").is_none(),
        "not on row 0"
    );
    assert_eq!(saved_for("Nested Ltd"), 0);

    let fresh = token_in(&page);
    let (first, second) = tokio::join!(post(fresh.clone(), "3").send(), post(fresh, "3").send());
    first.assert_status(303);
    second.assert_status(303);
    assert_eq!(
        saved_for("Nested Ltd"),
        1,
        "one order for one rendered form"
    );
    let saved = SAVED.lock().expect("saved").clone();
    let (_, items) = saved
        .iter()
        .find(|(c, _)| c == "Nested Ltd")
        .expect("saved");
    assert_eq!(items, &vec![("Ink".to_owned(), 2), ("Paper".to_owned(), 3)]);
}
