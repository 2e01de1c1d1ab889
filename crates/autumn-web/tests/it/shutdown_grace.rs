//! The shutdown's wait for detached first-time runs is bounded by `server.shutdown_grace_ms`:
//! a run that never finishes is abandoned, and the server still returns. Each server counts
//! and waits for its own detached runs, so the other tests' servers neither hold this one up
//! nor are held up by it; only `detached_runs()`, which the test reads to see its run
//! detached, counts the whole process, theirs included.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use autumn_testkit::eventually;
use autumn_web::config::AutumnConfig;
use autumn_web::idempotency::detached_runs;
use autumn_web::prelude::*;

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[post("/orders")]
async fn stuck() -> &'static str {
    RUNS.fetch_add(1, Ordering::SeqCst);
    std::future::pending::<()>().await;
    "never"
}

#[test]
fn a_run_that_never_finishes_is_abandoned_after_the_grace() {
    let config =
        AutumnConfig::from_toml_str("[server]\nshutdown_grace_ms = 400\n").expect("config");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    listener.set_nonblocking(true).expect("non-blocking");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            autumn_web::app()
                .routes(routes![stuck])
                .idempotent()
                .with_config(config)
                .serve(listener, async move {
                    let _ = stopped.await;
                })
                .await
        })
    });

    let mut client = std::net::TcpStream::connect(address).expect("connect");
    client
        .write_all(
            b"POST /orders HTTP/1.1\r\nhost: test\r\nidempotency-key: stuck-1\r\n\
              content-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
        )
        .expect("send");
    eventually("the handler to start", Duration::from_secs(5), || {
        RUNS.load(Ordering::SeqCst) == 1
    });
    drop(client);
    // At least: other tests' runs may be detached at the same moment.
    eventually("the run to be detached", Duration::from_secs(5), || {
        detached_runs() >= 1
    });

    let stopping = Instant::now();
    stop.send(()).expect("the server is listening for shutdown");
    eventually(
        "the server returns after the grace even though the run never finishes",
        Duration::from_secs(5),
        || served.is_finished(),
    );
    let took = stopping.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "returned after {took:?}, without waiting for the run"
    );
    served
        .join()
        .expect("the server thread does not panic")
        .expect("the server stops cleanly");
}
