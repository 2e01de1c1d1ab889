#[autumn_web::main]
async fn main(port: u16) {
    let _ = port;
}
