use autumn_web::prelude::*;

#[get("/items")]
async fn list_items<T: Default>() -> String {
    String::new()
}

fn main() {}
