//! The client's address over real sockets, from loopback aliases (127.0.0.2
//! is the trusted proxy, 127.0.0.3 anyone else): in the access log, through
//! `X-Forwarded-For`, and through PROXY protocol headers (v1 and v2, over
//! plain HTTP and TLS), each read only from a trusted proxy.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::https::{client_config, served_files, tls_toml};
use crate::support::served::Served;
use autumn_testkit::tls::TestCa;
use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

const PROXY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const STRANGER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

#[get("/whoami")]
async fn whoami(ClientIp(address): ClientIp) -> String {
    address.to_string()
}

/// Serves with `[server] trusted_proxies = ["127.0.0.2"]` and `toml`.
struct Server;

impl Server {
    async fn start(toml: &str) -> Served {
        let config =
            AutumnConfig::from_toml_str(&format!("{TRUSTED}{toml}")).expect("test configuration");
        Served::start(
            autumn_web::app()
                .routes(routes![whoami])
                .with_config(config),
        )
        .await
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

/// A PROXY v1 header naming `client` (TCP4 or TCP6 by its family).
fn v1(client: IpAddr) -> Vec<u8> {
    let family = if client.is_ipv4() { "TCP4" } else { "TCP6" };
    let server = if client.is_ipv4() { "127.0.0.1" } else { "::1" };
    format!("PROXY {family} {client} {server} 51000 443\r\n").into_bytes()
}

/// A PROXY v2 header (command PROXY, TCP) naming `client`, with a TLV
/// after the addresses as balancers add.
fn v2(client: IpAddr) -> Vec<u8> {
    let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    header.push(0x21);
    let mut addresses = match client {
        IpAddr::V4(v4) => {
            header.push(0x11);
            [v4.octets(), Ipv4Addr::LOCALHOST.octets()].concat()
        }
        IpAddr::V6(v6) => {
            header.push(0x21);
            [v6.octets(), Ipv6Addr::LOCALHOST.octets()].concat()
        }
    };
    addresses.extend_from_slice(&51000_u16.to_be_bytes());
    addresses.extend_from_slice(&443_u16.to_be_bytes());
    // A TLV of a type no one defined: skipped with the header.
    addresses.extend_from_slice(&[0xe0, 0, 2, 7, 7]);
    let len = u16::try_from(addresses.len()).expect("short");
    header.extend_from_slice(&len.to_be_bytes());
    header.extend_from_slice(&addresses);
    header
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("an address")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxys_proxy_header_names_the_client_over_plain_http() {
    let server = Server::start("proxy_protocol = true\n").await;
    let address = server.address;
    let ask = |from: Ipv4Addr, header: Vec<u8>, headers: &'static str| async move {
        let sent = [header, whoami_request(headers).into_bytes()].concat();
        exchange(connect_from(from, address).await, &sent).await
    };

    // From the trusted proxy: v1 and v2, either family.
    for (header, named) in [
        (v1(ip("203.0.113.7")), "203.0.113.7"),
        (v1(ip("2001:db8::7")), "2001:db8::7"),
        (v2(ip("203.0.113.8")), "203.0.113.8"),
        (v2(ip("2001:db8::8")), "2001:db8::8"),
    ] {
        let answer = ask(PROXY, header, "").await;
        assert_eq!(body_of(&answer), named);
    }
    // The named client is the connection's: a header it sent itself is
    // not trusted (it is no proxy).
    let answer = ask(PROXY, v1(ip("203.0.113.7")), "x-forwarded-for: 6.6.6.6\r\n").await;
    assert_eq!(body_of(&answer), "203.0.113.7");
    // Without a header (a health check), the proxy's connection is served
    // as it is.
    let answer = ask(PROXY, Vec::new(), "").await;
    assert_eq!(body_of(&answer), "127.0.0.2");

    // From anyone else the header is not read: it is the start of a bad
    // request.
    for header in [v1(ip("203.0.113.7")), v2(ip("203.0.113.7"))] {
        let answer = ask(STRANGER, header, "").await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(!answer.contains("203.0.113.7"), "{answer}");
    }

    // A header that starts right but does not parse: closed, unanswered.
    for malformed in [
        &b"PROXY TCP4 not-an-address 127.0.0.1 51000 443\r\n"[..],
        b"PROXY TCP4 203.0.113.7 127.0.0.1 51000\r\n",
        b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x04\x7f\x00\x00\x01",
    ] {
        let answer = ask(PROXY, malformed.to_vec(), "").await;
        assert_eq!(answer, "", "{}", String::from_utf8_lossy(malformed));
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_proxy_protocol_a_trusted_proxys_proxy_header_is_not_read() {
    let server = Server::start("").await;
    let sent = [v1(ip("203.0.113.7")), whoami_request("").into_bytes()].concat();
    let answer = exchange(connect_from(PROXY, server.address).await, &sent).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_proxy_header_is_cut_off_with_the_header_read_timeout() {
    let server =
        Server::start("proxy_protocol = true\n[server.timeouts]\nheader_read_timeout_ms = 300\n")
            .await;
    let started = tokio::time::Instant::now();
    let answer = exchange(
        connect_from(PROXY, server.address).await,
        b"PROXY TCP4 203.0.113.7 ",
    )
    .await;
    assert_eq!(answer, "", "closed without an answer");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "closed after {:?}, before the timeout",
        started.elapsed()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxys_proxy_header_names_the_client_over_tls() {
    let ca = TestCa::new();
    let (_dir, cert, key) = served_files(&ca);
    let server = Server::start(&format!(
        "proxy_protocol = true\n{}",
        tls_toml(&cert, &key, "")
    ))
    .await;
    let config = client_config(&ca, &[b"http/1.1"]);
    // The header in the clear, then TLS, then the request.
    let ask = |from: Ipv4Addr, header: Vec<u8>| {
        let config = config.clone();
        let address = server.address;
        async move {
            let mut tcp = connect_from(from, address).await;
            tcp.write_all(&header).await.expect("send the header");
            let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok::<_, std::io::Error>(exchange(tls, whoami_request("").as_bytes()).await)
        }
    };
    for (header, named) in [
        (v1(ip("203.0.113.7")), "203.0.113.7"),
        (v2(ip("2001:db8::8")), "2001:db8::8"),
        (Vec::new(), "127.0.0.2"),
    ] {
        let answer = ask(PROXY, header).await.expect("a TLS handshake");
        assert_eq!(body_of(&answer), named);
    }
    // A stranger's header is where its ClientHello should be.
    for header in [v1(ip("203.0.113.7")), v2(ip("203.0.113.7"))] {
        let refused = ask(STRANGER, header).await;
        assert!(refused.is_err(), "{refused:?}");
    }
    // A malformed header from the proxy: closed before any handshake.
    let refused = ask(PROXY, b"PROXY TCP9 203.0.113.7 127.0.0.1 1 2\r\n".to_vec()).await;
    assert!(refused.is_err(), "{refused:?}");
    server.stop().await;
}
