//! `cargo run -p orders`: serves the orders API on `[server] port`
//! (`AUTUMN_SERVER__PORT`, 3000 by default).

#[autumn_web::main]
async fn main() {
    orders::app(orders::Orders::default()).run().await;
}
