//! WebSockets and server-sent events on a real server: a WebSocket holds
//! its connection's slot until it closes, and gets a close frame (1001)
//! when the server stops; an event stream ends when the server stops, so
//! the drain does not wait out its grace.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use autumn_web::sse::{self, Event};
use autumn_web::ws::{Message, WebSocket, WebSocketUpgrade};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

#[get("/hello")]
async fn hello() -> &'static str {
    "hello"
}

/// Echoes text messages.
#[get("/echo")]
async fn echo(upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(|mut socket: WebSocket| async move {
        while let Some(Ok(message)) = socket.recv().await {
            if let Message::Text(text) = message
                && socket.send(Message::Text(text)).await.is_err()
            {
                break;
            }
        }
    })
}

/// One event, then nothing until the server stops.
#[get("/events")]
async fn events() -> impl IntoResponse {
    let first = futures_util::stream::once(async {
        Ok::<_, std::convert::Infallible>(Event::default().data("first"))
    });
    sse::stream(first.chain(futures_util::stream::pending()))
}

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
                .routes(routes![hello, echo, events])
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

    /// Stops the server: how long it took to return.
    async fn stop(mut self) -> Duration {
        let started = Instant::now();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(20), &mut self.served)
            .await
            .expect("the server returns after shutdown")
            .expect("the server task does not panic")
            .expect("the server stops cleanly");
        started.elapsed()
    }
}

/// `GET /hello` on a fresh connection: the body, or `None` if no answer
/// comes within `limit`.
async fn hello_within(address: SocketAddr, limit: Duration) -> Option<String> {
    let attempt = async {
        let mut stream = TcpStream::connect(address).await.ok()?;
        stream
            .write_all(b"GET /hello HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        Some(answer)
    };
    tokio::time::timeout(limit, attempt).await.ok().flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_holds_its_connection_slot_until_it_closes() {
    let server = Server::start("[server]\nmax_connections = 1\n").await;
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{}/echo", server.address))
        .await
        .expect("a WebSocket");
    socket
        .send(tokio_tungstenite::tungstenite::Message::text("ping"))
        .await
        .expect("send");
    let echoed = socket.next().await.expect("an answer").expect("a message");
    assert_eq!(echoed.into_text().expect("text").as_str(), "ping");

    // The one slot is the socket's: another client waits.
    let waiting = tokio::spawn(hello_within(server.address, Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "served past max_connections");

    // Closed, the socket gives its slot to the waiting client.
    socket.close(None).await.expect("close");
    let answer = waiting
        .await
        .expect("task")
        .expect("served once the socket closed");
    assert!(answer.ends_with("hello"), "{answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_server_sends_each_websocket_a_going_away_close_frame() {
    let server = Server::start("[server]\nshutdown_grace_ms = 10000\n").await;
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{}/echo", server.address))
        .await
        .expect("a WebSocket");
    socket
        .send(tokio_tungstenite::tungstenite::Message::text("ping"))
        .await
        .expect("send");
    socket.next().await.expect("an answer").expect("a message");

    let stopping = tokio::spawn(server.stop());
    let close = tokio::time::timeout(Duration::from_secs(5), socket.next())
        .await
        .expect("a frame before the grace ends")
        .expect("a frame")
        .expect("a well-formed frame");
    match close {
        tokio_tungstenite::tungstenite::Message::Close(Some(frame)) => {
            assert_eq!(frame.code, CloseCode::Away);
            assert_eq!(frame.reason.as_str(), "the server is stopping");
        }
        other => panic!("expected a close frame, got {other:?}"),
    }
    drop(socket);
    let took = stopping.await.expect("stop task");
    assert!(
        took < Duration::from_secs(5),
        "the drain waited for the socket: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_ends_when_the_server_stops_instead_of_holding_the_drain() {
    let server = Server::start("[server]\nshutdown_grace_ms = 10000\n").await;
    let mut stream = TcpStream::connect(server.address).await.expect("connect");
    stream
        .write_all(b"GET /events HTTP/1.1\r\nhost: t\r\naccept: text/event-stream\r\n\r\n")
        .await
        .expect("write");
    let mut seen = Vec::new();
    let mut buf = [0_u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("data: first") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the first event")
            .expect("read");
        assert!(n > 0, "closed early");
        seen.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&seen).to_string();
    assert!(head.contains("content-type: text/event-stream"), "{head}");

    let stopping = tokio::spawn(server.stop());
    // The stream ends (its last chunk, then the connection closes).
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
        .await
        .expect("the stream ends when the server stops")
        .expect("read");
    assert!(
        String::from_utf8_lossy(&rest).contains("0\r\n\r\n"),
        "{rest:?}"
    );
    let took = stopping.await.expect("stop task");
    assert!(
        took < Duration::from_secs(5),
        "the drain waited for the stream: {took:?}"
    );
}
