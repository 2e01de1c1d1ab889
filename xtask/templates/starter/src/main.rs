//! Serves the app on the address autumn.toml names.

#[autumn_web::main]
async fn main() {
    {{crate_name}}::app().run().await;
}
