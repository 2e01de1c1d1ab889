//! `cargo run -p saas`: serves the accounts app on `[server] port`
//! (`AUTUMN_SERVER__PORT`, 3000 by default), keeping users in
//! `sqlite://saas.db` unless `[database] url` says otherwise.
//!
//! `SAAS_DOUBLE_SUBMIT_GUARD=1` adds the browser-side double-submit guard;
//! `SAAS_POST_DELAY_MS` slows the form posts down for end-to-end tests.

use autumn_web::config::AutumnConfig;

#[autumn_web::main]
async fn main() {
    let config = match AutumnConfig::load() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("autumn: {error}");
            std::process::exit(1);
        }
    };
    saas::app(saas::guard_from_env())
        .with_config(saas::configure(config))
        .run()
        .await;
}
