use autumn_web::prelude::*;

#[post("/payments", idempotent = false)]
async fn charge() -> &'static str {
    "charged"
}

#[post("/orders", idempotent = true)]
async fn place_order() -> &'static str {
    "placed"
}

fn main() {
    let routes = routes![charge, place_order];
    assert_eq!(routes.len(), 2);
}
