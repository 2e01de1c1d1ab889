#[autumn_web::main(flavor = "current_thread")]
async fn main() {}
