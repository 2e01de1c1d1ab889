use autumn_web::prelude::*;

#[post]
async fn place_order() {}

#[put(idempotent = false)]
async fn replace_order() {}

fn main() {}
