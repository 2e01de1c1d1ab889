#[autumn_web::main]
fn main() {}
