use autumn_web::prelude::*;

#[derive(serde::Deserialize, serde::Serialize)]
struct NewOrder {
    item: String,
    quantity: u32,
}

#[derive(serde::Deserialize)]
struct Login {
    user: String,
}

#[post("/orders")]
async fn place_order(Json(order): Json<NewOrder>) -> Json<NewOrder> {
    Json(order)
}

#[post("/login")]
pub(crate) async fn login(Form(login): Form<Login>) -> String {
    login.user
}

fn main() {
    let routes = routes![place_order, login];
    assert_eq!(routes.len(), 2);
}
