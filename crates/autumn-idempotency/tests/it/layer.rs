//! The Idempotency-Key layer on a raw axum router, over the memory store.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::app::{Call, Fixture, LOCK_TTL, RECORD_TTL};
use crate::support::faulty::{Faults, FaultyStore, Gate};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::{IdempotencyStore, MemoryIdempotencyStore};
use http::StatusCode;

#[tokio::test]
async fn a_retry_replays_the_first_response_byte_for_byte() {
    let f = Fixture::new();
    let first = f.post("/orders").key("k1").body("hello").send().await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    assert_eq!(f.runs(), 1);

    let retry = f.post("/orders").key("k1").body("hello").send().await;
    assert_eq!(f.runs(), 1, "the handler did not run again");
    assert!(retry.replayed());
    assert_eq!(retry.status, first.status);
    assert_eq!(retry.body, first.body);
    let mut replay_headers = retry.headers.clone();
    replay_headers.remove("x-idempotent-replayed");
    // The first run says the key was honoured; the replay says it is one.
    let mut first_headers = first.headers.clone();
    assert_eq!(
        first_headers
            .remove("x-idempotent-honoured")
            .as_ref()
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert_eq!(
        replay_headers, first_headers,
        "same headers, Set-Cookie included"
    );
    assert_eq!(retry.header("set-cookie"), Some("flash=created; Path=/"));
}

#[tokio::test]
async fn quoted_and_bare_forms_of_a_key_are_the_same_key() {
    let f = Fixture::new();
    f.post("/orders").key("abc").body("x").send().await;
    let retry = f.post("/orders").key("\"abc\"").body("x").send().await;
    assert!(retry.replayed());
    assert_eq!(f.runs(), 1);
}

#[tokio::test]
async fn the_same_key_with_another_body_is_422_and_runs_nothing() {
    let f = Fixture::new();
    f.post("/orders").key("k").body("one").send().await;
    let other = f.post("/orders").key("k").body("two").send().await;
    other.assert_problem(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused");
    let other_type = f
        .post("/orders")
        .key("k")
        .header("content-type", "text/plain")
        .body("one")
        .send()
        .await;
    assert_eq!(other_type.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(f.runs(), 1);
    // The record is untouched: the original request still replays.
    assert!(
        f.post("/orders")
            .key("k")
            .body("one")
            .send()
            .await
            .replayed()
    );
}

#[tokio::test]
async fn keys_are_per_method_and_path_and_another_query_is_another_request() {
    let f = Fixture::new();
    f.post("/orders").key("k").send().await;
    let put = Call::new(f.app.clone(), "PUT", "/orders")
        .key("k")
        .send()
        .await;
    assert!(!put.replayed());
    assert_eq!(f.runs(), 2);
    // The query is not part of the storage key but is part of the
    // fingerprint: the same key with another query is a reused key.
    let other_query = f.post("/orders?x=1").key("k").send().await;
    assert_eq!(other_query.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(f.runs(), 2);
}

#[tokio::test]
async fn a_duplicate_while_the_first_runs_gets_409_with_retry_after() {
    let f = Fixture::new();
    let first = tokio::spawn(f.post("/gated").key("k").send());
    f.started.notified().await;

    let duplicate = f.post("/gated").key("k").send().await;
    duplicate.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");
    assert_eq!(duplicate.header("retry-after"), Some("1"));

    f.gate.notify_one();
    let first = first.await.expect("first request");
    assert_eq!(first.status, StatusCode::OK);
    assert!(f.post("/gated").key("k").send().await.replayed());
    assert_eq!(f.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_duplicates_run_the_handler_once() {
    let f = Fixture::new();
    crate::support::app::burst(&[&f], 100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_first_is_held_every_duplicate_is_a_409() {
    let f = Fixture::new();
    let first = tokio::spawn(f.post("/gated").key("held").send());
    f.started.notified().await;
    let duplicates: Vec<_> = (0..99)
        .map(|_| tokio::spawn(f.post("/gated").key("held").send()))
        .collect();
    for duplicate in duplicates {
        let answer = duplicate.await.expect("duplicate");
        assert_eq!(answer.status, StatusCode::CONFLICT);
        assert_eq!(answer.header("retry-after"), Some("1"));
    }
    f.gate.notify_one();
    assert_eq!(first.await.expect("first").status, StatusCode::OK);
    assert_eq!(f.runs(), 1);
}

#[tokio::test]
async fn error_responses_are_not_recorded_and_release_the_key() {
    let f = Fixture::new();
    for path in ["/fail", "/invalid"] {
        let first = f.post(path).key("k").send().await;
        assert!(first.status.is_client_error() || first.status.is_server_error());
        let again = f.post(path).key("k").send().await;
        assert_eq!(again.status, first.status);
        assert!(!again.replayed());
    }
    assert_eq!(f.runs(), 4, "every attempt ran");
}

#[tokio::test]
async fn redirects_are_recorded_and_replayed() {
    let f = Fixture::new();
    let first = f.post("/redirect").key("k").send().await;
    assert_eq!(first.status, StatusCode::SEE_OTHER);
    let retry = f.post("/redirect").key("k").send().await;
    assert!(retry.replayed());
    assert_eq!(retry.header("location"), Some("/done/1"));
    assert_eq!(f.runs(), 1);
}

#[tokio::test]
async fn a_panicking_handler_answers_500_and_releases_the_key() {
    let f = Fixture::new();
    let first = f.post("/panic").key("k").send().await;
    first.assert_problem(StatusCode::INTERNAL_SERVER_ERROR, "internal_error");
    let retry = f.post("/panic").key("k").send().await;
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.text(), "recovered");
    assert_eq!(f.runs(), 2);
}

#[tokio::test]
async fn recording_server_errors_replays_a_5xx_but_never_a_4xx_or_a_panic() {
    use autumn_idempotency::layer::{IdempotencyPolicy, RecordErrors};

    let clock = ManualClock::new();
    let store =
        Arc::new(MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())));
    let f = Fixture::with_store(store, clock, |layer| {
        layer
            .with_policy(&IdempotencyPolicy::new().with_record_errors(RecordErrors::Server))
            .expect("a valid policy")
    });
    // A panic is a bug, not an answer: released, so the retry runs. (First:
    // `/panic` panics on the fixture's first run.)
    let panicked = f.post("/panic").key("p").send().await;
    panicked.assert_problem(StatusCode::INTERNAL_SERVER_ERROR, "internal_error");
    let recovered = f.post("/panic").key("p").send().await;
    assert_eq!(recovered.text(), "recovered");
    assert_eq!(f.runs(), 2);

    let first = f.post("/fail").key("k").send().await;
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    let retry = f.post("/fail").key("k").send().await;
    assert_eq!(retry.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(retry.replayed(), "the 5xx is replayed");
    assert_eq!(retry.text(), "boom");
    assert_eq!(f.runs(), 3);

    // A 4xx says the request was wrong: it may be fixed and sent again.
    f.post("/invalid").key("i").send().await;
    let again = f.post("/invalid").key("i").send().await;
    assert_eq!(again.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(!again.replayed());
    assert_eq!(f.runs(), 5);

    // A route policy that says "none" turns the app's setting off.
    let clock = ManualClock::new();
    let store =
        Arc::new(MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())));
    let off = Fixture::with_store(store, clock, |layer| {
        layer
            .with_policy(&IdempotencyPolicy::new().with_record_errors(RecordErrors::Server))
            .and_then(|layer| {
                layer.with_policy(&IdempotencyPolicy::new().with_record_errors(RecordErrors::None))
            })
            .expect("valid policies")
    });
    off.post("/fail").key("k").send().await;
    assert!(!off.post("/fail").key("k").send().await.replayed());
    assert_eq!(off.runs(), 2);
}

#[tokio::test]
async fn a_service_that_panics_when_called_answers_500_and_releases_the_key() {
    use std::sync::atomic::AtomicUsize;
    use tower::ServiceExt as _;

    // `service_fn` runs its closure inside `call`, before any future exists.
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let inner = tower::service_fn(move |_request: axum::extract::Request| {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("call panics");
        }
        async { Ok::<_, std::convert::Infallible>(axum::response::Response::new("ran".into())) }
    });
    let store = Arc::new(MemoryIdempotencyStore::new(RECORD_TTL));
    let service = tower::ServiceBuilder::new()
        .layer(autumn_idempotency::IdempotencyLayer::new(store))
        .service(inner);
    let request = || {
        http::Request::post("/x")
            .header("idempotency-key", "k")
            .body(axum::body::Body::empty())
            .expect("request")
    };
    let first = service
        .clone()
        .oneshot(request())
        .await
        .expect("infallible");
    assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let retry = service
        .clone()
        .oneshot(request())
        .await
        .expect("infallible");
    assert_eq!(retry.status(), StatusCode::OK, "the key was released");
    let replay = service.oneshot(request()).await.expect("infallible");
    assert_eq!(replay.headers()["x-idempotent-replayed"], "true");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn a_crashed_request_keeps_the_key_locked_until_the_in_flight_ttl() {
    let f = Fixture::new();
    // The "crashed replica": a runtime dropped while its handler is running.
    let crashed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let request = f.post("/gated").key("k").send();
    crashed.spawn(request);
    crashed.block_on(f.started.notified());
    drop(crashed);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let locked = f.post("/orders").key("k").send().await;
        assert!(!locked.replayed());
        let retry = f.post("/gated").key("k").send().await;
        retry.assert_problem(StatusCode::CONFLICT, "idempotency_key_in_flight");

        f.clock.advance(LOCK_TTL - Duration::from_secs(1));
        let still = f.post("/gated").key("k").send().await;
        assert_eq!(still.status, StatusCode::CONFLICT, "lock still live");

        f.clock.advance(Duration::from_secs(2));
        let released = tokio::spawn(f.post("/gated").key("k").send());
        f.started.notified().await;
        f.gate.notify_one();
        let released = released.await.expect("retry");
        assert_eq!(released.status, StatusCode::OK);
        assert_eq!(released.text(), "gated 3");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_does_not_cancel_the_first_request() {
    let f = Fixture::new();
    let client = tokio::spawn(f.post("/gated").key("k").send());
    f.started.notified().await;
    client.abort(); // the client disconnects
    assert!(client.await.expect_err("aborted").is_cancelled());

    let finished = f.finished.notified();
    f.gate.notify_one();
    // A guard, not a wait for time to pass: without it a regression would
    // hang here instead of failing.
    tokio::time::timeout(Duration::from_secs(10), finished)
        .await
        .expect("the handler ran to completion after the client hung up");
    // The handler ran to completion and its response was recorded: the
    // client's retry gets it, not a 409 for the rest of the lock's TTL.
    // (Recording follows the handler, so the retry may come too early; the
    // deadline turns a regression into a failure, not a hang.)
    let retry = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let retry = f.post("/gated").key("k").send().await;
            if retry.status != StatusCode::CONFLICT {
                break retry;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the response was recorded after the handler finished");
    assert!(retry.replayed(), "{}", retry.text());
    assert_eq!(retry.text(), "gated 1");
    assert_eq!(f.runs(), 1);
}

#[tokio::test]
async fn records_expire_with_the_clock() {
    let f = Fixture::new();
    f.post("/orders").key("k").send().await;
    f.clock.advance(RECORD_TTL - Duration::from_secs(1));
    assert!(f.post("/orders").key("k").send().await.replayed());
    f.clock.advance(Duration::from_secs(2));
    let after = f.post("/orders").key("k").send().await;
    assert!(!after.replayed());
    assert_eq!(f.runs(), 2);
}

#[tokio::test]
async fn malformed_keys_get_400_and_run_nothing() {
    let f = Fixture::new();
    let long = "k".repeat(256);
    for bad in [
        &b""[..],
        b"   ",
        long.as_bytes(),
        b"two words",
        b"caf\xc3\xa9",
        b"\"open",
    ] {
        let answer = f
            .post("/orders")
            .header("idempotency-key", bad)
            .send()
            .await;
        answer.assert_problem(StatusCode::BAD_REQUEST, "idempotency_key_malformed");
    }
    let twice = f
        .post("/orders")
        .key("a")
        .header("idempotency-key", "b")
        .send()
        .await;
    twice.assert_problem(StatusCode::BAD_REQUEST, "idempotency_key_malformed");
    let ok = f.post("/orders").key(&"k".repeat(255)).send().await;
    assert_eq!(ok.status, StatusCode::CREATED);
    assert_eq!(f.runs(), 1);
}

#[tokio::test]
async fn bodies_over_the_limit_get_413_and_run_nothing() {
    let f = Fixture::new(); // limit: 1024 bytes
    let big = vec![b'x'; 1025];
    let declared = f.post("/orders").key("k").body(big.clone()).send().await;
    declared.assert_problem(StatusCode::PAYLOAD_TOO_LARGE, "request_body_too_large");
    assert!(declared.text().contains("max_body_bytes"));

    // Without a Content-Length the limit holds as the body streams in.
    let stream = futures_util::stream::iter(
        big.chunks(100)
            .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    );
    let request = http::Request::post("/orders")
        .header("idempotency-key", "k")
        .body(axum::body::Body::from_stream(stream))
        .expect("request");
    let response = tower::ServiceExt::oneshot(f.app.clone(), request)
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);

    let fits = f
        .post("/orders")
        .key("k")
        .body(vec![b'x'; 1024])
        .send()
        .await;
    assert_eq!(fits.status, StatusCode::CREATED);
    assert_eq!(f.runs(), 1);
}

#[tokio::test]
async fn requests_without_a_key_and_safe_methods_pass_through() {
    let f = Fixture::new();
    for _ in 0..2 {
        let answer = f.post("/orders").body("x").send().await;
        assert!(!answer.replayed());
    }
    assert_eq!(f.runs(), 2);
    // A GET with a key is not guarded (and a DELETE is).
    let get = Call::new(f.app.clone(), "GET", "/orders")
        .key("g")
        .send()
        .await;
    assert_eq!(get.status, StatusCode::METHOD_NOT_ALLOWED);
    Call::new(f.app.clone(), "DELETE", "/orders")
        .key("d")
        .send()
        .await;
    let again = Call::new(f.app.clone(), "DELETE", "/orders")
        .key("d")
        .send()
        .await;
    assert!(again.replayed());
    assert_eq!(f.runs(), 3);
}

#[tokio::test]
async fn bearer_clients_with_the_same_key_get_their_own_runs() {
    let f = Fixture::new();
    let alice = f
        .post("/orders")
        .key("k")
        .header("authorization", "Bearer alice")
        .body("b")
        .send()
        .await;
    let bob = f
        .post("/orders")
        .key("k")
        .header("authorization", "Bearer bob")
        .body("b")
        .send()
        .await;
    assert!(!bob.replayed(), "bob is not served alice's response");
    assert_eq!(f.runs(), 2);
    let alice_retry = f
        .post("/orders")
        .key("k")
        .header("authorization", "Bearer alice")
        .body("b")
        .send()
        .await;
    let bob_retry = f
        .post("/orders")
        .key("k")
        .header("authorization", "Bearer bob")
        .body("b")
        .send()
        .await;
    assert!(alice_retry.replayed() && bob_retry.replayed());
    assert_eq!(alice_retry.header("x-run"), alice.header("x-run"));
    assert_eq!(bob_retry.header("x-run"), bob.header("x-run"));
    assert_ne!(alice.header("x-run"), bob.header("x-run"));
}

fn faulty() -> (Fixture, Arc<Faults>) {
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
    (Fixture::with_store(Arc::new(store), clock, |l| l), faults)
}

#[tokio::test]
async fn a_failing_lookup_is_503_and_never_runs_the_handler() {
    let (f, faults) = faulty();
    faults.get.store(true, Ordering::SeqCst);
    let answer = f.post("/orders").key("k").send().await;
    answer.assert_problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "idempotency_store_unavailable",
    );
    assert_eq!(f.runs(), 0);
    faults.get.store(false, Ordering::SeqCst);
    assert_eq!(
        f.post("/orders").key("k").send().await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn a_failing_lock_is_409_and_never_runs_the_handler() {
    let (f, faults) = faulty();
    faults.try_lock.store(true, Ordering::SeqCst);
    let answer = f.post("/orders").key("k").send().await;
    answer.assert_problem(StatusCode::CONFLICT, "idempotency_lock_unavailable");
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert_eq!(f.runs(), 0);
}

#[tokio::test]
async fn a_failing_record_write_keeps_the_key_locked() {
    let (f, faults) = faulty();
    faults.set.store(true, Ordering::SeqCst);
    let first = f.post("/orders").key("k").send().await;
    // The handler's work is done, so its answer is sent...
    assert_eq!(first.status, StatusCode::CREATED);
    faults.set.store(false, Ordering::SeqCst);
    // ...but without a record, a retry must not run it again while the lock lives.
    let retry = f.post("/orders").key("k").send().await;
    assert_eq!(retry.status, StatusCode::CONFLICT);
    f.clock.advance(LOCK_TTL + Duration::from_secs(1));
    assert_eq!(
        f.post("/orders").key("k").send().await.status,
        StatusCode::CREATED
    );
    assert_eq!(f.runs(), 2);
}

#[tokio::test]
async fn slow_work_before_the_handler_renews_the_lock() {
    let clock = ManualClock::new();
    let faults = Arc::new(Faults::default());
    let inner =
        Arc::new(MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())));
    let ticking = clock.clone();
    let store: Arc<dyn IdempotencyStore> = Arc::new(FaultyStore {
        inner: inner.clone(),
        faults: faults.clone(),
        // Taking the lock "takes" 10 s: more than a tenth of the lock's TTL.
        on_lock: Box::new(move || ticking.advance(Duration::from_secs(10))),
        renew_gate: None,
    });
    let f = Fixture::with_store(store, clock.clone(), |l| l);
    let first = tokio::spawn(f.post("/gated").key("k").send());
    f.started.notified().await;
    // Renewed at lock time + 10 s: the lock now lasts until +70 s, so at
    // +65 s (55 s after renewal) it still holds.
    clock.advance(Duration::from_secs(55));
    assert_eq!(
        f.post("/gated").key("k").send().await.status,
        StatusCode::CONFLICT
    );
    f.gate.notify_one();
    assert_eq!(first.await.expect("first").status, StatusCode::OK);

    // A store that cannot renew gets 409 instead of running on a lapsing lock.
    faults.renew.store(true, Ordering::SeqCst);
    let refused = f.post("/orders").key("other").send().await;
    refused.assert_problem(StatusCode::CONFLICT, "idempotency_lock_unavailable");
    assert_eq!(f.runs(), 1);
    faults.renew.store(false, Ordering::SeqCst);
    assert_eq!(
        f.post("/orders").key("other").send().await.status,
        StatusCode::CREATED,
        "lock was released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_during_the_renewal_does_not_cancel_the_request() {
    let clock = ManualClock::new();
    let inner =
        Arc::new(MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())));
    let gate = Arc::new(Gate::default());
    let ticking = clock.clone();
    let store: Arc<dyn IdempotencyStore> = Arc::new(FaultyStore {
        inner,
        faults: Arc::default(),
        // Taking the lock "takes" 10 s, so the lock is renewed before the
        // handler starts; the renewal waits at the gate.
        on_lock: Box::new(move || ticking.advance(Duration::from_secs(10))),
        renew_gate: Some(gate.clone()),
    });
    let f = Fixture::with_store(store, clock, |l| l);
    let client = tokio::spawn(f.post("/orders").key("k").body("x").send());
    gate.entered.notified().await;
    client.abort(); // the client disconnects while the lock is being renewed
    assert!(client.await.expect_err("aborted").is_cancelled());
    gate.open.notify_one();

    // The renewal and the handler after it run to completion, and the
    // response is recorded: the retry replays it instead of getting 409
    // for the rest of the lock's TTL. (A guard, not a wait for time to
    // pass: without it a regression would hang here instead of failing.)
    let retry = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let retry = f.post("/orders").key("k").body("x").send().await;
            if retry.status != StatusCode::CONFLICT {
                break retry;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the request finished after its client hung up");
    assert!(retry.replayed(), "{}", retry.text());
    assert_eq!(f.runs(), 1);
}

/// A retry after an unfinished claim: answered by a run, not by 409 for the
/// rest of the lock's TTL (the release happens on a task of its own).
async fn runs_again(f: &Fixture) -> crate::support::app::Answer {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let retry = f.post("/orders").key("k").body("x").send().await;
            if retry.status != StatusCode::CONFLICT {
                break retry;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the unfinished claim was released: the retry ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_during_the_claim_leaves_no_lock() {
    let (f, faults) = faulty();
    faults.lock_then_wait.store(true, Ordering::SeqCst);
    let client = tokio::spawn(f.post("/orders").key("k").body("x").send());
    // The store has taken the lock; its answer has not arrived yet.
    faults.lock_gate.entered.notified().await;
    client.abort(); // the client disconnects mid-claim
    assert!(client.await.expect_err("aborted").is_cancelled());
    faults.lock_then_wait.store(false, Ordering::SeqCst);

    let retry = runs_again(&f).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert!(!retry.replayed());
    assert_eq!(f.runs(), 1, "the hung-up request never ran the handler");
}

#[tokio::test]
async fn a_claim_that_locks_then_fails_leaves_no_lock() {
    let (f, faults) = faulty();
    // The store took the lock but its reply was lost (a response timeout).
    faults.lock_then_fail.store(true, Ordering::SeqCst);
    let failed = f.post("/orders").key("k").body("x").send().await;
    failed.assert_problem(StatusCode::CONFLICT, "idempotency_lock_unavailable");
    assert_eq!(f.runs(), 0);
    faults.lock_then_fail.store(false, Ordering::SeqCst);

    let retry = runs_again(&f).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert_eq!(f.runs(), 1);
}

/// A fixture whose `/orders` records at most `limit` response bytes.
fn capped(limit: usize) -> (Fixture, Arc<autumn_idempotency::IdempotencyMetrics>) {
    let clock = ManualClock::new();
    let store =
        Arc::new(MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())));
    let metrics = Arc::new(autumn_idempotency::IdempotencyMetrics::new());
    let f = Fixture::with_store(store, clock, |layer| {
        layer
            .with_max_record_bytes(limit)
            .with_metrics(metrics.clone())
    });
    (f, metrics)
}

#[tokio::test]
async fn a_response_over_the_record_limit_is_sent_whole_and_never_runs_twice() {
    let (_logs, logs) = crate::support::logs::capture();
    // `/orders` answers {"run":N,"echo":"..."}: about 30 bytes more than the body.
    let (f, metrics) = capped(64);
    let big = "x".repeat(200);
    let first = f.post("/orders").key("k").body(big.clone()).send().await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        first.text(),
        format!(r#"{{"run":1,"echo":"{big}"}}"#),
        "the client gets every byte"
    );
    assert_eq!(first.header("x-idempotent-honoured"), Some("true"));
    assert_eq!(first.header("set-cookie"), Some("flash=created; Path=/"));
    // Not recorded, but the handler ran: the retry is refused, not run.
    let retry = f.post("/orders").key("k").body(big.clone()).send().await;
    retry.assert_problem(StatusCode::CONFLICT, "idempotency_response_not_recorded");
    assert!(!retry.replayed());
    assert_eq!(retry.header("retry-after"), None, "waiting changes nothing");
    let problem: serde_json::Value = serde_json::from_slice(&retry.body).expect("json");
    assert_eq!(problem["new_key_needed"], true, "{problem}");
    // Another request under the key is still another request.
    let other = f.post("/orders").key("k").body("other").send().await;
    other.assert_problem(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused");
    assert_eq!(f.runs(), 1);
    let snapshot = metrics.snapshot();
    assert_eq!(snapshot.unrecorded_too_large, 1);
    assert_eq!(snapshot.conflicts, 1, "the refused retry");
    assert_eq!(snapshot.hits, 0, "nothing was replayed");

    // A second large response on the route: counted, not warned about again.
    let second = f.post("/orders").key("k2").body(big.clone()).send().await;
    assert_eq!(second.header("x-run"), Some("2"));
    assert_eq!(metrics.snapshot().unrecorded_too_large, 2);
    let warned = logs.lines_with("larger than max_record_bytes");
    assert_eq!(warned.len(), 1, "{}", logs.text());
    assert!(warned[0].contains("WARN"), "{}", warned[0]);
    assert!(
        warned[0].contains("gets 409 instead of running the handler again"),
        "{}",
        warned[0]
    );

    // The marker lives as long as a record: past it, the key is free.
    f.clock.advance(RECORD_TTL + Duration::from_secs(1));
    let later = f.post("/orders").key("k").body(big.clone()).send().await;
    assert_eq!(later.header("x-run"), Some("3"));

    // Under the limit, the same route records as usual.
    let small = f.post("/orders").key("small").body("y").send().await;
    assert_eq!(small.status, StatusCode::CREATED);
    assert!(
        f.post("/orders")
            .key("small")
            .body("y")
            .send()
            .await
            .replayed()
    );
}

#[tokio::test]
async fn past_the_record_limit_the_response_streams_instead_of_being_buffered() {
    use std::sync::atomic::AtomicUsize;

    use futures_util::StreamExt as _;
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    const CHUNK: usize = 1024;
    const CHUNKS: usize = 256;
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = pulled.clone();
    let store = Arc::new(MemoryIdempotencyStore::new(RECORD_TTL));
    let app = axum::Router::new()
        .route(
            "/feed",
            axum::routing::post(move || async move {
                // Counts how far the body has been read: buffering it whole
                // (what an endless body would die of) reads every chunk.
                let chunks = futures_util::stream::iter(0..CHUNKS).map(move |_| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'.'; CHUNK]))
                });
                axum::body::Body::from_stream(chunks)
            }),
        )
        .layer(
            autumn_idempotency::IdempotencyLayer::new(store.clone())
                .with_max_record_bytes(4 * CHUNK),
        );
    let request = http::Request::post("/feed")
        .header("idempotency-key", "k")
        .body(axum::body::Body::empty())
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        pulled.load(Ordering::SeqCst) <= 5,
        "read no further than the limit before answering: {} chunks",
        pulled.load(Ordering::SeqCst)
    );
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(body.len(), CHUNK * CHUNKS, "the client gets every byte");
    // What is kept is a marker, not the body: a retry is refused, not run.
    let retry = Call::new(app, "POST", "/feed").key("k").send().await;
    retry.assert_problem(StatusCode::CONFLICT, "idempotency_response_not_recorded");
    assert_eq!(
        pulled.load(Ordering::SeqCst),
        CHUNKS,
        "the handler did not run again"
    );
}

#[tokio::test]
async fn a_forwarded_replay_that_nothing_answers_is_409_never_a_second_run() {
    use std::sync::atomic::AtomicUsize;

    use autumn_idempotency::{
        IdempotencyLayer, IdempotencyReplayLayer, ReplayGuardLayer, ReplayMode,
    };
    use axum::Router;
    use axum::routing::{MethodRouter, post};

    let store = Arc::new(MemoryIdempotencyStore::new(RECORD_TTL));
    let runs = Arc::new(AtomicUsize::new(0));
    let handler = || -> MethodRouter {
        let runs = runs.clone();
        post(move || async move { format!("run {}", runs.fetch_add(1, Ordering::SeqCst) + 1) })
    };
    let metrics = Arc::new(autumn_idempotency::IdempotencyMetrics::new());
    let outer = || {
        IdempotencyLayer::new(store.clone())
            .with_replay_mode(ReplayMode::FailClosed)
            .with_metrics(metrics.clone())
    };
    let inner = || IdempotencyLayer::new(Arc::new(MemoryIdempotencyStore::new(RECORD_TTL)));
    let send = |app: Router| Call::new(app, "POST", "/x").key("k").send();

    // Deploy 1: the route replays through its own inner layer, so the record
    // is marked to be replayed inside the route.
    let before = Router::new()
        .route("/x", handler().layer(IdempotencyReplayLayer::new()))
        .layer(inner().replay_through_inner())
        .layer(outer());
    assert_eq!(send(before.clone()).await.text(), "run 1");
    assert!(send(before).await.replayed());

    // Deploy 2: the inner layer no longer replays through the route; the
    // forwarded retry must not reach the handler.
    let changed = Router::new()
        .route("/x", handler())
        .layer(inner())
        .layer(outer());
    let retry = send(changed).await;
    retry.assert_problem(StatusCode::CONFLICT, "idempotency_replay_unavailable");

    // Deploy 3: no inner layer at all; the guard in front of the handler
    // refuses it.
    let guarded = Router::new()
        .route("/x", handler().layer(ReplayGuardLayer::new()))
        .layer(outer());
    let retry = send(guarded).await;
    retry.assert_problem(StatusCode::CONFLICT, "idempotency_replay_unavailable");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never a second run");
    assert_eq!(
        metrics.snapshot().conflicts,
        2,
        "both refusals are conflicts"
    );

    // The guard lets every other request through.
    let plain = Router::new()
        .route("/x", handler().layer(ReplayGuardLayer::new()))
        .layer(outer());
    let other = Call::new(plain, "POST", "/x").key("other").send().await;
    assert_eq!(other.text(), "run 2");
}

/// A middleware that rebuilds the request from its method, URI and headers,
/// dropping every extension.
async fn rebuild_request(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let mut rebuilt = axum::extract::Request::new(body);
    *rebuilt.method_mut() = parts.method;
    *rebuilt.uri_mut() = parts.uri;
    *rebuilt.headers_mut() = parts.headers;
    next.run(rebuilt).await
}

#[tokio::test]
async fn a_forwarded_replay_survives_a_middleware_that_drops_the_extensions() {
    use std::sync::atomic::AtomicUsize;

    use autumn_idempotency::{IdempotencyLayer, IdempotencyReplayLayer, ReplayGuardLayer};
    use axum::Router;
    use axum::middleware::from_fn;
    use axum::routing::{MethodRouter, post};

    let store = Arc::new(MemoryIdempotencyStore::new(RECORD_TTL));
    let runs = Arc::new(AtomicUsize::new(0));
    let handler = || -> MethodRouter {
        let runs = runs.clone();
        post(move || async move { format!("run {}", runs.fetch_add(1, Ordering::SeqCst) + 1) })
            .layer(ReplayGuardLayer::new())
    };
    // Each deploy nests a fresh layer of its own, in replay-through-inner
    // mode, behind the rebuilding middleware: it must defer to the outer
    // layer's forwarded replay rather than claim the key in its empty store.
    let nested = || {
        IdempotencyLayer::new(Arc::new(MemoryIdempotencyStore::new(RECORD_TTL)))
            .replay_through_inner()
    };
    let outer = || IdempotencyLayer::new(store.clone()).replay_through_inner();
    let send = |app: Router| Call::new(app, "POST", "/x").key("k").send();

    let with_replay_layer = || {
        Router::new()
            .route("/x", handler().layer(IdempotencyReplayLayer::new()))
            .layer(nested())
            .layer(from_fn(rebuild_request))
            .layer(outer())
    };
    assert_eq!(send(with_replay_layer()).await.text(), "run 1");
    let retry = send(with_replay_layer()).await;
    assert!(retry.replayed(), "answered from the task: {}", retry.text());
    assert_eq!(retry.text(), "run 1");

    // Without the replay layer, the guard refuses it from the task.
    let without = Router::new()
        .route("/x", handler())
        .layer(nested())
        .layer(from_fn(rebuild_request))
        .layer(outer());
    send(without)
        .await
        .assert_problem(StatusCode::CONFLICT, "idempotency_replay_unavailable");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never a second run");

    // Outside a forwarded replay, the guard passes everything through.
    let other = Call::new(with_replay_layer(), "POST", "/x")
        .key("other")
        .send()
        .await;
    assert_eq!(other.text(), "run 2");
}

/// Polls `service`'s response future for `request` to completion, then once
/// more: a future polled after completion must say so, not hang.
async fn poll_after_completion<S>(mut service: S, request: http::Request<axum::body::Body>)
where
    S: tower::Service<
            http::Request<axum::body::Body>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        >,
{
    use tower::ServiceExt as _;
    let service = service.ready().await.expect("ready");
    let mut future = std::pin::pin!(service.call(request));
    let first = std::future::poll_fn(|cx| future.as_mut().poll(cx)).await;
    assert!(first.is_ok());
    let _ = std::future::poll_fn(|cx| future.as_mut().poll(cx)).await;
}

fn echo_service() -> autumn_idempotency::layer::Idempotency<axum::Router> {
    use tower::Layer as _;
    let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)));
    let router =
        axum::Router::new().route("/echo", axum::routing::post(|body: String| async { body }));
    autumn_idempotency::IdempotencyLayer::new(store).layer(router)
}

#[tokio::test]
#[should_panic(expected = "polled after completion")]
async fn a_keyed_response_future_polled_after_completion_panics() {
    let request = http::Request::post("/echo")
        .header("idempotency-key", "k1")
        .body(axum::body::Body::from("hello"))
        .expect("request");
    poll_after_completion(echo_service(), request).await;
}

#[tokio::test]
#[should_panic(expected = "polled after completion")]
async fn a_refusal_polled_after_completion_panics() {
    // A malformed key is refused without a lookup: the ready answer.
    let request = http::Request::post("/echo")
        .header("idempotency-key", "")
        .body(axum::body::Body::from("hello"))
        .expect("request");
    poll_after_completion(echo_service(), request).await;
}
