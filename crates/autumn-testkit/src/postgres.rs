//! Real PostgreSQL for the tests (feature `postgres`): a schema of the
//! test's own on the shared server ([`PgSchema`], dropped on drop), servers
//! of the test's own for restart and TLS tests ([`PrivatePostgres`], with
//! certificates from a [`TestCa`]), a PgBouncer in transaction pooling mode
//! ([`PgBouncer`]), and a proxy that counts round trips ([`RoundTrips`]).
//!
//! The shared server is `TEST_DATABASE_URL`, by default
//! `postgres://postgres@127.0.0.1:5432/test`. What lives on it (schemas,
//! databases) is named `autumn_test_{unix seconds}_{random}`, so a later run
//! drops what a crashed one left behind, an hour on, without touching what
//! other test processes use.

use std::sync::Arc;

use crate::tls::TestCa;

/// What to do when PostgreSQL does not answer.
const HOW_TO_START: &str = "start it with \
    `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` \
    or set TEST_DATABASE_URL";

/// How long a test's schema is kept after its creation when nothing drops
/// it (a crashed run): later runs drop it then.
const STALE_AFTER_SECS: u64 = 3600;

/// `TEST_DATABASE_URL`, or the loopback PostgreSQL of the project's machines.
pub fn postgres_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A client on `url`, its connection driven on the current runtime.
///
/// # Panics
///
/// When PostgreSQL does not answer, saying how to start it.
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is not reachable at {url} ({e}); {HOW_TO_START}"));
    tokio::spawn(connection);
    client
}

/// A schema of the test's own on the shared PostgreSQL, and a URL whose
/// connections use it (`options=-c search_path=...`); the schema is dropped,
/// with everything in it, when this is dropped.
///
/// It derefs to its URL, so `&schema` is a `&str` URL.
///
/// ```no_run
/// let schema = autumn_testkit::postgres::PgSchema::create();
/// let url: &str = &schema;
/// assert!(url.contains("search_path"));
/// ```
#[derive(Debug)]
pub struct PgSchema {
    name: String,
    url: String,
}

impl PgSchema {
    /// Creates a new, empty schema (and drops those crashed runs left over
    /// an hour ago).
    ///
    /// # Panics
    ///
    /// When PostgreSQL does not answer, saying how to start it.
    pub fn create() -> Self {
        let base = postgres_url();
        let name = test_name();
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{separator}options=-c%20search_path%3D{name}");
        let setup_name = name.clone();
        crate::on_own_runtime(move || async move {
            let client = connect(&base).await;
            drop_stale(&client, Stale::Schemas).await;
            client
                .batch_execute(&format!("CREATE SCHEMA {setup_name}"))
                .await
                .expect("create schema");
        });
        Self { name, url }
    }

    /// The URL whose connections use this schema.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keeps the schema past this value (for a factory whose stores outlive
    /// it) and returns its URL; a later run drops it an hour on.
    pub fn keep(self) -> String {
        let this = std::mem::ManuallyDrop::new(self);
        this.url.clone()
    }
}

impl std::ops::Deref for PgSchema {
    type Target = str;

    fn deref(&self) -> &str {
        &self.url
    }
}

impl std::fmt::Display for PgSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

impl Drop for PgSchema {
    /// Drops the schema, waiting at most a few seconds for locks (a pool a
    /// test leaked may still be in a transaction); a schema left behind is
    /// dropped by a later run.
    fn drop(&mut self) {
        let (base, name) = (postgres_url(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            crate::own_runtime().block_on(async move {
                let Ok((client, connection)) =
                    tokio_postgres::connect(&base, tokio_postgres::NoTls).await
                else {
                    return;
                };
                tokio::spawn(connection);
                let _ = client
                    .batch_execute(&format!(
                        "SET lock_timeout = '5s'; DROP SCHEMA IF EXISTS {name} CASCADE"
                    ))
                    .await;
            });
        });
        // Never a panic in drop: a failure leaves the schema to a later run.
        let _ = dropped.join();
    }
}

/// `autumn_test_{unix seconds}_{random}`: the creation time lets later runs
/// tell what crashed runs left behind.
fn test_name() -> String {
    format!(
        "autumn_test_{}_{}",
        unix_now(),
        uuid::Uuid::new_v4().simple()
    )
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// What [`drop_stale`] looks for.
#[derive(Clone, Copy)]
enum Stale {
    Schemas,
    Databases,
}

/// Drops test schemas or databases created more than an hour ago (crashed
/// runs leave theirs behind). Names that do not parse come from older runs:
/// those go too.
async fn drop_stale(client: &tokio_postgres::Client, what: Stale) {
    let list = match what {
        Stale::Schemas => "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'autumn\\_test\\_%'",
        Stale::Databases => {
            "SELECT datname FROM pg_database WHERE datname LIKE 'autumn\\_test\\_%'"
        }
    };
    let rows = client.query(list, &[]).await.expect("list test schemas");
    let now = unix_now();
    for row in rows {
        let name: String = row.get(0);
        let created = name.split('_').nth(2).and_then(|t| t.parse::<u64>().ok());
        if created.is_none_or(|created| created + STALE_AFTER_SECS < now) {
            let drop = match what {
                Stale::Schemas => format!("DROP SCHEMA IF EXISTS {name} CASCADE"),
                Stale::Databases => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            };
            let _ = client.batch_execute(&drop).await;
        }
    }
}

/// A PostgreSQL server of the test's own, on a free loopback port, for tests
/// that restart or kill it, or need TLS (never the shared one on 5432). It
/// runs as the `postgres` user (`initdb` refuses root) from a temporary
/// directory, and is stopped and removed on drop.
pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    port: u16,
    /// Where `initdb` and `pg_ctl` are ([`server_bin`]).
    bin: std::path::PathBuf,
    /// The CA that signed the server's certificate, with TLS (kept for its
    /// certificate file).
    ca: Option<TestCa>,
}

impl PrivatePostgres {
    /// Creates a cluster and starts it (about a second).
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// Creates a cluster with TLS on and starts it: a new [`TestCa`] signs
    /// the server's certificate for `names` (say `["localhost"]`), and
    /// [`ca_file`](Self::ca_file) is that CA's certificate. Connections
    /// from loopback may use TLS (`hostssl`), and without it only when
    /// `plaintext` (`hostnossl`); both are trusted, no password.
    pub fn start_tls(names: &[&str], plaintext: bool) -> Self {
        Self::start_with(Some((names, plaintext)))
    }

    fn start_with(tls: Option<(&[&str], bool)>) -> Self {
        let bin = server_bin();
        let dir = tempfile::Builder::new()
            .prefix("autumn-pg-")
            .tempdir()
            .expect("temp dir");
        if running_as_root() {
            run(std::process::Command::new("chown")
                .arg("postgres:postgres")
                .arg(dir.path()));
        }
        let port = crate::free_port();
        let mut server = Self {
            dir,
            port,
            bin,
            ca: None,
        };
        run(server
            .as_postgres("initdb")
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(server.data()));
        if let Some((names, plaintext)) = tls {
            server.set_up_tls(names, plaintext);
        }
        server.pg_ctl("start");
        server
    }

    /// Certificate files, `ssl = on`, and a `pg_hba.conf` that allows TLS
    /// (and plaintext when `plaintext`) from loopback.
    fn set_up_tls(&mut self, names: &[&str], plaintext: bool) {
        let ca = TestCa::new();
        let server = ca.server_cert(names);
        // Copied beside the cluster, where the server's user may read them
        // (the CA's directory is the test's own); the key keeps its 0600.
        let cert_file = self.dir.path().join("server.crt");
        let key_file = self.dir.path().join("server.key");
        std::fs::copy(&server.cert, &cert_file).expect("copy the server certificate");
        std::fs::copy(&server.key, &key_file).expect("copy the server key");
        let settings = format!(
            "\nssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
            cert_file.display(),
            key_file.display()
        );
        let conf = self.data().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("read postgresql.conf");
        text.push_str(&settings);
        std::fs::write(&conf, text).expect("write postgresql.conf");
        let mut hba = String::from(
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostssl all all ::1/128 trust\n",
        );
        if plaintext {
            hba.push_str(
                "hostnossl all all 127.0.0.1/32 trust\n\
                 hostnossl all all ::1/128 trust\n",
            );
        }
        let hba_file = self.data().join("pg_hba.conf");
        std::fs::write(&hba_file, hba).expect("write pg_hba.conf");
        if running_as_root() {
            // Written by root; the server runs as postgres and reads them.
            run(std::process::Command::new("chown")
                .arg("postgres:postgres")
                .args([&cert_file, &key_file, &conf, &hba_file]));
        }
        self.ca = Some(ca);
    }

    /// The URL of the `postgres` database on this server.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL of the `postgres` database on this server, reached as
    /// `host` (`localhost` or `127.0.0.1`: it listens on 127.0.0.1), with
    /// `query` (say `sslmode=verify-full`) when not empty.
    pub fn url_at(&self, host: &str, query: &str) -> String {
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!("postgres://postgres@{host}:{}/postgres{query}", self.port)
    }

    /// The certificate (PEM) of the CA that signed the server's, for
    /// `sslrootcert`.
    ///
    /// # Panics
    ///
    /// When the server was not started with [`start_tls`](Self::start_tls).
    pub fn ca_file(&self) -> &std::path::Path {
        self.ca
            .as_ref()
            .expect("a server started with PrivatePostgres::start_tls")
            .ca_file()
    }

    /// Restarts the server (fast shutdown: open connections are closed).
    pub fn restart(&self) {
        self.pg_ctl("restart");
    }

    /// Stops the server (fast shutdown: open connections are closed).
    pub fn stop(&self) {
        self.pg_ctl("stop");
    }

    /// Starts a stopped server again on the same port.
    pub fn resume(&self) {
        self.pg_ctl("start");
    }

    fn data(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    fn pg_ctl(&self, action: &str) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c shared_buffers=16MB",
            self.port,
            self.dir.path().display()
        );
        run(self
            .as_postgres("pg_ctl")
            .args(["-w", "-m", "fast", "-D"])
            .arg(self.data())
            .args(["-o", &options, "-l"])
            .arg(self.dir.path().join("log"))
            .arg(action));
    }

    /// `program` from the PostgreSQL binaries, as the `postgres` user.
    fn as_postgres(&self, program: &str) -> std::process::Command {
        let program = self.bin.join(program);
        if running_as_root() {
            let mut command = std::process::Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            std::process::Command::new(program)
        }
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self
            .as_postgres("pg_ctl")
            .args(["-w", "-m", "immediate", "-D"])
            .arg(self.data())
            .arg("stop")
            .output();
    }
}

/// The installed PostgreSQL's server programs: the newest
/// `/usr/lib/postgresql/{version}/bin` (Debian's layout, several versions
/// side by side) that has `initdb` and `pg_ctl`, else `pg_config --bindir`
/// when those are there (Homebrew, most other layouts).
///
/// # Panics
///
/// When neither has them, saying how to install PostgreSQL.
fn server_bin() -> std::path::PathBuf {
    let pg_config = std::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().into());
    server_bin_in(std::path::Path::new("/usr/lib/postgresql"), pg_config).unwrap_or_else(|| {
        panic!(
            "no PostgreSQL server programs (initdb and pg_ctl) under /usr/lib/postgresql/*/bin \
             or in `pg_config --bindir`: install PostgreSQL (Debian/Ubuntu: \
             apt-get install postgresql; Fedora: dnf install postgresql-server; \
             macOS: brew install postgresql@17)"
        )
    })
}

/// [`server_bin`] with Debian's versions under `versions` and `pg_config`'s
/// answer given.
fn server_bin_in(
    versions: &std::path::Path,
    pg_config: Option<std::path::PathBuf>,
) -> Option<std::path::PathBuf> {
    let serves = |bin: &std::path::Path| ["initdb", "pg_ctl"].iter().all(|p| bin.join(p).is_file());
    let newest = std::fs::read_dir(versions)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            // "9.6" below "15": compared as numbers, part by part.
            let version: Vec<u32> = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(|part| part.parse().ok())
                .collect::<Option<_>>()?;
            let bin = entry.path().join("bin");
            serves(&bin).then_some((version, bin))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin);
    newest.or_else(|| pg_config.filter(|bin| serves(bin)))
}

fn running_as_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

fn run(command: &mut std::process::Command) {
    let output = command.output().expect("run a PostgreSQL program");
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A TCP proxy in front of PostgreSQL that counts the client's round trips:
/// each `Sync` (the end of an extended-protocol exchange) and each simple
/// `Query` is one.
pub struct RoundTrips {
    count: Arc<std::sync::atomic::AtomicUsize>,
    url: String,
}

impl RoundTrips {
    /// Starts the proxy for `url` (inside a tokio runtime); connect to
    /// [`url`](Self::url) instead.
    pub async fn proxy(url: &str) -> Self {
        let rest = url.split_once('@').map_or(url, |(_, rest)| rest);
        let authority = rest.split(['/', '?']).next().expect("host and port");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let local = listener.local_addr().expect("proxy address");
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let upstream = authority.to_owned();
        let counter = count.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let counter = counter.clone();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    if relay_startup(&mut from_client, &mut to_client, &mut to_server)
                        .await
                        .is_err()
                    {
                        return;
                    }
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                    });
                    let _ = relay_counting(&mut from_client, to_server, &counter).await;
                });
            }
        });
        Self {
            count,
            url: url.replacen(authority, &local.to_string(), 1),
        }
    }

    /// The URL that goes through the proxy.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Round trips since the last call.
    pub fn take(&self) -> usize {
        self.count.swap(0, std::sync::atomic::Ordering::SeqCst)
    }
}

/// Forwards the client's startup message (it has no type byte). A TLS or
/// GSS encryption request before it is answered "no" here, not passed on:
/// the proxy must read the messages it counts, so the connection stays
/// plaintext (a client in the default `sslmode=prefer` carries on without
/// TLS).
async fn relay_startup(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    back: &mut tokio::net::tcp::OwnedWriteHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    loop {
        let length = from.read_u32().await?;
        let mut startup = vec![0; usize::try_from(length).unwrap_or(0).saturating_sub(4)];
        from.read_exact(&mut startup).await?;
        if matches!(startup.get(..4), Some([0x04, 0xd2, 0x16, 0x2f | 0x30])) {
            back.write_all(b"N").await?;
            continue;
        }
        to.write_all(&length.to_be_bytes()).await?;
        to.write_all(&startup).await?;
        return Ok(());
    }
}

/// Forwards the client's messages after the startup, counting `S` and `Q`.
async fn relay_counting(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    count: &std::sync::atomic::AtomicUsize,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    loop {
        let kind = from.read_u8().await?;
        let length = from.read_u32().await?;
        let mut body = vec![0; usize::try_from(length).unwrap_or(0).saturating_sub(4)];
        from.read_exact(&mut body).await?;
        if kind == b'S' || kind == b'Q' {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        to.write_all(&[kind]).await?;
        to.write_all(&length.to_be_bytes()).await?;
        to.write_all(&body).await?;
    }
}

/// A PgBouncer of the test's own on a free loopback port, in transaction
/// pooling mode (the mode that hands each transaction whichever server
/// connection is free), in front of the shared PostgreSQL on 5432. Any
/// database name is passed through to the server of the same name. Few
/// server connections per database (4), so clients' transactions interleave
/// on them as in production; few in all (24), closed after a second idle,
/// so the tests' many databases never use up the shared server's
/// connections. Killed on drop.
///
/// PgBouncer refuses to run as root: as root it is started with
/// `-u postgres`, which also needs its files readable by that user.
pub struct PgBouncer {
    /// The shell PgBouncer runs under.
    child: std::process::Child,
    /// Closing it makes the shell stop PgBouncer and remove its directory.
    lifeline: Option<std::process::ChildStdin>,
    port: u16,
    /// Removed by the shell.
    _dir: std::path::PathBuf,
}

impl PgBouncer {
    /// Starts PgBouncer and waits until it accepts connections.
    pub fn start() -> Self {
        let upstream = postgres_url();
        let dir = tempfile::Builder::new()
            .prefix("autumn-pgbouncer-")
            .tempdir()
            .expect("temp dir");
        let port = crate::free_port();
        let (host, server_port) = upstream
            .split_once('@')
            .map_or(upstream.as_str(), |(_, rest)| rest)
            .split(['/', '?'])
            .next()
            .and_then(|authority| authority.rsplit_once(':'))
            .expect("TEST_DATABASE_URL names host:port");
        std::fs::write(dir.path().join("users.txt"), "\"postgres\" \"\"\n").expect("users file");
        let config = format!(
            "[databases]\n* = host={host} port={server_port}\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {users}\npool_mode = transaction\n\
             max_client_conn = 2000\ndefault_pool_size = 4\n\
             max_user_connections = 24\nserver_idle_timeout = 1\n\
             ignore_startup_parameters = extra_float_digits,options\n",
            users = dir.path().join("users.txt").display(),
        );
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(&ini, config).expect("pgbouncer.ini");
        // PgBouncer runs under a shell that stops it when its stdin closes:
        // the test process holds the other end, so even a PgBouncer kept in
        // a `static` (never dropped) goes when the tests do, and takes its
        // directory with it.
        let user = if running_as_root() {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
                .expect("chmod the pgbouncer directory");
            "-u postgres"
        } else {
            ""
        };
        // Debian installs it in /usr/sbin, which a non-root PATH lacks.
        let program = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .unwrap_or("pgbouncer");
        let script = format!(
            "{program} {user} '{ini}' >'{dir}/log' 2>&1 & pid=$!; cat >/dev/null; \
             kill $pid 2>/dev/null; wait $pid; rm -rf '{dir}'",
            ini = ini.display(),
            dir = dir.path().display(),
        );
        assert!(
            std::process::Command::new(program)
                .arg("--version")
                .output()
                .is_ok(),
            "cannot run pgbouncer: install it (`apt-get install pgbouncer`)"
        );
        let mut child = std::process::Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sh to run pgbouncer under");
        let lifeline = child.stdin.take();
        let bouncer = Self {
            child,
            lifeline,
            port,
            _dir: dir.keep(),
        };
        crate::eventually(
            &format!("pgbouncer to listen on port {port}"),
            std::time::Duration::from_secs(10),
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        );
        bouncer
    }

    /// The URL of database `name` through PgBouncer.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// A new, empty database made directly on the server (a database, not
    /// a schema: PgBouncer 1.18 cannot pass the `search_path` option on, so
    /// a database of its own is how a test stays apart from the others);
    /// returns its URL through PgBouncer. Databases older than an hour, left
    /// by crashed runs, are dropped on the way.
    ///
    /// # Panics
    ///
    /// When the shared PostgreSQL does not answer.
    pub fn empty_database(&self) -> String {
        let base = postgres_url();
        let name = test_name();
        let (setup_base, setup_name) = (base.clone(), name.clone());
        crate::on_own_runtime(move || async move {
            let client = connect(&setup_base).await;
            drop_stale(&client, Stale::Databases).await;
            client
                .batch_execute(&format!("CREATE DATABASE {setup_name}"))
                .await
                .expect("create database");
        });
        self.url(&name)
    }

    /// The URL of the database behind `url` (one of [`url`](Self::url)'s),
    /// reached directly rather than through PgBouncer.
    ///
    /// # Panics
    ///
    /// When `TEST_DATABASE_URL` names no database.
    pub fn direct(&self, url: &str) -> String {
        let name = url.rsplit('/').next().unwrap_or_default();
        match postgres_url().rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("TEST_DATABASE_URL has no database name"),
        }
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        drop(self.lifeline.take());
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A `bin` directory under `root` holding `programs`.
    fn bin(root: &Path, dir: &str, programs: &[&str]) -> std::path::PathBuf {
        let bin = root.join(dir).join("bin");
        std::fs::create_dir_all(&bin).expect("bin dir");
        for program in programs {
            std::fs::write(bin.join(program), "").expect("program");
        }
        bin
    }

    #[test]
    fn the_newest_version_with_a_server_is_chosen() {
        let root = tempfile::tempdir().expect("temp dir");
        bin(root.path(), "9.6", &["initdb", "pg_ctl"]);
        let fifteen = bin(root.path(), "15", &["initdb", "pg_ctl", "postgres"]);
        // Client programs only (a newer libpq's package): no server.
        bin(root.path(), "17", &["pg_ctl", "psql"]);
        bin(root.path(), "not-a-version", &["initdb", "pg_ctl"]);
        let elsewhere = bin(root.path(), "brew", &["initdb", "pg_ctl"]);
        assert_eq!(
            server_bin_in(root.path(), Some(elsewhere)),
            Some(fifteen),
            "15 over 9.6 and over 17 without initdb, before pg_config's"
        );
    }

    #[test]
    fn without_a_debian_server_pg_config_bindir_is_used_if_it_has_one() {
        let root = tempfile::tempdir().expect("temp dir");
        let versions = root.path().join("usr-lib-postgresql");
        bin(&versions, "16", &["psql"]);
        let brew = bin(root.path(), "brew", &["initdb", "pg_ctl"]);
        assert_eq!(server_bin_in(&versions, Some(brew.clone())), Some(brew));
        let client_only = bin(root.path(), "client", &["psql", "pg_ctl"]);
        assert_eq!(server_bin_in(&versions, Some(client_only)), None);
        assert_eq!(server_bin_in(&root.path().join("absent"), None), None);
    }
}
