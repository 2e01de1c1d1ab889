//! `cargo run -p payments`: serves the payments API on `[server] port`
//! (`AUTUMN_SERVER__PORT`, 3000 by default), on `payments.db` unless
//! `AUTUMN_DATABASE__URL` names another database.
//!
//! `cargo run -p payments -- openapi [FILE]` writes its OpenAPI document.

#[autumn_web::main]
async fn main() {
    // `payments openapi [FILE]` writes the document and touches no
    // database.
    if std::env::args().nth(1).as_deref() == Some("openapi") {
        payments::app().run().await;
        return;
    }
    let config = match payments::config() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(1);
        }
    };
    if let Err(error) = payments::create_tables(&config).await {
        eprintln!("{error}");
        std::process::exit(1);
    }
    payments::app().with_config(config).run().await;
}
