use autumn_web::prelude::*;

#[get("orders")]
async fn list_orders() {}

fn main() {}
