use autumn_web::prelude::*;

#[post("/orders", idempotent = false, idempotent = true)]
async fn place_order() {}

fn main() {}
