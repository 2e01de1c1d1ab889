use autumn_web::prelude::*;

#[post("/payments", idempotency = "required", idempotency_ttl = "500ms")]
async fn pay() {}

fn main() {}
