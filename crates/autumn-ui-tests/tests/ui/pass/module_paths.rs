use autumn_web::prelude::*;

mod auth {
    use autumn_web::prelude::*;

    #[post("/signup")]
    pub async fn signup() -> &'static str {
        "welcome"
    }

    pub mod admin {
        use autumn_web::prelude::*;

        #[delete("/users/{id}")]
        pub(crate) async fn remove_user() {}
    }
}

#[get("/")]
async fn index() -> &'static str {
    "index"
}

fn main() {
    // Module paths, a trailing comma, and an empty list.
    let routes = routes![index, auth::signup, crate::auth::admin::remove_user,];
    assert_eq!(routes.len(), 3);
    let none = routes![];
    assert!(none.is_empty());
}
