//! Real databases for tests (shared by the autumn-web tests through `#[path]`): a fresh PostgreSQL schema or a fresh
//! SQLite file per store, with the framework migrations applied, so tests run
//! in parallel without seeing each other's rows.

use std::sync::Arc;
use std::time::Duration;

use autumn_idempotency::FRAMEWORK_MIGRATIONS;
use autumn_idempotency::clock::ManualClock;
use autumn_idempotency::database::{DbIdempotencyStore, DbPool};

/// `on_databases!(a, b)`: tests `a` and `b` (each an `async fn(String)`
/// taking a database URL) run once on a fresh PostgreSQL schema and once
/// on a fresh SQLite file, as `postgres::a`, `sqlite::a`, ... For a test
/// file that includes this module as `database` with `#[macro_use]`.
#[allow(unused_macros)]
macro_rules! on_databases {
    ($($test:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(super::database::fresh_postgres_schema()).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(super::database::fresh_sqlite_file()).await;
                }
            )*
        }
    };
}

/// `TEST_DATABASE_URL`, or the loopback PostgreSQL of the project's machines.
pub fn postgres_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Runs `work` on a runtime of its own on another thread, so a synchronous
/// store factory can set a database up from inside an async test.
fn on_own_runtime<T: Send + 'static>(
    work: impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = T> + Send>> + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(work())
    })
    .join()
    .expect("setup thread")
}

/// A new schema with the framework tables; returns a URL whose connections
/// use it.
#[cfg(feature = "postgres")]
pub fn fresh_postgres_schema() -> String {
    let url = empty_postgres_schema();
    let setup_url = url.clone();
    on_own_runtime(move || {
        Box::pin(async move {
            let pool = DbPool::new(&setup_url, 1, Duration::from_secs(5)).expect("pool");
            FRAMEWORK_MIGRATIONS.run(&pool).await.expect("migrations");
        })
    });
    url
}

/// A new, empty schema; returns a URL whose connections use it.
#[cfg(feature = "postgres")]
pub fn empty_postgres_schema() -> String {
    use diesel_async::{AsyncConnection as _, SimpleAsyncConnection as _};
    let base = postgres_url();
    // The creation time in the name lets later runs drop schemas that
    // crashed runs left behind, without touching ones in use.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    let schema = format!("autumn_test_{now}_{}", uuid::Uuid::new_v4().simple());
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}options=-c%20search_path%3D{schema}");
    let setup_base = base.clone();
    on_own_runtime(move || {
        Box::pin(async move {
            let mut conn = diesel_async::AsyncPgConnection::establish(&setup_base)
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "PostgreSQL is not reachable at {setup_base} ({e}); start it with \
                         `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` \
                         or set TEST_DATABASE_URL"
                    )
                });
            drop_stale_schemas(&mut conn, now).await;
            conn.batch_execute(&format!("CREATE SCHEMA {schema}"))
                .await
                .expect("create schema");
        })
    });
    url
}

/// Drops test schemas created more than an hour before `now`.
#[cfg(feature = "postgres")]
async fn drop_stale_schemas(conn: &mut diesel_async::AsyncPgConnection, now: u64) {
    use diesel::sql_types::Text;
    use diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
    #[derive(diesel::QueryableByName)]
    struct Schema {
        #[diesel(sql_type = Text)]
        nspname: String,
    }
    let schemas: Vec<Schema> = diesel::sql_query(
        "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'autumn\\_test\\_%'",
    )
    .load(conn)
    .await
    .expect("list test schemas");
    for Schema { nspname } in schemas {
        let created = nspname
            .split('_')
            .nth(2)
            .and_then(|t| t.parse::<u64>().ok());
        // Unparsable names come from older runs: drop those too.
        if created.is_none_or(|created| created + 3600 < now) {
            let _ = conn
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {nspname} CASCADE"))
                .await;
        }
    }
}

/// A new SQLite file with the framework tables; the directory lives as long
/// as the process (tests are short).
#[cfg(feature = "sqlite")]
pub fn fresh_sqlite_file() -> String {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    let url = format!("sqlite://{}", dir.join("autumn.db").display());
    let setup_url = url.clone();
    on_own_runtime(move || {
        Box::pin(async move {
            let pool = DbPool::new(&setup_url, 1, Duration::from_secs(5)).expect("pool");
            FRAMEWORK_MIGRATIONS.run(&pool).await.expect("migrations");
            // Applying them twice is a no-op: startup runs them every time.
            FRAMEWORK_MIGRATIONS
                .run(&pool)
                .await
                .expect("migrations again");
        })
    });
    url
}

/// A store on `url` reading time from `clock`.
pub fn store(url: &str, clock: ManualClock) -> DbIdempotencyStore {
    let pool = DbPool::new(url, 8, Duration::from_secs(5)).expect("pool");
    DbIdempotencyStore::new(pool).with_clock(Arc::new(clock))
}

/// A PostgreSQL server of the test's own, on a free loopback port, for tests
/// that restart or kill it (never the shared one on 5432). It runs as the
/// `postgres` user (`initdb` refuses root) from a temporary directory, and is
/// stopped and removed on drop.
#[cfg(feature = "postgres")]
pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    port: u16,
}

#[cfg(feature = "postgres")]
impl PrivatePostgres {
    const BIN: &'static str = "/usr/lib/postgresql/15/bin";

    /// Creates a cluster and starts it (about a second).
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("autumn-pg-")
            .tempdir()
            .expect("temp dir");
        if running_as_root() {
            run(std::process::Command::new("chown")
                .arg("postgres:postgres")
                .arg(dir.path()));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let server = Self { dir, port };
        run(server
            .as_postgres("initdb")
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(server.data()));
        server.pg_ctl("start");
        server
    }

    /// The URL of the `postgres` database on this server.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
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
        let program = format!("{}/{program}", Self::BIN);
        assert!(
            std::path::Path::new(&program).exists(),
            "{program} is missing: install PostgreSQL 15 (apt-get install postgresql-15)"
        );
        if running_as_root() {
            let mut command = std::process::Command::new("runuser");
            command.args(["-u", "postgres", "--", &program]);
            command
        } else {
            std::process::Command::new(program)
        }
    }
}

#[cfg(feature = "postgres")]
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

#[cfg(feature = "postgres")]
fn running_as_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

#[cfg(feature = "postgres")]
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
#[cfg(feature = "postgres")]
pub struct RoundTrips {
    count: Arc<std::sync::atomic::AtomicUsize>,
    url: String,
}

#[cfg(feature = "postgres")]
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
                    let (mut from_server, to_server) = server.into_split();
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

/// Forwards the client's messages, counting `S` and `Q`; the startup
/// message has no type byte.
#[cfg(feature = "postgres")]
async fn relay_counting(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    count: &std::sync::atomic::AtomicUsize,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    loop {
        let length = from.read_u32().await?;
        let mut startup = vec![0; usize::try_from(length).unwrap_or(0).saturating_sub(4)];
        from.read_exact(&mut startup).await?;
        to.write_all(&length.to_be_bytes()).await?;
        to.write_all(&startup).await?;
        // An SSL or GSS encryption request (answered "no") comes first, and
        // the real startup message after it.
        if !matches!(startup.get(..4), Some([0x04, 0xd2, 0x16, 0x2f | 0x30])) {
            break;
        }
    }
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
#[cfg(feature = "postgres")]
pub struct PgBouncer {
    /// The shell PgBouncer runs under.
    child: std::process::Child,
    /// Closing it makes the shell stop PgBouncer and remove its directory.
    lifeline: Option<std::process::ChildStdin>,
    port: u16,
    /// Removed by the shell.
    _dir: std::path::PathBuf,
}

#[cfg(feature = "postgres")]
impl PgBouncer {
    /// Starts PgBouncer and waits until it accepts connections.
    pub fn start() -> Self {
        let upstream = postgres_url();
        let dir = tempfile::Builder::new()
            .prefix("autumn-pgbouncer-")
            .tempdir()
            .expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
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
        let start = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "pgbouncer did not listen on port {port} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        bouncer
    }

    /// The URL of database `name` through PgBouncer.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// A new database with the framework tables, made directly on the
    /// server; returns its URL through PgBouncer. A database, not a schema:
    /// PgBouncer 1.18 cannot pass the `search_path` option on, so a database
    /// of its own is how a test stays apart from the others.
    pub fn fresh_database(&self) -> String {
        self.new_database(true)
    }

    /// A new database without any table (the framework migrations not
    /// run); returns its URL through PgBouncer.
    #[allow(dead_code)] // Not every test binary sharing this module uses it.
    pub fn empty_database(&self) -> String {
        self.new_database(false)
    }

    /// The URL of the database behind `url` (one of [`url`](Self::url)'s),
    /// reached directly rather than through PgBouncer.
    #[allow(dead_code)] // Not every test binary sharing this module uses it.
    pub fn direct(&self, url: &str) -> String {
        let name = url.rsplit('/').next().unwrap_or_default();
        match postgres_url().rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("TEST_DATABASE_URL has no database name"),
        }
    }

    fn new_database(&self, migrate: bool) -> String {
        use diesel_async::{AsyncConnection as _, SimpleAsyncConnection as _};
        let base = postgres_url();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs();
        let name = format!("autumn_test_{now}_{}", uuid::Uuid::new_v4().simple());
        let direct = match base.rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("TEST_DATABASE_URL has no database name: {base}"),
        };
        let (setup_base, setup_name, setup_direct) = (base.clone(), name.clone(), direct.clone());
        on_own_runtime(move || {
            Box::pin(async move {
                let mut conn = diesel_async::AsyncPgConnection::establish(&setup_base)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("PostgreSQL is not reachable at {setup_base} ({e})")
                    });
                drop_stale_databases(&mut conn, now).await;
                conn.batch_execute(&format!("CREATE DATABASE {setup_name}"))
                    .await
                    .expect("create database");
                if migrate {
                    let pool = DbPool::new(&setup_direct, 1, Duration::from_secs(5)).expect("pool");
                    FRAMEWORK_MIGRATIONS.run(&pool).await.expect("migrations");
                }
            })
        });
        self.url(&name)
    }
}

#[cfg(feature = "postgres")]
impl Drop for PgBouncer {
    fn drop(&mut self) {
        drop(self.lifeline.take());
        let _ = self.child.wait();
    }
}

/// Drops test databases created more than an hour before `now` (crashed
/// runs leave theirs behind).
#[cfg(feature = "postgres")]
async fn drop_stale_databases(conn: &mut diesel_async::AsyncPgConnection, now: u64) {
    use diesel::sql_types::Text;
    use diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
    #[derive(diesel::QueryableByName)]
    struct Database {
        #[diesel(sql_type = Text)]
        datname: String,
    }
    let databases: Vec<Database> =
        diesel::sql_query("SELECT datname FROM pg_database WHERE datname LIKE 'autumn\\_test\\_%'")
            .load(conn)
            .await
            .expect("list test databases");
    for Database { datname } in databases {
        let created = datname
            .split('_')
            .nth(2)
            .and_then(|t| t.parse::<u64>().ok());
        if created.is_none_or(|created| created + 3600 < now) {
            let _ = conn
                .batch_execute(&format!("DROP DATABASE IF EXISTS {datname} WITH (FORCE)"))
                .await;
        }
    }
}
