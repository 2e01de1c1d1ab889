use autumn_web::prelude::*;

#[get("/orders")]
async fn list_orders() -> &'static str {
    "orders"
}

#[post("/orders")]
async fn place_order() -> &'static str {
    "placed"
}

#[put("/orders/{id}")]
async fn replace_order() -> &'static str {
    "replaced"
}

#[patch("/orders/{id}")]
async fn amend_order() -> &'static str {
    "amended"
}

#[delete("/orders/{id}")]
async fn cancel_order() -> &'static str {
    "cancelled"
}

fn main() {
    let routes = routes![
        list_orders,
        place_order,
        replace_order,
        amend_order,
        cancel_order
    ];
    assert_eq!(routes.len(), 5);
}
