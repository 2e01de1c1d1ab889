//! `cargo run -p orders`: serves the orders API on `[server] port`
//! (`AUTUMN_SERVER__PORT`, 3000 by default).
//!
//! `cargo run -p orders -- create-token NAME` prints a new API token acting
//! for NAME, once, and exits; `ORDERS_REQUIRE_TOKEN=true` makes the API
//! require one. Tokens live in the app database (`AUTUMN_DATABASE__URL`).
//!
//! `cargo run -p orders -- idempotency inspect|evict KEY --path /orders`
//! looks a key up in the app's idempotency store, or evicts it (`run()`
//! answers the command).
//!
//! `cargo run -p orders -- openapi [FILE]` writes its OpenAPI document to
//! FILE, or to standard output.

use autumn_web::config::AutumnConfig;

#[autumn_web::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {}
        // Key administration: `run()` answers it, on the app's own store.
        [command, ..] if command == "idempotency" || command == "openapi" => {}
        [command, name] if command == "create-token" => {
            let created = match AutumnConfig::load() {
                Ok(config) => orders::create_token(&config, name).await,
                Err(error) => Err(error.to_string()),
            };
            match created {
                Ok(created) => {
                    eprintln!(
                        "API token {} for {name}; it is shown once, keep it now:",
                        created.id()
                    );
                    println!("{}", created.token());
                    return;
                }
                Err(error) => {
                    eprintln!("{error}");
                    std::process::exit(1);
                }
            }
        }
        _ => {
            eprintln!(
                "usage: orders [create-token NAME | idempotency inspect|evict KEY --path PATH | openapi [FILE]]"
            );
            std::process::exit(2);
        }
    }
    if !orders::require_token() {
        orders::app(orders::Orders::default()).run().await;
        return;
    }
    let config = match AutumnConfig::load() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(1);
        }
    };
    match orders::tokens(&config) {
        Ok(tokens) => {
            orders::token_app(orders::Orders::default(), tokens)
                .with_config(config)
                .run()
                .await;
        }
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(1);
        }
    }
}
