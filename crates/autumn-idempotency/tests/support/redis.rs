//! Real Redis for the tests: the shared server (`TEST_REDIS_URL`), private
//! `redis-server` children that can be stopped and started again, and a
//! MONITOR reader that sees commands the way the server does.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

const HOW_TO_START: &str = "start one with \
    `redis-server --daemonize yes --port 6379 --save \"\" --appendonly no`, \
    or point TEST_REDIS_URL at a Redis 7 (e.g. TEST_REDIS_URL=redis://127.0.0.1:6380)";

/// The shared Redis: `TEST_REDIS_URL`, or the local default.
pub fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A key prefix no other test uses, so tests run in parallel on one Redis.
pub fn unique_prefix() -> String {
    format!("autumn-test:{}", uuid::Uuid::new_v4().simple())
}

/// The shared Redis's URL, once it answered PING. Panics with how to start
/// Redis when it does not: a test never passes without its Redis.
#[track_caller]
pub fn require_redis() -> String {
    let url = redis_url();
    let answer = ::redis::Client::open(url.as_str()).and_then(|client| {
        let mut connection = client.get_connection_with_timeout(Duration::from_secs(2))?;
        ::redis::cmd("PING").query::<String>(&mut connection)
    });
    match answer {
        Ok(pong) if pong == "PONG" => url,
        Ok(other) => panic!("Redis at {url} answered PING with {other:?}; {HOW_TO_START}"),
        Err(error) => panic!("Redis is not reachable at {url} ({error}); {HOW_TO_START}"),
    }
}

/// A plain connection for checks the store does not make (PTTL, SCAN...).
pub async fn plain_connection(url: &str) -> ::redis::aio::MultiplexedConnection {
    ::redis::Client::open(url)
        .expect("a Redis URL")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|error| {
            panic!("cannot connect to Redis at {url} ({error}); {HOW_TO_START}")
        })
}

/// Every key under `prefix:`.
pub async fn keys_under(url: &str, prefix: &str) -> Vec<String> {
    let mut connection = plain_connection(url).await;
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut connection)
            .await
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

/// A `redis-server` of the test's own on a free loopback port: stopped and
/// started again by the outage tests, killed on drop.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// Where a persistent server keeps its append-only file.
    dir: Option<PathBuf>,
}

impl RedisServer {
    /// A server that keeps nothing across a restart (like the shared one).
    pub fn new() -> Self {
        Self::launch(None)
    }

    /// A server that writes every command to its append-only file before
    /// answering, so what it held survives `stop()` + `start()`.
    pub fn persistent() -> Self {
        let dir =
            std::env::temp_dir().join(format!("autumn-redis-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("a directory for the append-only file");
        Self::launch(Some(dir))
    }

    fn launch(dir: Option<PathBuf>) -> Self {
        let mut last_error = String::new();
        // A free port can be taken between finding it and binding it: retry.
        for _ in 0..5 {
            let port = free_port();
            let mut server = Self {
                port,
                child: None,
                dir: dir.clone(),
            };
            match server.try_start() {
                Ok(()) => return server,
                Err(error) => {
                    server.dir = None; // not ours to delete yet
                    last_error = error;
                }
            }
        }
        panic!("could not start a redis-server of the test's own: {last_error}");
    }

    /// `redis://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the server again on the same port, and waits until it answers.
    #[track_caller]
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "the server is already running");
        if let Err(error) = self.try_start() {
            panic!(
                "could not restart redis-server on port {}: {error}",
                self.port
            );
        }
    }

    /// Kills the server (no shutdown: like a crash) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn try_start(&mut self) -> Result<(), String> {
        let port = self.port.to_string();
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match &self.dir {
            Some(dir) => command
                .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
                .arg(dir),
            None => command.args(["--appendonly", "no"]),
        };
        let child = command.spawn().map_err(|error| {
            format!(
                "cannot run redis-server ({error}): install it (`apt-get install redis-server`) \
                 so that it is on PATH"
            )
        })?;
        self.child = Some(child);
        self.wait_until_ready()
    }

    /// Polls PING until the server answers (a bounded number of tries).
    fn wait_until_ready(&mut self) -> Result<(), String> {
        let mut last = String::from("no answer");
        for _ in 0..400 {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(format!("redis-server exited at start ({status}): {last}"));
            }
            match ping(self.port) {
                Ok(()) => return Ok(()),
                Err(error) => last = error,
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        self.stop();
        Err(format!("redis-server did not answer PING in 10 s: {last}"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

/// One PING over a fresh connection; `Ok` on `+PONG` (not on `-LOADING`).
fn ping(port: u16) -> Result<(), String> {
    let mut stream = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .map_err(|error| error.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(|error| error.to_string())?;
    stream
        .write_all(b"*1\r\n$4\r\nPING\r\n")
        .map_err(|error| error.to_string())?;
    let mut answer = [0; 64];
    let read = stream
        .read(&mut answer)
        .map_err(|error| error.to_string())?;
    let answer = String::from_utf8_lossy(&answer[..read]);
    if answer.starts_with("+PONG") {
        Ok(())
    } else {
        Err(answer.trim_end().to_owned())
    }
}

/// `(host, port)` of a `redis://` URL.
fn address(url: &str) -> (String, u16) {
    let client = ::redis::Client::open(url).expect("a Redis URL");
    match client.get_connection_info().addr() {
        ::redis::ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
        other => panic!("MONITOR needs a plain TCP Redis, not {other:?}"),
    }
}

/// A connection in MONITOR mode: every command the server runs, one line
/// each, in the order it ran them.
pub struct Monitor {
    lines: BufReader<TcpStream>,
    /// A second connection, to send the markers that delimit a measurement.
    marker: TcpStream,
}

impl Monitor {
    /// Starts monitoring the Redis at `url`.
    pub async fn connect(url: &str) -> Self {
        let (host, port) = address(url);
        let connect = || async {
            TcpStream::connect((host.as_str(), port))
                .await
                .unwrap_or_else(|error| panic!("cannot connect to Redis at {url} ({error})"))
        };
        let mut lines = BufReader::new(connect().await);
        lines
            .get_mut()
            .write_all(b"*1\r\n$7\r\nMONITOR\r\n")
            .await
            .expect("send MONITOR");
        let mut ok = String::new();
        lines.read_line(&mut ok).await.expect("MONITOR answer");
        assert_eq!(ok.trim_end(), "+OK", "MONITOR refused");
        let mut monitor = Self {
            lines,
            marker: connect().await,
        };
        monitor.mark().await;
        monitor
    }

    /// Every command the server ran since the last mark (or since
    /// connecting), in order. Exact, not timed: it sends a marker command
    /// and reads until the server reports it, so everything that ran before
    /// the marker is in.
    pub async fn mark(&mut self) -> Vec<String> {
        let marker = format!("autumn-monitor-mark-{}", uuid::Uuid::new_v4().simple());
        let echo = format!("*2\r\n$4\r\nECHO\r\n${}\r\n{marker}\r\n", marker.len());
        self.marker
            .write_all(echo.as_bytes())
            .await
            .expect("send the marker");
        // The ECHO answer: `$len\r\n{marker}\r\n`.
        let mut answer = vec![0; format!("${}\r\n{marker}\r\n", marker.len()).len()];
        self.marker
            .read_exact(&mut answer)
            .await
            .expect("the marker's answer");

        let mut seen = Vec::new();
        let read = async {
            loop {
                let mut line = String::new();
                let read = self.lines.read_line(&mut line).await.expect("MONITOR line");
                assert!(read > 0, "MONITOR connection closed");
                if line.contains(&marker) {
                    return;
                }
                seen.push(line.trim_end().to_owned());
            }
        };
        // A guard, not a wait for time to pass: a regression fails instead of hanging.
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .expect("MONITOR reported the marker");
        seen
    }
}

/// Whether a MONITOR line is a call made by a Lua script (`[0 lua]`), which
/// is not a client command.
pub fn is_script_internal(line: &str) -> bool {
    line.split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'))
        .is_some_and(|(source, _)| source.ends_with(" lua"))
}

/// The client commands (not script-internal calls) among `lines` that
/// mention `needle` (a key or a prefix; `""` matches every command).
pub fn client_commands<'a>(lines: &'a [String], needle: &str) -> Vec<&'a str> {
    lines
        .iter()
        .map(String::as_str)
        .filter(|line| !is_script_internal(line) && line.contains(needle))
        .collect()
}

/// The command name of a MONITOR line, e.g. `EVALSHA`.
pub fn command_name(line: &str) -> &str {
    line.split_once("] \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or("", |(name, _)| name)
}
