use std::error::Error;

/// Attributes on `main` are kept.
#[autumn_web::main]
#[allow(clippy::unused_async)]
async fn main() -> Result<(), Box<dyn Error>> {
    let port: u16 = "8080".parse()?;
    assert_eq!(port, 8080);
    let later = async { 1 }.await;
    if later == 1 {
        return Ok(());
    }
    Err("unreachable".into())
}
