//! The server's connection limits, against a real server on 127.0.0.1 and real sockets:
//! a slow header sender and an idle kept-alive connection are closed, an oversized head gets
//! 431, past `max_connections` an idle connection gives way (a busy one never does), and
//! shutdown still drains.
//!
//! The timeouts here are socket timeouts, not TTLs: they are kept short and asserted with
//! generous bounds.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[get("/")]
async fn hello() -> &'static str {
    "hi"
}

/// Answers after longer than the keep-alive timeout the tests below set.
#[get("/slow")]
async fn slow() -> &'static str {
    tokio::time::sleep(Duration::from_millis(500)).await;
    "done"
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: test\r\n\r\n";
const GET_SLOW: &[u8] = b"GET /slow HTTP/1.1\r\nhost: test\r\n\r\n";

/// A served app and the means to stop it.
struct Server {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<Result<(), autumn_web::LaunchError>>,
}

impl Server {
    async fn start(toml: &str) -> Self {
        let config = AutumnConfig::from_toml_str(toml).expect("test configuration");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
        let address = listener.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(
            autumn_web::app()
                .routes(routes![hello, slow])
                .with_config(config)
                .serve(listener, async move {
                    let _ = stopped.await;
                }),
        );
        Self {
            address,
            stop: Some(stop),
            served,
        }
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.address).await.expect("connect")
    }

    /// Stops the server and returns how long it took to return.
    async fn stop(mut self) -> Duration {
        let started = Instant::now();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.served)
            .await
            .expect("the server returns after shutdown")
            .expect("the server task does not panic")
            .expect("the server stops cleanly");
        started.elapsed()
    }
}

/// Reads one response with a `content-length` body; `None` if nothing arrives within `limit`.
async fn read_response(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(text) = complete_response(&received) {
            return Some(text);
        }
        let mut chunk = [0_u8; 4096];
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (!received.is_empty())
                    .then(|| String::from_utf8_lossy(&received).into_owned());
            }
            Ok(Ok(n)) => received.extend_from_slice(&chunk[..n]),
            Err(_) => return None,
        }
    }
}

fn complete_response(received: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(received);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    (body.len() >= length).then(|| text.into_owned())
}

/// Sends `request` on `stream` and returns its response, which must be a 200.
async fn ok(stream: &mut TcpStream, request: &[u8]) -> String {
    stream.write_all(request).await.expect("send a request");
    let response = read_response(stream, Duration::from_secs(5))
        .await
        .expect("a response on the same connection");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// Waits for the server to close an idle kept-alive `stream`, and checks it
/// waited for (most of) a keep-alive timeout of at least 300 ms first.
async fn closed_once_idle(stream: &mut TcpStream) {
    let closed = closed_within(stream, Duration::from_secs(5))
        .await
        .expect("an idle kept-alive connection is closed well within 5s");
    // Measured from when the client read the response, a little after the timer started.
    assert!(
        closed >= Duration::from_millis(100),
        "closed after {closed:?}, before the keep-alive timeout"
    );
}

/// Waits up to `limit` for the server to close `stream`; returns how long that took.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + limit;
    let mut chunk = [0_u8; 1024];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            // Whatever the server says before closing (hyper may send a 408) is fine.
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_header_sender_is_closed_after_the_header_read_timeout() {
    let server = Server::start("[server.timeouts]\nheader_read_timeout_ms = 300\n").await;
    let stream = server.connect().await;
    let (mut reader, mut writer) = stream.into_split();
    let started = Instant::now();
    // One byte every 50 ms: the head never completes, yet bytes keep arriving.
    let trickle = tokio::spawn(async move {
        writer.write_all(b"GET / HTTP/1.1\r\n").await.ok();
        for _ in 0..200 {
            if writer.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut chunk = [0_u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("a connection trickling its head is closed well within 5s");
    trickle.abort();
    assert!(
        closed >= Duration::from_millis(250),
        "closed after {closed:?}, before the header-read timeout"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed_after_the_keep_alive_timeout() {
    let server = Server::start(
        "[server.timeouts]\nheader_read_timeout_ms = 5000\nkeep_alive_timeout_ms = 300\n",
    )
    .await;

    // A new connection gets the header-read timeout, not the shorter keep-alive one.
    let mut stream = server.connect().await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    ok(&mut stream, GET).await;

    // Then idle: closed after the keep-alive timeout.
    closed_once_idle(&mut stream).await;
    server.stop().await;
}

/// A connection keeps one head timer and moves it for every request (see `HeadTimer`): a
/// deadline left from an earlier head must neither close a busy connection nor cut off a slow
/// request, and the timer must still fire once the connection idles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keep_alive_timeout_starts_again_after_every_response() {
    let server = Server::start(
        "[server.timeouts]\nheader_read_timeout_ms = 400\nkeep_alive_timeout_ms = 400\n",
    )
    .await;
    let mut stream = server.connect().await;
    // Six requests 200 ms apart: 1.2 s in all, each gap within the 400 ms timeout.
    for _ in 0..6 {
        ok(&mut stream, GET).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A handler slower than the keep-alive timeout is not cut off, and the
    // connection serves the next request right after it.
    assert!(ok(&mut stream, GET_SLOW).await.ends_with("done"));
    ok(&mut stream, GET).await;
    // Idle now: closed after the keep-alive timeout.
    closed_once_idle(&mut stream).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_max_header_bytes_gets_431() {
    let server = Server::start("[server]\nmax_header_bytes = 2048\n").await;

    let mut fits = server.connect().await;
    let small = format!(
        "GET / HTTP/1.1\r\nhost: test\r\nx-pad: {}\r\n\r\n",
        "a".repeat(1000)
    );
    fits.write_all(small.as_bytes()).await.expect("send");
    let response = read_response(&mut fits, Duration::from_secs(5))
        .await
        .expect("a response");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    let mut big = server.connect().await;
    let large = format!(
        "GET / HTTP/1.1\r\nhost: test\r\nx-pad: {}\r\n\r\n",
        "a".repeat(4096)
    );
    big.write_all(large.as_bytes()).await.ok();
    let response = read_response(&mut big, Duration::from_secs(5))
        .await
        .expect("a response");
    assert!(response.starts_with("HTTP/1.1 431"), "{response}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_an_idle_connection_gives_way_and_a_busy_one_never_does() {
    let server = Server::start(
        "[server]\nmax_connections = 2\n[server.timeouts]\nheader_read_timeout_ms = 10000\nkeep_alive_timeout_ms = 10000\n",
    )
    .await;
    // Two connections served and held open, idle (kept alive).
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = server.connect().await;
        stream.write_all(GET).await.expect("send");
        let response = read_response(&mut stream, Duration::from_secs(5))
            .await
            .expect("a response under the cap");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        held.push(stream);
    }

    // A third is served at once: the connection idle longest is closed
    // for it, instead of it waiting out the keep-alive timeout.
    let mut third = server.connect().await;
    third.write_all(GET).await.expect("send");
    let response = read_response(&mut third, Duration::from_secs(2))
        .await
        .expect("served past the cap");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let mut oldest = held.remove(0);
    let mut buf = [0_u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(2), oldest.read(&mut buf))
        .await
        .expect("the oldest idle connection is closed");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    drop(held);
    drop(third);

    // Two connections mid-request: a new one waits until one of them is
    // done (then idle, it gives way); neither request is cut.
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut stream = server.connect().await;
        stream.write_all(GET_SLOW).await.expect("send");
        busy.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut waiting = server.connect().await;
    waiting.write_all(GET).await.expect("send");
    assert_eq!(
        read_response(&mut waiting, Duration::from_millis(200)).await,
        None,
        "no answer while both connections are mid-request"
    );
    for stream in &mut busy {
        let response = read_response(stream, Duration::from_secs(5))
            .await
            .expect("a busy request is never cut");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }
    let response = read_response(&mut waiting, Duration::from_secs(5))
        .await
        .expect("served once a connection went idle");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_connections_and_returns() {
    let server = Server::start("[server.timeouts]\nkeep_alive_timeout_ms = 60000\n").await;
    let mut idle = server.connect().await;
    idle.write_all(GET).await.expect("send");
    read_response(&mut idle, Duration::from_secs(5))
        .await
        .expect("a response");
    // An idle kept-alive connection does not hold the shutdown for its 60 s.
    let took = server.stop().await;
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
    assert!(
        closed_within(&mut idle, Duration::from_secs(5))
            .await
            .is_some()
    );
}
