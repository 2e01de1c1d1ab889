use autumn_web::prelude::*;

#[derive(serde::Deserialize)]
struct NewOrder {
    item: String,
}

#[post("/orders")]
#[autumn_web::debug_handler]
async fn create(session: Session, Json(order): Json<NewOrder>) -> AutumnResult<String> {
    let _ = session;
    Ok(order.item)
}

#[get("/orders")]
#[autumn_web::debug_handler]
async fn list(headers: HeaderMap) -> impl IntoResponse {
    headers.len().to_string()
}

fn main() {
    let _ = routes![create, list];
}
