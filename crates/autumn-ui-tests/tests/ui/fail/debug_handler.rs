use autumn_web::prelude::*;

#[derive(serde::Deserialize)]
struct NewOrder {
    item: String,
}

struct NotAResponse;

// The body extractor is not last, and the output is no response: each
// mistake gets an error of its own, at its own place.
#[post("/orders")]
#[autumn_web::debug_handler]
async fn create(Json(order): Json<NewOrder>, headers: HeaderMap) -> NotAResponse {
    let _ = (order.item, headers);
    NotAResponse
}

fn main() {}
