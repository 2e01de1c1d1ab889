use autumn_web::prelude::*;

fn build() -> usize {
    // Route handlers declared inside a function body (as in a test).
    #[get("/health")]
    async fn health() -> &'static str {
        "ok"
    }

    #[post("/echo", idempotent = false)]
    async fn echo(body: String) -> String {
        body
    }

    routes![health, echo].len()
}

fn main() {
    assert_eq!(build(), 2);
}
