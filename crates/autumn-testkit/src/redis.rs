//! Real Redis for the tests (feature `redis`): the shared server (`TEST_REDIS_URL`), private
//! `redis-server` children that can be stopped and started again (plain,
//! TLS-only with certificates from a [`TestCa`], or with an ACL user),
//! private Valkey servers ([`valkey`]), a MONITOR reader that sees commands
//! the way the server does, and a Redis Cluster of six servers, plain or
//! TLS-only ([`cluster`]).

use std::io::{self, Read as _, Write as _};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

pub mod cluster;
pub mod valkey;

use crate::tls::TestCa;
pub use valkey::ValkeyServer;

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

/// Every key under `prefix:`; on a cluster (a `redis+cluster://` URL of
/// [`cluster::RedisCluster`]), every master's.
pub async fn keys_under(url: &str, prefix: &str) -> Vec<String> {
    let Some(ports) = cluster::node_ports(url) else {
        return scan(url, prefix).await;
    };
    let mut keys = Vec::new();
    for port in ports {
        let node = format!("redis://127.0.0.1:{port}");
        // Replicas hold copies: count each key once, on its master.
        let role: Vec<::redis::Value> = ::redis::cmd("ROLE")
            .query_async(&mut plain_connection(&node).await)
            .await
            .expect("ROLE");
        if matches!(role.first(), Some(::redis::Value::BulkString(name)) if name == b"master") {
            keys.extend(scan(&node, prefix).await);
        }
    }
    keys
}

/// `SCAN` for `prefix:*` on one server.
async fn scan(url: &str, prefix: &str) -> Vec<String> {
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
    spec: Spec,
}

/// Whether a TLS server asks clients for a certificate
/// (`--tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCerts {
    /// It does not ask: any client that trusts its certificate connects.
    NotAsked,
    /// It refuses a client without a certificate signed by its CA.
    Required,
}

/// How a server is run, beyond its port.
#[derive(Clone, Default)]
struct Spec {
    /// The server program; `None`: `redis-server` from PATH.
    program: Option<PathBuf>,
    /// TLS only (`--port 0`): the certificate files and whether clients
    /// must present one.
    tls: Option<TlsFiles>,
    /// The one ACL user that may connect (the default user is off).
    acl_user: Option<(String, String)>,
}

impl Spec {
    /// TLS only, with a server certificate `ca` signs for `localhost`,
    /// `127.0.0.1` and `::1`.
    fn tls(program: Option<PathBuf>, ca: &TestCa, clients: ClientCerts) -> Self {
        let server = ca.server_cert(&["localhost", "127.0.0.1", "::1"]);
        Self {
            program,
            tls: Some(TlsFiles {
                ca: ca.ca_file().to_owned(),
                cert: server.cert,
                key: server.key,
                client: (ca.client_cert().to_owned(), ca.client_key().to_owned()),
                clients,
            }),
            acl_user: None,
        }
    }
}

#[derive(Clone)]
struct TlsFiles {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// The client certificate and key the readiness check presents.
    client: (PathBuf, PathBuf),
    clients: ClientCerts,
}

impl RedisServer {
    /// A server that keeps nothing across a restart (like the shared one).
    pub fn new() -> Self {
        Self::launch(None, Spec::default())
    }

    /// A server that writes every command to its append-only file before
    /// answering, so what it held survives `stop()` + `start()`.
    pub fn persistent() -> Self {
        let dir =
            std::env::temp_dir().join(format!("autumn-redis-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("a directory for the append-only file");
        Self::launch(Some(dir), Spec::default())
    }

    /// A server that speaks TLS only (its plaintext port is off:
    /// `--port 0`), with a server certificate `ca` signs for `localhost`,
    /// `127.0.0.1` and `::1` (not for 127.0.0.2, where it listens too, for
    /// the tests of the name check), asking clients for a certificate
    /// signed by `ca` or not. Reach it at [`url`](Self::url),
    /// `rediss://localhost:{port}`.
    pub fn with_tls(ca: &TestCa, clients: ClientCerts) -> Self {
        Self::launch(None, Spec::tls(None, ca, clients))
    }

    /// A server whose default user is off: only the ACL user `user` with
    /// `password` may connect (and run any command on any key).
    pub fn with_acl_user(user: &str, password: &str) -> Self {
        Self::launch(
            None,
            Spec {
                acl_user: Some((user.to_owned(), password.to_owned())),
                ..Spec::default()
            },
        )
    }

    /// A server run by `program` (another build of the server, Valkey's).
    pub(crate) fn with_program(program: PathBuf) -> Self {
        Self::launch(
            None,
            Spec {
                program: Some(program),
                ..Spec::default()
            },
        )
    }

    /// [`with_tls`](Self::with_tls), run by `program`.
    pub(crate) fn with_program_and_tls(
        program: PathBuf,
        ca: &TestCa,
        clients: ClientCerts,
    ) -> Self {
        Self::launch(None, Spec::tls(Some(program), ca, clients))
    }

    fn launch(dir: Option<PathBuf>, spec: Spec) -> Self {
        let mut last_error = String::new();
        // A free port can be taken between finding it and binding it: retry.
        for _ in 0..5 {
            let port = crate::free_port();
            let mut server = Self {
                port,
                child: None,
                dir: dir.clone(),
                spec: spec.clone(),
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

    /// `redis://127.0.0.1:{port}`; for a TLS server
    /// `rediss://localhost:{port}` (the name its certificate is for). No
    /// credentials: see [`url_as`](Self::url_as).
    pub fn url(&self) -> String {
        if self.spec.tls.is_some() {
            format!("rediss://localhost:{}", self.port)
        } else {
            format!("redis://127.0.0.1:{}", self.port)
        }
    }

    /// [`url`](Self::url) with `user:password@`.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        let url = self.url();
        let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
        format!("{scheme}://{user}:{password}@{rest}")
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
        let program = self
            .spec
            .program
            .clone()
            .unwrap_or_else(|| PathBuf::from("redis-server"));
        let mut command = Command::new(&program);
        match &self.spec.tls {
            Some(tls) => command
                .args(["--port", "0", "--tls-port", &port, "--tls-cert-file"])
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca)
                .args([
                    "--tls-auth-clients",
                    match tls.clients {
                        ClientCerts::NotAsked => "no",
                        ClientCerts::Required => "yes",
                    },
                ]),
            None => command.args(["--port", &port]),
        };
        if let Some((user, password)) = &self.spec.acl_user {
            command.args([
                "--user",
                "default",
                "off",
                "--user",
                user,
                "on",
                &format!(">{password}"),
                "~*",
                "&*",
                "+@all",
            ]);
        }
        // A TLS server also listens on 127.0.0.2, an address its
        // certificate does not name, for the tests of the name check.
        let bind = if self.spec.tls.is_some() {
            "127.0.0.1 127.0.0.2"
        } else {
            "127.0.0.1"
        };
        command
            .args(["--bind", bind, "--save", ""])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match &self.dir {
            Some(dir) => command
                .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
                .arg(dir),
            None => command.args(["--appendonly", "no"]),
        };
        let child = command.spawn().map_err(|error| match &self.spec.program {
            Some(program) => format!("cannot run {} ({error})", program.display()),
            None => format!(
                "cannot run redis-server ({error}): install it (`apt-get install redis-server`) \
                 so that it is on PATH"
            ),
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
            match self.ping() {
                Ok(()) => return Ok(()),
                Err(error) => last = error,
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        self.stop();
        Err(format!("redis-server did not answer PING in 10 s: {last}"))
    }
}

impl Default for RedisServer {
    fn default() -> Self {
        Self::new()
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

impl RedisServer {
    /// One PING as a client of this server would send it: over TLS with
    /// the CA's client certificate, as the ACL user.
    fn ping(&self) -> Result<(), String> {
        if self.spec.tls.is_none() && self.spec.acl_user.is_none() {
            return ping(self.port);
        }
        let url = match &self.spec.acl_user {
            Some((user, password)) => self.url_as(user, password),
            None => self.url(),
        };
        let client = match &self.spec.tls {
            Some(tls) => {
                let read = |path: &PathBuf| std::fs::read(path).map_err(|e| e.to_string());
                install_crypto_provider();
                ::redis::Client::build_with_tls(
                    url.as_str(),
                    ::redis::TlsCertificates {
                        client_tls: Some(::redis::ClientTlsConfig {
                            client_cert: read(&tls.client.0)?,
                            client_key: read(&tls.client.1)?,
                        }),
                        root_cert: Some(read(&tls.ca)?),
                    },
                )
            }
            None => ::redis::Client::open(url.as_str()),
        }
        .map_err(|error| error.to_string())?;
        let mut connection = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .map_err(|error| error.to_string())?;
        match ::redis::cmd("PING").query::<String>(&mut connection) {
            Ok(pong) if pong == "PONG" => Ok(()),
            Ok(other) => Err(other),
            Err(error) => Err(error.to_string()),
        }
    }
}

/// Makes ring the process's rustls crypto provider unless one is already
/// installed, as the framework does for its own `rediss://` connections.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // ring, as the framework builds with (autumn_base::tls says why);
        // deprecated by rustls 0.23.48 for its lack of post-quantum groups.
        #[allow(deprecated)]
        let ring = rustls::crypto::ring::default_provider();
        let _ = ring.install_default();
    }
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

/// A connection in MONITOR mode: every command the server runs, one line
/// each, in the order it ran them. The one MONITOR reader: the tests and the
/// bench (which includes this file) count commands with it.
pub struct Monitor {
    lines: BufReader<TcpStream>,
    /// A second connection, to send the markers that delimit a measurement.
    marker: TcpStream,
}

impl Monitor {
    /// Starts monitoring the Redis at `url`.
    pub async fn connect(url: &str) -> Self {
        Self::try_connect(url)
            .await
            .unwrap_or_else(|error| panic!("cannot monitor Redis at {url} ({error})"))
    }

    /// [`connect`](Self::connect), answering an error instead of panicking,
    /// for callers that skip what they cannot count.
    pub async fn try_connect(url: &str) -> io::Result<Self> {
        let info = ::redis::Client::open(url)
            .map_err(io::Error::other)?
            .get_connection_info()
            .clone();
        let (host, port) = match info.addr() {
            ::redis::ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
            other => {
                return Err(io::Error::other(format!(
                    "MONITOR needs a plain TCP Redis, not {other:?}"
                )));
            }
        };
        let settings = info.redis_settings();
        let connect = || async {
            let mut stream = TcpStream::connect((host.as_str(), port)).await?;
            // AUTH and SELECT as the URL asks, before anything else.
            if let Some(password) = settings.password() {
                let mut auth = vec!["AUTH"];
                auth.extend(settings.username());
                auth.push(password);
                call(&mut stream, &auth).await?;
            }
            if settings.db() != 0 {
                call(&mut stream, &["SELECT", &settings.db().to_string()]).await?;
            }
            io::Result::Ok(stream)
        };
        let mut lines = BufReader::new(connect().await?);
        lines
            .get_mut()
            .write_all(b"*1\r\n$7\r\nMONITOR\r\n")
            .await?;
        let mut ok = String::new();
        lines.read_line(&mut ok).await?;
        if ok.trim_end() != "+OK" {
            return Err(io::Error::other(format!(
                "MONITOR answered {:?}",
                ok.trim_end()
            )));
        }
        let mut monitor = Self {
            lines,
            marker: connect().await?,
        };
        monitor.try_mark().await?;
        Ok(monitor)
    }

    /// Every command the server ran since the last mark (or since
    /// connecting), in order. Exact, not timed: it sends a marker command
    /// and reads until the server reports it, so everything that ran before
    /// the marker is in.
    pub async fn mark(&mut self) -> Vec<String> {
        self.try_mark()
            .await
            .unwrap_or_else(|error| panic!("MONITOR: {error}"))
    }

    /// [`mark`](Self::mark), answering an error instead of panicking.
    pub async fn try_mark(&mut self) -> io::Result<Vec<String>> {
        let marker = format!("autumn-monitor-mark-{}", uuid::Uuid::new_v4().simple());
        call(&mut self.marker, &["ECHO", &marker]).await?;

        let mut seen = Vec::new();
        let read = async {
            loop {
                let mut line = String::new();
                if self.lines.read_line(&mut line).await? == 0 {
                    return Err(io::Error::other("MONITOR connection closed"));
                }
                if line.contains(&marker) {
                    return Ok(());
                }
                seen.push(line.trim_end().to_owned());
            }
        };
        // A guard, not a wait for time to pass: a regression fails instead of hanging.
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .map_err(|_| io::Error::other("MONITOR did not report the marker"))??;
        Ok(seen)
    }
}

/// Sends one command on `stream` and reads its one-line or bulk answer; an
/// error answer is an `Err`.
async fn call(stream: &mut TcpStream, args: &[&str]) -> io::Result<()> {
    let mut command = format!("*{}\r\n", args.len());
    for arg in args {
        command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(command.as_bytes()).await?;
    // `+OK\r\n`, `-ERR ...\r\n`, or `$len\r\n{bytes}\r\n`: read the first line a
    // byte at a time (nothing else is in flight on this connection), then
    // the bulk, if any.
    let mut first = Vec::new();
    while !first.ends_with(b"\r\n") {
        let mut byte = [0; 1];
        if stream.read(&mut byte).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        first.push(byte[0]);
    }
    let first = String::from_utf8_lossy(&first);
    let first = first.trim_end();
    if let Some(error) = first.strip_prefix('-') {
        return Err(io::Error::other(error.to_owned()));
    }
    if let Some(len) = first
        .strip_prefix('$')
        .and_then(|len| len.parse::<usize>().ok())
    {
        let mut bulk = vec![0; len + 2];
        stream.read_exact(&mut bulk).await?;
    }
    Ok(())
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

/// Who sent a MONITOR line's command: the client's address
/// (`127.0.0.1:54321`), or `lua` for a call made by a script.
pub fn source(line: &str) -> Option<&str> {
    line.split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'))
        .and_then(|(source, _)| source.split_whitespace().nth(1))
}

/// The command name of a MONITOR line, e.g. `EVALSHA`.
pub fn command_name(line: &str) -> &str {
    line.split_once("] \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or("", |(name, _)| name)
}
