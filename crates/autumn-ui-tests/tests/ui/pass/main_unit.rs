use autumn_web::prelude::*;

#[get("/orders")]
async fn list_orders() -> &'static str {
    "orders"
}

async fn ready() -> usize {
    routes![list_orders].len()
}

#[autumn_web::main]
async fn main() {
    assert_eq!(ready().await, 1);
}
