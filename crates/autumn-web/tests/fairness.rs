//! Fairness between clients, tried as a hostile client would: 1,500 idle,
//! 500 header-drip and 600 body-dribble sockets that reconnect as they are
//! cut, from one address and from 50 (loopback aliases), against a server
//! at its default cap of 512 connections, while an ordinary client on
//! another address has each of its requests served within 1 s. Also the
//! client address through trusted proxies, and the 503 past the
//! per-client cap.
//!
//! The server runs on a runtime of its own (as a process would), so the
//! attack's tasks do not share its threads. This is a test binary of its
//! own, and its two attacks run one at a time: thousands of sockets and two
//! busy cores are not something the other tests should run beside, nor
//! each other. Its soft limit on open files is raised to the hard limit
//! first: the common default of 1,024 is too few for an attack.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use autumn_web::config::AutumnConfig;
use autumn_web::prelude::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

#[get("/hello")]
async fn hello() -> &'static str {
    "hello"
}

#[get("/whoami")]
async fn whoami(ClientIp(address): ClientIp) -> String {
    address.to_string()
}

#[post("/upload")]
async fn upload(body: String) -> String {
    body.len().to_string()
}

/// A server on a thread and runtime of its own; stopped on drop.
struct Server {
    address: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(toml: &str) -> Self {
        let config = AutumnConfig::from_toml_str(toml).expect("test configuration");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (bound, address) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                // The backlog `run()` listens with: a flood of reconnects
                // must not overflow it and drop an ordinary client's SYN.
                let socket = TcpSocket::new_v4().expect("socket");
                socket
                    .bind("127.0.0.1:0".parse().expect("address"))
                    .expect("bind");
                let listener = socket.listen(4096).expect("listen");
                bound
                    .send(listener.local_addr().expect("address"))
                    .expect("the test waits");
                autumn_web::app()
                    .routes(routes![hello, whoami, upload])
                    .with_config(config)
                    .serve(listener, async move {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("served");
            });
        });
        Self {
            address: address.recv().expect("the server binds"),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A connection to `server` from the loopback address `from`.
async fn connect_from(from: Ipv4Addr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0))?;
    socket.connect(server).await
}

/// `request` from `from` on a fresh connection: the answer.
async fn request_from(from: Ipv4Addr, server: SocketAddr, request: &str) -> String {
    let mut stream = connect_from(from, server).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer).await;
    answer
}

#[derive(Clone, Copy)]
enum Kind {
    /// Connects and sends nothing.
    Idle,
    /// Sends a request head a byte at a time, never finishing it.
    HeaderDrip,
    /// Sends a whole head announcing a large body, then a byte at a time.
    BodyDribble,
}

/// One attacking socket, reconnecting (after 20 ms) each time it is cut,
/// until `stop`.
async fn attacker(kind: Kind, from: Ipv4Addr, server: SocketAddr, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = connect_from(from, server).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let opening: &[u8] = match kind {
            Kind::Idle => b"",
            Kind::HeaderDrip => b"GET /hello HTTP/1.1\r\n",
            Kind::BodyDribble => {
                b"POST /upload HTTP/1.1\r\nhost: t\r\ncontent-length: 100000\r\n\r\n"
            }
        };
        if stream.write_all(opening).await.is_ok() {
            let mut buf = [0_u8; 256];
            loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let byte: &[u8] = match kind {
                    Kind::Idle => b"",
                    Kind::HeaderDrip => b"x",
                    Kind::BodyDribble => b"a",
                };
                if !byte.is_empty() && stream.write_all(byte).await.is_err() {
                    break;
                }
                // Cut (EOF or an answer): reconnect.
                match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await
                {
                    Ok(Ok(0) | Err(_)) => break,
                    Ok(Ok(_)) => break,
                    Err(_) => {}
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One attack at a time.
static ATTACK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Open files an attack needs at once: its 2,600 sockets, the server's ends
/// of up to twice `max_connections` (those served and those waiting for a
/// slot), and room for the rest of the process.
const ATTACK_FILES: u64 = 4_096;

/// Raises this process's open-file soft limit to its hard limit, so that an
/// attack's sockets fit where the soft limit is the usual 1,024; fails
/// saying what to change when even the hard limit is too low.
#[cfg(unix)]
fn room_for_the_attack() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    // `None` is unlimited.
    let hard = limit.maximum.unwrap_or(u64::MAX);
    assert!(
        hard >= ATTACK_FILES,
        "this test needs up to {ATTACK_FILES} open files at once (its attack's sockets and the \
         server's), but the open-file hard limit (ulimit -Hn) is {hard}: raise it to at least \
         {ATTACK_FILES} (as root, or with LimitNOFILE= / --ulimit nofile= for a service or a \
         container) and run it again"
    );
    if limit.current.is_some_and(|soft| soft < ATTACK_FILES) {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        )
        .unwrap_or_else(|error| {
            panic!("cannot raise the open-file soft limit to the hard limit ({hard}): {error}")
        });
    }
}

/// Elsewhere no such limit applies.
#[cfg(not(unix))]
fn room_for_the_attack() {}

/// Runs the 2,600-socket mix from `addresses` for a while, and returns how
/// long each of an ordinary client's requests (from 127.0.0.200) took.
async fn ordinary_latencies_under_attack(addresses: &[Ipv4Addr]) -> Vec<Duration> {
    room_for_the_attack();
    let _alone = ATTACK.lock().await;
    let server = Server::start("");
    let stop = Arc::new(AtomicBool::new(false));
    let mut attackers = Vec::new();
    let mix = std::iter::repeat_n(Kind::Idle, 1_500)
        .chain(std::iter::repeat_n(Kind::HeaderDrip, 500))
        .chain(std::iter::repeat_n(Kind::BodyDribble, 600));
    for (n, kind) in mix.enumerate() {
        let from = addresses[n % addresses.len()];
        attackers.push(tokio::spawn(attacker(
            kind,
            from,
            server.address,
            stop.clone(),
        )));
    }
    // Let the attack fill the server.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ordinary = Ipv4Addr::new(127, 0, 0, 200);
    let mut latencies = Vec::new();
    for _ in 0..4 {
        let started = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            request_from(
                ordinary,
                server.address,
                "GET /hello HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n",
            ),
        )
        .await
        .expect("an answer within 20 s");
        assert!(answer.ends_with("hello"), "{answer}");
        latencies.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.abort();
    }
    drop(server);
    latencies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_client_is_served_within_a_second_while_one_address_attacks() {
    let latencies = ordinary_latencies_under_attack(&[Ipv4Addr::new(127, 0, 0, 1)]).await;
    assert!(
        latencies.iter().all(|took| *took < Duration::from_secs(1)),
        "{latencies:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_client_is_served_within_a_second_while_fifty_addresses_attack() {
    let addresses: Vec<_> = (2..52).map(|n| Ipv4Addr::new(127, 0, 0, n)).collect();
    let latencies = ordinary_latencies_under_attack(&addresses).await;
    assert!(
        latencies.iter().all(|took| *took < Duration::from_secs(1)),
        "{latencies:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_cap_a_client_gets_503_with_a_problem_document() {
    let server = Server::start("[server]\nmax_connections_per_client = 2\n");
    let from = Ipv4Addr::new(127, 0, 0, 77);
    let _first = connect_from(from, server.address).await.expect("first");
    let _second = connect_from(from, server.address).await.expect("second");
    let answer = request_from(
        from,
        server.address,
        "GET /hello HTTP/1.1\r\nhost: t\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("max_connections_per_client"), "{answer}");
    // Another address is not held to this one's cap.
    let other = request_from(
        Ipv4Addr::new(127, 0, 0, 78),
        server.address,
        "GET /hello HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(other.ends_with("hello"), "{other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_address_comes_from_the_socket_or_from_trusted_proxies_only() {
    let whoami = |forwarded: &str| {
        format!(
            "GET /whoami HTTP/1.1\r\nhost: t\r\nconnection: close\r\nx-forwarded-for: {forwarded}\r\n\r\n"
        )
    };
    let untrusted = Server::start("");
    let answer = request_from(
        Ipv4Addr::new(127, 0, 0, 9),
        untrusted.address,
        &whoami("198.51.100.7"),
    )
    .await;
    assert!(
        answer.ends_with("\r\n\r\n127.0.0.9"),
        "a claim is ignored: {answer}"
    );
    drop(untrusted);

    let behind_proxy = Server::start("[server]\ntrusted_proxies = [\"127.0.0.0/24\"]\n");
    let answer = request_from(
        Ipv4Addr::new(127, 0, 0, 9),
        behind_proxy.address,
        &whoami("6.6.6.6, 198.51.100.7"),
    )
    .await;
    assert!(answer.ends_with("\r\n\r\n198.51.100.7"), "{answer}");
}

#[test]
fn an_unparsable_trusted_proxy_stops_startup_naming_the_key() {
    let error = AutumnConfig::from_toml_str("[server]\ntrusted_proxies = [\"proxy.internal\"]\n")
        .and_then(|config| config.validate().map(|()| config))
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(error.contains("server.trusted_proxies"), "{error}");
    assert!(error.contains("proxy.internal"), "{error}");
}
