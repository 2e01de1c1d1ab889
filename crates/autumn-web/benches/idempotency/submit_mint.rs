//! What the submit-token layer costs a `GET` that renders a form, minting
//! included: the same small page with and without the layer. The rounds run
//! with the throughput scenarios (see `layer.rs`), before the stores grow.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use autumn_web::idempotency::MemoryIdempotencyStore;
use autumn_web::security::{SubmitToken, SubmitTokenLayer};
use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full};

use crate::harness::HttpClient;

/// A small form page around `token` (~200 bytes), the same size with or
/// without the layer.
fn form_page(token: &str) -> axum::response::Html<String> {
    axum::response::Html(format!(
        "<!doctype html><title>New comment</title><form method=\"POST\" action=\"/comments\">\
         <input type=\"hidden\" name=\"_submit_token\" value=\"{token}\">\
         <textarea name=\"body\"></textarea><button>Post</button></form>"
    ))
}

/// `GET /form` with no layer: the page around a fixed 32-character value.
pub(crate) fn bare_form_router() -> axum::Router {
    axum::Router::new().route(
        "/form",
        axum::routing::get(|| async { form_page("00000000000000000000000000000000") }),
    )
}

/// `GET /form` behind the submit-token layer: the handler takes a
/// `SubmitToken` and puts its token in the page, so a token is minted for
/// every request.
pub(crate) fn mint_form_router() -> axum::Router {
    let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)));
    axum::Router::new()
        .route(
            "/form",
            axum::routing::get(|token: SubmitToken| async move { form_page(token.token()) }),
        )
        .layer(SubmitTokenLayer::new(store))
}

pub(crate) fn form_uri(addr: SocketAddr) -> Uri {
    format!("http://{addr}/form").parse().expect("uri")
}

/// Sends `GET /form`, reads the whole page, and checks it is a 200 whose
/// token was minted (`private, no-cache`) or not (no `Cache-Control`).
pub(crate) async fn send_get(client: &HttpClient, uri: &Uri, expect_minted: bool) {
    let request = Request::get(uri.clone())
        .body(Full::new(Bytes::new()))
        .expect("valid request");
    let response = client.request(request).await.expect("request completes");
    let status = response.status();
    let minted = response
        .headers()
        .get(http::header::CACHE_CONTROL)
        .is_some_and(|v| v == "private, no-cache");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body completes")
        .to_bytes();
    assert_eq!(status, StatusCode::OK, "unexpected status: {body:?}");
    assert_eq!(minted, expect_minted, "minted should be {expect_minted}");
}
