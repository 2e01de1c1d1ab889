//! A handler that runs longer than the lock's in-flight TTL keeps its lock:
//! the run renews it while the handler runs, so a retry is refused (409)
//! instead of running the handler a second time.
//!
//! Two clocks move together here, and neither sleeps: the store's expiry
//! reads a `ManualClock`, and the heartbeat's timer runs on tokio's paused
//! clock (`start_paused`), moved with `tokio::time::advance`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::app::{Answer, Fixture, LOCK_TTL, RECORD_TTL};
use crate::support::faulty::{Faults, FaultyStore};
use crate::support::logs;
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::submit::{SubmitToken, SubmitTokenLayer};
use autumn_idempotency::{IdempotencyMetrics, MemoryIdempotencyStore};
use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode};
use tokio::sync::Notify;
use tower::ServiceExt as _;

/// Moves both clocks by `by`, then lets the runs woken by the tokio timer
/// (a renewal on the memory store completes at once) do their work.
async fn advance(clock: &ManualClock, by: Duration) {
    clock.advance(by);
    tokio::time::advance(by).await;
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}

/// A duplicate that must be refused. Were the handler to run for it, it
/// would wait at the gate: the timeout turns that into a failure, not a hang.
async fn refused(answer: impl Future<Output = Answer>) -> Answer {
    tokio::time::timeout(Duration::from_secs(1), answer)
        .await
        .expect("the duplicate was answered at once: the handler did not run for it")
}

#[tokio::test(start_paused = true)]
async fn a_handler_running_three_times_the_in_flight_ttl_runs_once() {
    let f = Fixture::new();
    let first = tokio::spawn(f.post("/gated").key("slow").send());
    f.started.notified().await;
    // Three lock TTLs, a duplicate every sixth of one.
    for _ in 0..18 {
        advance(&f.clock, LOCK_TTL / 6).await;
        let duplicate = refused(f.post("/gated").key("slow").send()).await;
        duplicate.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");
    }
    f.gate.notify_one();
    let first = first.await.expect("first request");
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.text(), "gated 1");
    let retry = f.post("/gated").key("slow").send().await;
    assert!(retry.replayed(), "{}", retry.text());
    assert_eq!(retry.text(), "gated 1");
    assert_eq!(f.runs(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_run_detached_by_a_hang_up_keeps_renewing_its_lock() {
    let f = Fixture::new();
    let client = tokio::spawn(f.post("/gated").key("gone").send());
    f.started.notified().await;
    client.abort(); // the client disconnects; the run goes on detached
    assert!(client.await.expect_err("aborted").is_cancelled());
    for _ in 0..9 {
        advance(&f.clock, LOCK_TTL / 6).await;
        let duplicate = refused(f.post("/gated").key("gone").send()).await;
        duplicate.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");
    }
    let finished = f.finished.notified();
    f.gate.notify_one();
    finished.await;
    let retry = tokio::time::timeout(Duration::from_secs(1), async {
        loop {
            let retry = f.post("/gated").key("gone").send().await;
            if retry.status != StatusCode::CONFLICT {
                break retry;
            }
            tokio::task::yield_now().await; // recording follows the handler
        }
    })
    .await
    .expect("the detached run recorded its response");
    assert!(retry.replayed(), "{}", retry.text());
    assert_eq!(retry.text(), "gated 1");
    assert_eq!(f.runs(), 1);
}

/// A fixture whose store fails `renew_lock` on demand, counting into `metrics`.
fn with_failing_renewals() -> (Fixture, Arc<Faults>, Arc<IdempotencyMetrics>) {
    let clock = ManualClock::new();
    let faults = Arc::new(Faults::default());
    let store = FaultyStore {
        inner: Arc::new(
            MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())),
        ),
        faults: faults.clone(),
        on_lock: Box::new(|| {}),
        renew_gate: None,
    };
    let metrics = Arc::new(IdempotencyMetrics::new());
    let f = Fixture::with_store(Arc::new(store), clock, |layer| {
        layer.with_metrics(metrics.clone())
    });
    (f, faults, metrics)
}

#[tokio::test(start_paused = true)]
async fn a_failed_renewal_is_logged_counted_and_the_run_still_recorded() {
    let (_guard, logs) = logs::capture();
    let (f, faults, metrics) = with_failing_renewals();
    let first = tokio::spawn(f.post("/gated").key("k").send());
    f.started.notified().await;
    faults.renew.store(true, Ordering::SeqCst); // the store fails one beat
    advance(&f.clock, LOCK_TTL / 3).await;
    assert_eq!(metrics.snapshot().lock_renewal_failures, 1);
    let logged = logs.lines_with("could not renew the in-flight lock");
    assert_eq!(logged.len(), 1, "{}", logs.text());
    assert!(logged[0].contains("ERROR"), "{}", logged[0]);
    // The storage key by its digest only: the key itself evicts or
    // replays where key administration reaches the store.
    assert!(
        logged[0].contains("storage_key_hash=sha256:"),
        "{}",
        logged[0]
    );
    assert!(!logged[0].contains("idem:v1:"), "{}", logged[0]);
    faults.renew.store(false, Ordering::SeqCst);
    // The lock was still ours: the next beat renews it, so a duplicate past
    // the first lock TTL is still refused.
    advance(&f.clock, LOCK_TTL / 3).await;
    advance(&f.clock, LOCK_TTL / 2).await;
    let duplicate = refused(f.post("/gated").key("k").send()).await;
    duplicate.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");

    f.gate.notify_one();
    let first = first.await.expect("first request");
    assert_eq!(
        (first.status, first.text().as_str()),
        (StatusCode::OK, "gated 1")
    );
    // Recorded: the retry is a replay, and the handler ran once.
    let retry = f.post("/gated").key("k").send().await;
    assert!(retry.replayed(), "{}", retry.text());
    assert_eq!(retry.text(), "gated 1");
    assert_eq!(f.runs(), 1);
    assert_eq!(metrics.snapshot().lock_renewal_failures, 1);
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_lock_was_taken_over_does_not_record_over_the_new_owner() {
    let (f, faults, metrics) = with_failing_renewals();
    let first = tokio::spawn(f.post("/gated").key("k").send());
    f.started.notified().await;
    // The store fails every renewal for longer than the lock lives: the
    // lock lapses under the running handler, and a retry takes the key.
    faults.renew.store(true, Ordering::SeqCst);
    for _ in 0..4 {
        advance(&f.clock, LOCK_TTL / 3).await;
    }
    assert!(metrics.snapshot().lock_renewal_failures >= 3);
    faults.renew.store(false, Ordering::SeqCst);
    let second = tokio::spawn(f.post("/gated").key("k").send());
    f.started.notified().await;
    assert_eq!(f.runs(), 2, "the lapsed key was taken by the retry");

    // Both finish, in whichever order the gate lets them.
    f.gate.notify_one();
    f.gate.notify_one();
    let (first, second) = (first.await.expect("first"), second.await.expect("second"));
    assert_eq!(first.text(), "gated 1");
    assert_eq!(second.text(), "gated 2");
    // The record is the new owner's: the first run's late `finish` wrote
    // nothing over its lock or its record.
    let retry = f.post("/gated").key("k").send().await;
    assert!(retry.replayed(), "{}", retry.text());
    assert_eq!(retry.text(), "gated 2");
    assert_eq!(f.runs(), 2);
}

/// A form whose POST waits at a gate, behind the submit-token layer with a
/// one-minute lock.
struct Form {
    app: Router,
    clock: ManualClock,
    runs: Arc<AtomicUsize>,
    started: Arc<Notify>,
    gate: Arc<Notify>,
}

impl Form {
    fn new() -> Self {
        let clock = ManualClock::new();
        let store =
            Arc::new(MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())));
        let (runs, started, gate) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
        );
        let (r, s, g) = (runs.clone(), started.clone(), gate.clone());
        let app = Router::new()
            .route(
                "/form",
                get(|token: SubmitToken| async move { token.token().to_owned() }).post(
                    move || async move {
                        let run = r.fetch_add(1, Ordering::SeqCst) + 1;
                        s.notify_one();
                        g.notified().await;
                        format!("saved {run}")
                    },
                ),
            )
            .layer(SubmitTokenLayer::new(store).with_in_flight_ttl(LOCK_TTL));
        Self {
            app,
            clock,
            runs,
            started,
            gate,
        }
    }

    async fn send(app: Router, request: Request<Body>) -> (StatusCode, Option<String>, String) {
        let response = app.oneshot(request).await.expect("infallible");
        let status = response.status();
        let replayed = response
            .headers()
            .get("x-submit-token-replayed")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        (
            status,
            replayed,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    async fn token(&self) -> String {
        let request = Request::get("/form").body(Body::empty()).expect("request");
        Self::send(self.app.clone(), request).await.2
    }

    fn submit(
        &self,
        token: &str,
    ) -> impl Future<Output = (StatusCode, Option<String>, String)> + use<> {
        let request = Request::post("/form")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!("_submit_token={token}")))
            .expect("request");
        Self::send(self.app.clone(), request)
    }
}

#[tokio::test(start_paused = true)]
async fn a_form_post_running_past_its_lock_ttl_runs_once() {
    let form = Form::new();
    let token = form.token().await;
    let first = tokio::spawn(form.submit(&token));
    form.started.notified().await;
    for _ in 0..12 {
        advance(&form.clock, LOCK_TTL / 6).await;
        let (status, _, body) = tokio::time::timeout(Duration::from_secs(1), form.submit(&token))
            .await
            .expect("the duplicate was answered at once: the handler did not run for it");
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert!(body.contains("submit_token_in_flight"), "{body}");
    }
    form.gate.notify_one();
    let (status, _, body) = first.await.expect("first submission");
    assert_eq!((status, body.as_str()), (StatusCode::OK, "saved 1"));
    let (status, replayed, body) = form.submit(&token).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "saved 1"));
    assert_eq!(replayed.as_deref(), Some("true"));
    assert_eq!(form.runs.load(Ordering::SeqCst), 1);
}
