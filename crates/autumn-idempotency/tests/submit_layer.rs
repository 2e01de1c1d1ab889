//! The submit-token layer on a raw router: what it asks of the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use autumn_idempotency::submit::{SubmitToken, SubmitTokenLayer};
use autumn_idempotency::{
    Claim, IdempotencyEntry, IdempotencyFuture, IdempotencyRecord, IdempotencyStore,
    MemoryIdempotencyStore,
};
use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode};
use tower::ServiceExt as _;

/// A memory store that counts every call made to it.
struct Counting {
    inner: MemoryIdempotencyStore,
    calls: AtomicUsize,
}

impl Counting {
    fn new() -> Self {
        Self {
            inner: MemoryIdempotencyStore::new(Duration::from_secs(600)),
            calls: AtomicUsize::new(0),
        }
    }

    fn store(&self) -> &MemoryIdempotencyStore {
        &self.inner
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

impl IdempotencyStore for Counting {
    fn get<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<IdempotencyEntry>> {
        self.count();
        self.store().get(key)
    }

    fn set<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        body_hash: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count();
        self.store().set(key, owner, record, body_hash, ttl)
    }

    fn try_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count();
        self.store().try_lock(key, owner, ttl)
    }

    fn unlock<'a>(&'a self, key: &'a str, owner: &'a str) -> IdempotencyFuture<'a, ()> {
        self.count();
        self.store().unlock(key, owner)
    }

    fn claim<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, Claim> {
        self.count();
        self.store().claim(key, owner, ttl)
    }

    fn finish<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        body_hash: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        self.count();
        self.store().finish(key, owner, record, body_hash, ttl)
    }
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, String) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn minting_costs_no_store_call_and_a_submission_costs_two() {
    let store = Arc::new(Counting::new());
    let app = Router::new()
        .route(
            "/form",
            get(|token: SubmitToken| async move { token.token().to_owned() })
                .post(|| async { "created" }),
        )
        .layer(SubmitTokenLayer::new(store.clone()));

    let mut tokens = Vec::new();
    for _ in 0..3 {
        let (status, token) = send(
            &app,
            Request::get("/form").body(Body::empty()).expect("request"),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        tokens.push(token);
    }
    let unguarded = Request::post("/form")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("title=no+token"))
        .expect("request");
    send(&app, unguarded).await;
    assert_eq!(
        store.calls.load(Ordering::SeqCst),
        0,
        "minting and unguarded posts touch no store"
    );

    let guarded = || {
        Request::post("/form")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!("_submit_token={}", tokens[0])))
            .expect("request")
    };
    assert_eq!(
        send(&app, guarded()).await,
        (StatusCode::OK, "created".to_owned())
    );
    assert_eq!(store.calls.load(Ordering::SeqCst), 2, "claim + finish");
    send(&app, guarded()).await;
    assert_eq!(
        store.calls.load(Ordering::SeqCst),
        3,
        "a replay is one claim"
    );
}

#[tokio::test]
async fn a_full_memory_store_answers_503_with_retry_after() {
    let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)).with_max_entries(1));
    let app = Router::new()
        .route(
            "/form",
            get(|token: SubmitToken| async move { token.token().to_owned() })
                .post(|| async { "created" }),
        )
        .layer(SubmitTokenLayer::new(store));
    let mint = || async {
        send(
            &app,
            Request::get("/form").body(Body::empty()).expect("request"),
        )
        .await
        .1
    };
    let submit = |token: String| {
        Request::post("/form")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!("_submit_token={token}")))
            .expect("request")
    };
    let (first, second) = (mint().await, mint().await);
    assert_eq!(
        send(&app, submit(first.clone())).await,
        (StatusCode::OK, "created".to_owned())
    );

    let response = app
        .clone()
        .oneshot(submit(second))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        response.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert_eq!(
        response.headers().get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/problem+json"[..])
    );
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let problem: serde_json::Value = serde_json::from_slice(&body).expect("problem+json");
    assert_eq!(problem["code"], "submit_token_store_full");
    // The consumed token still replays from the full store.
    assert_eq!(
        send(&app, submit(first)).await,
        (StatusCode::OK, "created".to_owned())
    );
}
