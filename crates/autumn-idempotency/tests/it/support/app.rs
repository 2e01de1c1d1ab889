//! A small app behind the idempotency layer, whose handlers count their runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{IdempotencyLayer, IdempotencyStore, MemoryIdempotencyStore};
use axum::Router;
use axum::body::Body;
use axum::response::IntoResponse;
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt as _;
use tokio::sync::Notify;
use tower::ServiceExt as _;

pub const LOCK_TTL: Duration = Duration::from_secs(60);
pub const RECORD_TTL: Duration = Duration::from_secs(3600);

/// An app whose routes count how often their handler ran.
#[derive(Clone)]
pub struct Fixture {
    pub app: Router,
    pub runs: Arc<AtomicUsize>,
    pub clock: ManualClock,
    pub store: Arc<dyn IdempotencyStore>,
    /// `/gated` waits for this before answering.
    pub gate: Arc<Notify>,
    /// `/gated` notifies this once it has started.
    pub started: Arc<Notify>,
    /// `/gated` notifies this once it has finished (even if nobody waits).
    pub finished: Arc<Notify>,
}

impl Fixture {
    pub fn new() -> Self {
        let clock = ManualClock::new();
        let store =
            Arc::new(MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())));
        Self::with_store(store, clock, |layer| layer)
    }

    pub fn with_store(
        store: Arc<dyn IdempotencyStore>,
        clock: ManualClock,
        configure: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer,
    ) -> Self {
        let runs = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Notify::new());
        let started = Arc::new(Notify::new());
        let finished = Arc::new(Notify::new());
        let layer = configure(
            IdempotencyLayer::new(store.clone())
                .with_ttl(RECORD_TTL)
                .with_in_flight_ttl(LOCK_TTL)
                .with_max_body_bytes(1024)
                .with_clock(Arc::new(clock.clone())),
        );
        let app = routes(&runs, &gate, &started, &finished).layer(layer);
        Self {
            app,
            runs,
            clock,
            store,
            gate,
            started,
            finished,
        }
    }

    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    pub fn post(&self, path: &str) -> Call {
        Call::new(self.app.clone(), "POST", path)
    }
}

/// `n` concurrent POSTs of one key to `/orders`, spread in turn over
/// `replicas` (one app, or several sharing a store); asserts the handler ran
/// once over all of them, one answer was the first run and every other a
/// replay or a 409 telling when to retry.
pub async fn burst(replicas: &[&Fixture], n: usize) {
    let requests: Vec<_> = (0..n)
        .map(|i| {
            let replica = replicas[i % replicas.len()];
            tokio::spawn(replica.post("/orders").key("burst").body("same").send())
        })
        .collect();
    let (mut created, mut replays, mut conflicts) = (0, 0, 0);
    for request in requests {
        let answer = request.await.expect("request");
        match answer.status {
            StatusCode::CREATED if answer.replayed() => replays += 1,
            StatusCode::CREATED => created += 1,
            StatusCode::CONFLICT => {
                assert_eq!(answer.header("retry-after"), Some("1"));
                answer.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");
                conflicts += 1;
            }
            other => panic!("unexpected {other}: {}", answer.text()),
        }
    }
    let runs: usize = replicas.iter().map(|replica| replica.runs()).sum();
    assert_eq!(runs, 1, "exactly one run over every replica");
    assert_eq!(created, 1, "exactly one first-time answer");
    assert_eq!(replays + conflicts, n - 1);
}

/// The routes, each counting into `runs`.
pub fn routes(
    runs: &Arc<AtomicUsize>,
    gate: &Arc<Notify>,
    started: &Arc<Notify>,
    finished: &Arc<Notify>,
) -> Router {
    let count = |runs: &Arc<AtomicUsize>| runs.fetch_add(1, Ordering::SeqCst) + 1;
    let (r1, r2, r3, r4, r5, r6, r7) = (
        runs.clone(),
        runs.clone(),
        runs.clone(),
        runs.clone(),
        runs.clone(),
        runs.clone(),
        runs.clone(),
    );
    let (gate, started, finished) = (gate.clone(), started.clone(), finished.clone());
    Router::new()
        .route(
            "/orders",
            post(move |body: String| async move {
                let run = count(&r1);
                (
                    StatusCode::CREATED,
                    [
                        ("content-type", "application/json"),
                        ("set-cookie", "flash=created; Path=/"),
                        ("x-run", &*run.to_string()),
                    ],
                    format!(r#"{{"run":{run},"echo":{body:?}}}"#),
                )
                    .into_response()
            })
            .put(move || async move { format!("put {}", count(&r2)) })
            .delete(move || async move { format!("delete {}", count(&r7)) }),
        )
        .route(
            "/fail",
            post(move || async move {
                count(&r3);
                (StatusCode::INTERNAL_SERVER_ERROR, "boom")
            }),
        )
        .route(
            "/invalid",
            post(move || async move {
                count(&r4);
                (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
            }),
        )
        .route(
            "/panic",
            post(move || async move {
                if count(&r5) == 1 {
                    panic!("first run panics");
                }
                "recovered"
            }),
        )
        .route(
            "/redirect",
            post(move || async move {
                let run = count(&r6);
                axum::response::Redirect::to(&format!("/done/{run}"))
            }),
        )
        .route(
            "/gated",
            post({
                let runs = runs.clone();
                move || async move {
                    let run = count(&runs);
                    started.notify_one();
                    gate.notified().await;
                    finished.notify_one();
                    format!("gated {run}")
                }
            }),
        )
}

/// One request being built.
pub struct Call {
    app: Router,
    request: http::request::Builder,
    body: Bytes,
}

impl Call {
    pub fn new(app: Router, method: &str, path: &str) -> Self {
        Self {
            app,
            request: Request::builder().method(method).uri(path),
            body: Bytes::new(),
        }
    }

    pub fn key(self, key: &str) -> Self {
        self.header("idempotency-key", key)
    }

    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.request = self.request.header(name, value.as_ref());
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    pub async fn send(self) -> Answer {
        let request = self
            .request
            .body(Body::from(self.body))
            .expect("valid request");
        let response = self.app.oneshot(request).await.expect("infallible");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }
}

/// A whole response.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn replayed(&self) -> bool {
        self.header("x-idempotent-replayed") == Some("true")
    }

    /// Asserts a problem+json answer with this status and code.
    #[track_caller]
    pub fn assert_problem(&self, status: StatusCode, code: &str) {
        assert_eq!(self.status, status, "body: {}", self.text());
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let problem: serde_json::Value = serde_json::from_slice(&self.body).expect("problem JSON");
        assert_eq!(problem["code"], code, "{problem}");
        assert_eq!(problem["status"], status.as_u16());
        assert!(
            problem["detail"].as_str().is_some_and(|d| d.len() > 20),
            "a detail a developer can act on: {problem}"
        );
    }
}
