//! The submit-token layer on a raw router: what it asks of the store.

mod support;

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
use support::faulty::{Faults, FaultyStore};
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

/// A form app over `store` whose POST counts its runs and answers `size`
/// bytes.
fn form_app(
    store: Arc<dyn IdempotencyStore>,
    size: usize,
    configure: impl FnOnce(SubmitTokenLayer) -> SubmitTokenLayer,
) -> (Router, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let app = Router::new()
        .route(
            "/form",
            get(|token: SubmitToken| async move { token.token().to_owned() }).post(
                move || async move {
                    let run = counted.fetch_add(1, Ordering::SeqCst) + 1;
                    format!("{run}{}", ".".repeat(size))
                },
            ),
        )
        .layer(configure(SubmitTokenLayer::new(store)));
    (app, runs)
}

async fn mint(app: &Router) -> String {
    send(
        app,
        Request::get("/form").body(Body::empty()).expect("request"),
    )
    .await
    .1
}

fn post(token: &str) -> Request<Body> {
    Request::post("/form")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("_submit_token={token}")))
        .expect("request")
}

#[tokio::test]
async fn a_response_over_the_record_limit_is_sent_whole_and_releases_the_token() {
    let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)));
    let metrics = Arc::new(autumn_idempotency::IdempotencyMetrics::new());
    let (app, runs) = form_app(store, 100, |layer| {
        layer
            .with_max_record_bytes(50)
            .with_metrics(metrics.clone())
    });
    let token = mint(&app).await;
    let (status, body) = send(&app, post(&token)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, format!("1{}", ".".repeat(100)), "every byte is sent");
    let (_, again) = send(&app, post(&token)).await;
    assert!(again.starts_with('2'), "not recorded: the token ran again");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(metrics.snapshot().unrecorded_too_large, 2);
}

#[tokio::test]
async fn a_claim_that_locks_then_fails_leaves_the_token_free() {
    let faults = Arc::new(Faults::default());
    let store = Arc::new(FaultyStore {
        inner: Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600))),
        faults: faults.clone(),
        on_lock: Box::new(|| {}),
        renew_gate: None,
    });
    let (app, runs) = form_app(store, 0, |layer| layer);
    let token = mint(&app).await;
    // The store took the lock but its reply was lost.
    faults.lock_then_fail.store(true, Ordering::SeqCst);
    let (status, _) = send(&app, post(&token)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    faults.lock_then_fail.store(false, Ordering::SeqCst);
    // Without the release, the token would stay locked for its 24 h TTL.
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let answer = send(&app, post(&token)).await;
            if answer.0 != StatusCode::CONFLICT {
                break answer;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the failed claim was released: the post ran");
    assert_eq!(answer, (StatusCode::OK, "1".to_owned()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
