//! `AnonymousKeys::Refuse` on the Idempotency-Key layer over a raw router: a
//! keyed request with an empty scope is refused with 403 before the body is
//! read or the store asked; any scope part, or an `Authorization` header
//! when no scope was given, is a caller; a request without a key passes.

use std::sync::Arc;

use crate::support::app::{Call, Fixture, RECORD_TTL};
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::layer::{AnonymousKeys, IdempotencyPolicy};
use autumn_idempotency::{IdempotencyScope, MemoryIdempotencyStore};
use http::StatusCode;

/// A fixture whose layer took these policies, app-wide first.
fn fixture(policies: &[IdempotencyPolicy]) -> Fixture {
    let clock = ManualClock::new();
    let store =
        Arc::new(MemoryIdempotencyStore::new(RECORD_TTL).with_clock(Arc::new(clock.clone())));
    let policies = policies.to_vec();
    Fixture::with_store(store, clock, move |layer| {
        policies.iter().fold(layer, |layer, policy| {
            layer.with_policy(policy).expect("a valid policy")
        })
    })
}

fn refuse() -> IdempotencyPolicy {
    IdempotencyPolicy::new().with_anonymous_keys(AnonymousKeys::Refuse)
}

fn allow() -> IdempotencyPolicy {
    IdempotencyPolicy::new().with_anonymous_keys(AnonymousKeys::Allow)
}

#[tokio::test]
async fn refuse_answers_an_anonymous_keyed_request_403_and_runs_nothing() {
    let f = fixture(&[refuse()]);
    for method in ["POST", "PUT", "DELETE"] {
        let refused = Call::new(f.app.clone(), method, "/orders")
            .key("anon")
            .body("x")
            .send()
            .await;
        refused.assert_problem(StatusCode::FORBIDDEN, "idempotency_key_needs_caller");
        assert_eq!(refused.header("set-cookie"), None);
        assert_eq!(refused.header("x-idempotent-honoured"), None);
    }
    assert_eq!(f.runs(), 0, "the handler never ran");
    assert_eq!(
        f.store.size().map(|size| size.entries),
        Some(0),
        "the store was never asked"
    );
}

#[tokio::test]
async fn refuse_leaves_requests_without_a_key_alone() {
    let f = fixture(&[refuse()]);
    assert_eq!(
        f.post("/orders").body("x").send().await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        f.post("/orders").body("x").send().await.status,
        StatusCode::CREATED
    );
    assert_eq!(f.runs(), 2);
}

#[tokio::test]
async fn refuse_serves_and_replays_a_caller_with_a_scope_or_a_bearer() {
    let f = fixture(&[refuse()]);
    let bearer = || {
        f.post("/orders")
            .key("k")
            .header("authorization", "Bearer t")
            .body("x")
    };
    assert_eq!(bearer().send().await.status, StatusCode::CREATED);
    assert!(bearer().send().await.replayed());
    assert_eq!(f.runs(), 1);

    let scoped = f.app.clone().layer(axum::Extension(
        IdempotencyScope::default().with_part("session", "s-1"),
    ));
    let session = || {
        Call::new(scoped.clone(), "POST", "/orders")
            .key("k")
            .body("x")
    };
    assert_eq!(session().send().await.status, StatusCode::CREATED);
    assert!(session().send().await.replayed());
    assert_eq!(f.runs(), 2, "a session is another caller than the bearer");

    // The scope the app gave is the one that counts: an empty one is
    // anonymous, whatever the raw header says.
    let empty = f
        .app
        .clone()
        .layer(axum::Extension(IdempotencyScope::default()));
    Call::new(empty, "POST", "/orders")
        .key("k")
        .header("authorization", "Bearer t")
        .body("x")
        .send()
        .await
        .assert_problem(StatusCode::FORBIDDEN, "idempotency_key_needs_caller");
    assert_eq!(f.runs(), 2);
}

#[tokio::test]
async fn a_route_policy_overrides_the_app_policy_both_ways() {
    // The app allows (the default), the route refuses.
    let route_refuses = fixture(&[allow(), refuse()]);
    route_refuses
        .post("/orders")
        .key("k")
        .body("x")
        .send()
        .await
        .assert_problem(StatusCode::FORBIDDEN, "idempotency_key_needs_caller");
    assert_eq!(route_refuses.runs(), 0);

    // The app refuses, the route allows.
    let route_allows = fixture(&[refuse(), allow()]);
    let send = || route_allows.post("/orders").key("k").body("x").send();
    assert_eq!(send().await.status, StatusCode::CREATED);
    assert!(send().await.replayed());
    assert_eq!(route_allows.runs(), 1);

    // A route that says nothing keeps the app's refusal.
    let inherits = fixture(&[refuse(), IdempotencyPolicy::new().required()]);
    inherits
        .post("/orders")
        .key("k")
        .body("x")
        .send()
        .await
        .assert_problem(StatusCode::FORBIDDEN, "idempotency_key_needs_caller");
}

#[tokio::test]
async fn allow_is_the_default_and_serves_anonymous_keys() {
    let f = Fixture::new();
    assert_eq!(
        f.post("/orders").key("k").body("x").send().await.status,
        StatusCode::CREATED
    );
    assert!(f.post("/orders").key("k").body("x").send().await.replayed());
    assert_eq!(f.runs(), 1);
}
