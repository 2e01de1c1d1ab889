//! The client's address over real sockets, from loopback aliases (127.0.0.2
//! is the trusted proxy, 127.0.0.3 anyone else): in the access log, through
//! `X-Forwarded-For`, read only from a trusted proxy.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const PROXY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const STRANGER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

#[get("/whoami")]
async fn whoami(ClientIp(address): ClientIp) -> String {
    address.to_string()
}

/// A served app and the means to stop it.
struct Server {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<Result<(), autumn_web::LaunchError>>,
}

impl Server {
    /// Serves with `[server] trusted_proxies = ["127.0.0.2"]` and `toml`.
    async fn start(toml: &str) -> Self {
        let config =
            AutumnConfig::from_toml_str(&format!("{TRUSTED}{toml}")).expect("test configuration");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
        let address = listener.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(
            autumn_web::app()
                .routes(routes![whoami])
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

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.served)
            .await
            .expect("the server returns after shutdown")
            .expect("the server task does not panic")
            .expect("the server stops cleanly");
    }
}

/// The trusted proxy, first in every configuration (a `[server]` of the
/// test's own continues it).
const TRUSTED: &str = "[server]\ntrusted_proxies = [\"127.0.0.2\"]\n";

/// A connection to `server` from the loopback address `from`.
async fn connect_from(from: Ipv4Addr, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(IpAddr::V4(from), 0))
        .expect("bind a loopback alias");
    socket.connect(server).await.expect("connect")
}

/// `GET /whoami`, closing the connection after, with `headers` (each line
/// ending in CRLF).
fn whoami_request(headers: &str) -> String {
    format!("GET /whoami HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n{headers}\r\n")
}

/// Sends `bytes` on `stream` and reads until the server closes it: all it
/// answered (nothing when it closed without a word).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, bytes: &[u8]) -> String {
    stream.write_all(bytes).await.expect("send");
    let mut answer = Vec::new();
    // A close without TLS's close_notify ends the read in an error; what
    // came before it is the answer.
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection within 10 s");
    String::from_utf8_lossy(&answer).into_owned()
}

/// The body of a 200 answer, failing the test on any other.
#[track_caller]
fn body_of(answer: &str) -> &str {
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .unwrap_or_else(|| panic!("no body: {answer}"))
}

#[test]
fn the_access_line_names_the_client_a_trusted_proxy_forwards_and_not_one_a_stranger_claims() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // The server runs on this thread's runtime: its lines are captured.
    let (_capture, logs) = autumn_testkit::logs::capture();
    runtime.block_on(async {
        let server = Server::start("").await;
        let spoofed = exchange(
            connect_from(STRANGER, server.address).await,
            whoami_request("x-forwarded-for: 6.6.6.6\r\nx-request-id: spoofed-by-a-stranger\r\n")
                .as_bytes(),
        )
        .await;
        assert_eq!(body_of(&spoofed), "127.0.0.3", "the claim is not used");
        let forwarded = exchange(
            connect_from(PROXY, server.address).await,
            whoami_request(
                "x-forwarded-for: 6.6.6.6, 198.51.100.7\r\nx-request-id: forwarded-by-the-proxy\r\n",
            )
            .as_bytes(),
        )
        .await;
        assert_eq!(body_of(&forwarded), "198.51.100.7");
        server.stop().await;
    });
    let access = |id: &str| {
        let lines = logs.lines_with(&format!("request_id={id}"));
        let lines: Vec<_> = lines
            .into_iter()
            .filter(|line| line.contains("autumn::access"))
            .collect();
        assert_eq!(lines.len(), 1, "one access line for {id}: {}", logs.text());
        lines[0].clone()
    };
    let line = access("spoofed-by-a-stranger");
    assert!(line.contains(" client_ip=127.0.0.3 "), "{line}");
    assert!(!line.contains("6.6.6.6"), "{line}");
    let line = access("forwarded-by-the-proxy");
    assert!(line.contains(" client_ip=198.51.100.7 "), "{line}");
}
