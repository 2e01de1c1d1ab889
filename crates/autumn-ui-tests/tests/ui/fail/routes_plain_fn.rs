use autumn_web::prelude::*;

#[get("/orders")]
async fn list_orders() {}

async fn not_a_route() {}

fn main() {
    let _routes = routes![list_orders, not_a_route];
}
