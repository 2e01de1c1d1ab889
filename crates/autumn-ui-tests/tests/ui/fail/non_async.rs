use autumn_web::prelude::*;

#[get("/orders")]
fn list_orders() -> &'static str {
    "orders"
}

fn main() {}
