use autumn_web::prelude::*;

#[post("/orders", idempotent = "no")]
async fn place_order() {}

fn main() {}
