use autumn_web::prelude::*;

#[get("/orders/:id")]
async fn show_order() {}

fn main() {}
