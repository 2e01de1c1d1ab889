use autumn_web::prelude::*;

#[post("/orders", retries = 3)]
async fn place_order() {}

fn main() {}
