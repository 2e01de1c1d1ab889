//! Graceful shutdown waits for first-time runs whose client hung up, so their response is
//! recorded and the key is not left locked; against a real server on 127.0.0.1 whose runtime
//! is dropped when it returns, as a process's runtime is when `main` returns.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use autumn_testkit::eventually;
use autumn_web::config::AutumnConfig;
use autumn_web::idempotency::{IdempotencyStore, MemoryIdempotencyStore, detached_runs};
use autumn_web::prelude::*;
use autumn_web::reexports::axum::body::Body;
use autumn_web::reexports::http::Request;
use tokio::sync::Semaphore;
use tower::ServiceExt;

static RUNS: AtomicUsize = AtomicUsize::new(0);
static GATE: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));

#[post("/orders")]
async fn create() -> (StatusCode, &'static str) {
    RUNS.fetch_add(1, Ordering::SeqCst);
    let _ = GATE.acquire().await;
    (StatusCode::CREATED, "order 1")
}

fn config() -> AutumnConfig {
    AutumnConfig::from_toml_str("[server]\nshutdown_grace_ms = 10000\n").expect("config")
}

fn app(store: Arc<dyn IdempotencyStore>) -> autumn_web::AppBuilder {
    autumn_web::app()
        .routes(routes![create])
        .idempotent()
        .with_idempotency_store(store)
        .with_config(config())
}

#[test]
fn shutdown_waits_for_a_detached_run_which_records_its_response() {
    let store: Arc<dyn IdempotencyStore> =
        Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    listener.set_nonblocking(true).expect("non-blocking");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();

    let served = {
        let store = store.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            let result = runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                app(store)
                    .serve(listener, async move {
                        let _ = stopped.await;
                    })
                    .await
            });
            // What returning from `main` does: whatever still runs is cancelled.
            drop(runtime);
            result
        })
    };

    // A first-time request whose handler blocks on the gate.
    let mut client = std::net::TcpStream::connect(address).expect("connect");
    client
        .write_all(
            b"POST /orders HTTP/1.1\r\nhost: test\r\nidempotency-key: order-1\r\n\
              content-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
        )
        .expect("send");
    eventually("the handler starts", Duration::from_secs(5), || {
        RUNS.load(Ordering::SeqCst) == 1
    });
    // The client hangs up: the run goes on without it.
    drop(client);
    eventually(
        "the run is detached once the client is gone",
        Duration::from_secs(5),
        // The process-wide count: other tests of this binary may hold
        // detached runs of their own servers meanwhile.
        || detached_runs() >= 1,
    );

    // Shutdown: the server stops accepting but waits for the run.
    stop.send(()).expect("the server is listening for shutdown");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !served.is_finished(),
        "the server returned while a detached run was still going"
    );
    assert!(
        std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_err(),
        "no new connection is accepted during shutdown"
    );

    GATE.add_permits(1);
    eventually(
        "the server returns once the run has finished",
        Duration::from_secs(5),
        || served.is_finished(),
    );
    served
        .join()
        .expect("the server thread does not panic")
        .expect("the server stops cleanly");

    // The retry, against the same store: the recorded response, not a 409, and no second run.
    let router = app(store).into_router().expect("router");
    let retry = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(
            router.oneshot(
                Request::post("/orders")
                    .header("idempotency-key", "order-1")
                    .header("content-type", "application/json")
                    .body(Body::from("{}"))
                    .expect("request"),
            ),
        )
        .expect("infallible");
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()["x-idempotent-replayed"], "true");
    assert_eq!(RUNS.load(Ordering::SeqCst), 1, "the handler ran once");
}
