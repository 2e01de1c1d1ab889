//! The services the tests need, on loopback: Redis and PostgreSQL reachable
//! and usable, installed with apt-get and started when they are missing; the
//! programs the tests start their own Redis Cluster and PgBouncer with
//! (`redis-cli`, `pgbouncer`), installed when missing; Valkey (8 or later:
//! `valkey-server` built with TLS, from Debian's package valkey-tools,
//! unpacked when missing), for the tests that start Valkey servers of their
//! own; and
//! the browser the saas example's end-to-end tests drive (Debian's Chromium
//! and ChromeDriver); and the API tools the OpenAPI tests run
//! (`openapi-spec-validator`, Schemathesis, `openapi-python-client` and
//! `h2`, from the Python registry, in a virtual environment of their own). Every step prints one line with how long it took; a
//! step that cannot be done fails naming the manual step.
//!
//! The same functions serve the loopback defaults and, in this module's
//! tests, a scratch Redis and a scratch PostgreSQL cluster on free ports, so
//! the start-and-configure path runs on every CI machine, even one where the
//! services already run.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::on_path;

/// How long a service that was just started gets to accept connections.
const START_WAIT: Duration = Duration::from_secs(30);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// The variable that points the tests at another Redis.
const REDIS_URL_VAR: &str = "TEST_REDIS_URL";
/// The variable that points the tests at another PostgreSQL.
const DATABASE_URL_VAR: &str = "TEST_DATABASE_URL";

/// What the tests use when no variable says otherwise.
const DEFAULT_REDIS_PORT: u16 = 6379;
const DEFAULT_PG_PORT: u16 = 5432;
/// The URL the tests use by default: trust auth on loopback, as the
/// project's machines are set up.
const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The role and database created for the tests when the default URL does
/// not work (a fresh install asks for a password on loopback).
const TEST_ROLE: &str = "autumn_test";

/// What the later steps need to find the services: variables to set for
/// the `cargo` runs (a generated `TEST_DATABASE_URL`, say).
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub(crate) env: Vec<(String, String)>,
}

/// Makes sure Redis and PostgreSQL answer and are usable, then that the
/// browser for the end-to-end tests is there.
pub(crate) fn ensure(root: &Path) -> Result<Found, String> {
    let started = Instant::now();
    println!("==> services");
    let mut found = Found::default();
    match std::env::var(REDIS_URL_VAR) {
        Ok(url) => check_given(REDIS_URL_VAR, &url, DEFAULT_REDIS_PORT)?,
        Err(_) => ensure_redis(&RedisTarget::default_loopback())?,
    }
    match std::env::var(DATABASE_URL_VAR) {
        Ok(url) => check_given(DATABASE_URL_VAR, &url, DEFAULT_PG_PORT)?,
        Err(_) => {
            let url = ensure_postgres(&PgTarget::default_loopback(root))?;
            if url != DEFAULT_DATABASE_URL {
                println!(
                    "    the tests use {} (kept in {})",
                    redact(&url),
                    PgTarget::default_loopback(root).url_file.display()
                );
                found.env.push((DATABASE_URL_VAR.to_owned(), url));
            }
        }
    }
    ensure_cluster_tools()?;
    ensure_valkey_for_tests()?;
    println!(
        "==> services ready in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    ensure_browser()?;
    ensure_api_tools()?;
    Ok(found)
}

/// The tests start a Redis Cluster of their own (six `redis-server`s joined
/// by `redis-cli --cluster create`) and a PgBouncer of their own in front of
/// PostgreSQL, and drive the server's HTTPS with curl: these programs must
/// be on PATH. Installs what is missing
/// (apt-get, as root); starts nothing.
fn ensure_cluster_tools() -> Result<(), String> {
    for (program, package) in [
        ("redis-cli", "redis-tools"),
        ("pgbouncer", "pgbouncer"),
        // The outside client of the HTTPS and HTTP/2 tests (built with nghttp2).
        ("curl", "curl"),
    ] {
        if on_path(program) || Path::new("/usr/sbin").join(program).exists() {
            println!("    {program} is installed");
            continue;
        }
        install(&[package], program).map_err(|why| {
            format!("{why}; install it (Debian/Ubuntu: apt-get install {package}) so that {program} is on PATH")
        })?;
    }
    Ok(())
}

// ---------------------------------------------------------------- Valkey

/// Debian's package that carries the Valkey server (as `valkey-check-rdb`,
/// which runs as the server when called by the name `valkey-server`),
/// built with TLS. Debian 12 has it in bookworm-backports, 13 in main.
const VALKEY_PACKAGE: &str = "valkey-tools";
/// The oldest Valkey the tests are written for.
const VALKEY_MIN_MAJOR: u32 = 8;
/// The apt source this step adds when no configured one offers Valkey.
const VALKEY_SOURCE_FILE: &str = "/etc/apt/sources.list.d/autumn-valkey.sources";

/// Where Valkey is unpacked, and the `valkey-server` link to it the tests
/// find on PATH.
pub(crate) struct ValkeyTarget {
    /// The directory the package is unpacked into.
    pub(crate) lib: PathBuf,
    /// The `valkey-server` link.
    pub(crate) link: PathBuf,
}

impl ValkeyTarget {
    fn system() -> Self {
        Self {
            lib: PathBuf::from("/usr/local/lib/autumn-valkey"),
            link: PathBuf::from("/usr/local/bin/valkey-server"),
        }
    }

    /// The server inside the unpacked package.
    fn binary(&self) -> PathBuf {
        self.lib.join("usr/bin/valkey-check-rdb")
    }
}

const VALKEY_HINT: &str = "install it by hand: on Debian 12 add bookworm-backports to apt's sources, \
     apt-get download valkey-tools, dpkg-deb -x valkey-tools_*.deb /usr/local/lib/autumn-valkey, \
     then ln -s /usr/local/lib/autumn-valkey/usr/bin/valkey-check-rdb /usr/local/bin/valkey-server \
     (or set VALKEY_SERVER to a valkey-server of version 8 or later built with TLS)";

/// The Valkey the tests run: `VALKEY_SERVER`, or `valkey-server` on PATH,
/// when either is 8 or later and speaks TLS; else installed at the system
/// place.
fn ensure_valkey_for_tests() -> Result<(), String> {
    let given = std::env::var_os("VALKEY_SERVER").map(PathBuf::from);
    for program in given.into_iter().chain([PathBuf::from("valkey-server")]) {
        if let Some(version) = usable_valkey(&program) {
            println!("    {} is installed (Valkey {version})", program.display());
            return Ok(());
        }
    }
    ensure_valkey(&ValkeyTarget::system())
}

/// A `valkey-server` of version 8 or later, built with TLS, is at
/// `target.link`, or is put there: Debian's package is downloaded (apt
/// needs a source that has it: one is added, as root, when none does),
/// unpacked into `target.lib`, and linked.
pub(crate) fn ensure_valkey(target: &ValkeyTarget) -> Result<(), String> {
    if let Some(version) = usable_valkey(&target.link) {
        println!(
            "    {} is installed (Valkey {version})",
            target.link.display()
        );
        return Ok(());
    }
    if !on_path("apt-get") || !on_path("dpkg-deb") {
        return Err(format!(
            "Valkey is missing and apt-get is not available to fetch it; {VALKEY_HINT}"
        ));
    }
    ensure_valkey_source()?;
    let download = target.lib.join("download");
    // A package from an earlier, failed or older, attempt is not reused.
    let _ = fs::remove_dir_all(&download);
    fs::create_dir_all(&download)
        .map_err(|e| format!("cannot create {}: {e}", download.display()))?;
    step(&format!("apt-get download {VALKEY_PACKAGE}"), || {
        let mut command = Command::new("apt-get");
        command
            .args(["download", VALKEY_PACKAGE])
            .current_dir(&download);
        output_of(command, "apt-get download").map(drop)
    })
    .map_err(|why| format!("{why}; {VALKEY_HINT}"))?;
    let package = fs::read_dir(&download)
        .map_err(|e| format!("cannot read {}: {e}", download.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "deb"))
        .ok_or_else(|| format!("apt-get download left no .deb in {}", download.display()))?;
    let lib = target.lib.display().to_string();
    step(&format!("dpkg-deb -x {} {lib}", package.display()), || {
        run("dpkg-deb", &["-x", &package.display().to_string(), &lib])
    })
    .map_err(|why| format!("{why}; {VALKEY_HINT}"))?;
    let _ = fs::remove_dir_all(&download);
    let binary = target.binary();
    if let Some(dir) = target.link.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    // A stale link (an older install, or a build without TLS) is replaced.
    let _ = fs::remove_file(&target.link);
    std::os::unix::fs::symlink(&binary, &target.link).map_err(|e| {
        format!(
            "cannot link {} to {}: {e}; {VALKEY_HINT}",
            target.link.display(),
            binary.display()
        )
    })?;
    // Called through the link: the server runs as a server only by that name.
    let version = valkey_version(&target.link).ok_or_else(|| {
        format!(
            "{VALKEY_PACKAGE} unpacked, but {} does not run (are its libraries, libjemalloc2 \
             and liblzf1, installed?); {VALKEY_HINT}",
            target.link.display()
        )
    })?;
    if valkey_major(&version) < VALKEY_MIN_MAJOR || !speaks_tls(&binary) {
        return Err(format!(
            "{VALKEY_PACKAGE} brought Valkey {version}; the tests need {VALKEY_MIN_MAJOR} or later, built with TLS"
        ));
    }
    println!(
        "    installed Valkey {version} ({} -> {})",
        target.link.display(),
        binary.display()
    );
    Ok(())
}

/// Makes sure apt can download Valkey: when no configured source offers
/// it (Debian 12's main archive does not), adds the release's backports
/// and refreshes that source alone. Needs root only then.
fn ensure_valkey_source() -> Result<(), String> {
    if apt_candidate(VALKEY_PACKAGE).is_some() {
        return Ok(());
    }
    let codename = fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("VERSION_CODENAME="))
                .map(|name| name.trim_matches('"').to_owned())
        })
        .filter(|name| !name.is_empty())
        .ok_or_else(|| format!("cannot tell this system's release; {VALKEY_HINT}"))?;
    if !is_root() {
        return Err(format!(
            "no apt source offers {VALKEY_PACKAGE}, and adding {codename}-backports needs root; {VALKEY_HINT}"
        ));
    }
    let source = format!(
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {codename}-backports\n\
         Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    );
    fs::write(VALKEY_SOURCE_FILE, source)
        .map_err(|e| format!("cannot write {VALKEY_SOURCE_FILE}: {e}; {VALKEY_HINT}"))?;
    step(&format!("apt-get update ({codename}-backports)"), || {
        apt_get(&[
            "update",
            "-o",
            &format!("Dir::Etc::sourcelist={VALKEY_SOURCE_FILE}"),
            "-o",
            "Dir::Etc::sourceparts=-",
            "-o",
            "APT::Get::List-Cleanup=0",
        ])
    })
    .map_err(|why| format!("{why}; {VALKEY_HINT}"))?;
    apt_candidate(VALKEY_PACKAGE)
        .map(drop)
        .ok_or_else(|| format!("{codename}-backports has no {VALKEY_PACKAGE}; {VALKEY_HINT}"))
}

/// The version apt would install of `package`, if any source offers it.
fn apt_candidate(package: &str) -> Option<String> {
    let mut command = Command::new("apt-cache");
    command.args(["policy", package]);
    let text = output_of(command, "apt-cache policy").ok()?;
    text.lines()
        .find_map(|line| line.trim().strip_prefix("Candidate:"))
        .map(str::trim)
        .filter(|version| !version.is_empty() && *version != "(none)")
        .map(str::to_owned)
}

/// The version of the Valkey at `program` when the tests can use it: 8 or
/// later, built with TLS.
fn usable_valkey(program: &Path) -> Option<String> {
    let version = valkey_version(program)?;
    let file = if program.components().count() > 1 {
        program.to_owned()
    } else {
        find_on_path(program)?
    };
    (valkey_major(&version) >= VALKEY_MIN_MAJOR && speaks_tls(&file)).then_some(version)
}

/// `program` as PATH resolves it.
fn find_on_path(program: &Path) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Whether the server file at `path` was built with TLS: it links OpenSSL,
/// so `SSL_CTX_new` is named in it (a build without TLS names it nowhere).
fn speaks_tls(path: &Path) -> bool {
    fs::read(path).is_ok_and(|bytes| bytes.windows(11).any(|window| window == b"SSL_CTX_new"))
}

/// What `program --version` says of its Valkey version (`9.1.2`); `None`
/// when it does not run or is not Valkey.
fn valkey_version(program: &Path) -> Option<String> {
    let output = Command::new(program).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !text.starts_with("Valkey") {
        return None;
    }
    text.split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .map(str::to_owned)
}

fn valkey_major(version: &str) -> u32 {
    version
        .split('.')
        .next()
        .and_then(|major| major.parse().ok())
        .unwrap_or(0)
}

/// A service the developer pointed the tests at: it must answer; Autumn
/// neither installs nor starts it.
fn check_given(var: &str, url: &str, default_port: u16) -> Result<(), String> {
    let Some(addr) = socket_addr_of(url, default_port) else {
        return Err(format!(
            "{var}={} names no host:port this check can reach; fix the variable",
            redact(url)
        ));
    };
    if reachable(&addr) {
        println!("    {var} answers on {addr}");
        Ok(())
    } else {
        Err(format!(
            "{var}={} does not answer on {addr}; start that service, or unset {var} to use (and set up) the local one",
            redact(url)
        ))
    }
}

// ---------------------------------------------------------------- Redis

/// A Redis the tests use: where it listens, and where a started one keeps
/// its pid file and log.
pub(crate) struct RedisTarget {
    pub(crate) port: u16,
    /// `None`: the machine's usual places (as the services are started on
    /// the project's machines).
    pub(crate) dir: Option<PathBuf>,
}

impl RedisTarget {
    fn default_loopback() -> Self {
        Self {
            port: DEFAULT_REDIS_PORT,
            dir: None,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

const REDIS_HINT: &str = "install Redis 7 (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) \
     and start it on 127.0.0.1:6379 (redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\" --appendonly no), \
     or point TEST_REDIS_URL at one";

/// Redis answers on `target`, or is installed (apt-get, as root) and
/// started there.
pub(crate) fn ensure_redis(target: &RedisTarget) -> Result<(), String> {
    if reachable(&target.addr()) {
        println!("    Redis is up on {}", target.addr());
        return Ok(());
    }
    println!("    Redis is not reachable on {}", target.addr());
    if !on_path("redis-server") {
        install(&["redis-server"], "redis-server").map_err(|why| format!("{why}; {REDIS_HINT}"))?;
    }
    step("start redis-server", || start_redis(target))
        .map_err(|why| format!("{why}; {REDIS_HINT}"))?;
    step("wait for Redis", || wait_for(&target.addr()))
        .map_err(|why| format!("{why}; {REDIS_HINT}"))?;
    println!("    Redis is up on {}", target.addr());
    Ok(())
}

fn start_redis(target: &RedisTarget) -> Result<(), String> {
    let port = target.port.to_string();
    let mut args = vec![
        "--daemonize",
        "yes",
        "--bind",
        "127.0.0.1",
        "--port",
        &port,
        // The tests need nothing kept on disk.
        "--save",
        "",
        "--appendonly",
        "no",
    ];
    let dir;
    let pidfile;
    let logfile;
    if let Some(path) = &target.dir {
        fs::create_dir_all(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        dir = path.display().to_string();
        pidfile = path.join("redis.pid").display().to_string();
        logfile = path.join("redis.log").display().to_string();
        args.extend(["--dir", &dir, "--pidfile", &pidfile, "--logfile", &logfile]);
    }
    run("redis-server", &args)
}

// ---------------------------------------------------------------- PostgreSQL

/// A PostgreSQL the tests use.
pub(crate) struct PgTarget {
    pub(crate) port: u16,
    pub(crate) cluster: PgCluster,
    /// Where a URL made for the tests (with a generated password) is kept,
    /// so later runs reuse it.
    pub(crate) url_file: PathBuf,
}

/// A cluster of Debian's `postgresql-common`, started with `pg_ctlcluster`
/// and created with `pg_createcluster` when there is none.
pub(crate) struct PgCluster {
    /// The major version; `None`: the newest installed.
    pub(crate) version: Option<String>,
    /// `main` for the machine's own; the tests name a scratch one.
    pub(crate) name: String,
}

impl PgTarget {
    fn default_loopback(root: &Path) -> Self {
        Self {
            port: DEFAULT_PG_PORT,
            cluster: PgCluster {
                version: None,
                name: "main".to_owned(),
            },
            url_file: root
                .join("target")
                .join("test-services")
                .join("postgres-url"),
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn default_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/test", self.port)
    }
}

const POSTGRES_HINT: &str = "install PostgreSQL 15 or newer (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql@15), \
     start it on 127.0.0.1:5432, and either allow user postgres in database `test` on loopback \
     or point TEST_DATABASE_URL at a database the tests may create schemas in \
     (e.g. TEST_DATABASE_URL=postgres://me:secret@127.0.0.1:5432/autumn_test)";

/// PostgreSQL answers on `target` and the tests can log in: returns the
/// URL they should use. Installs (apt-get, as root), creates and starts a
/// cluster when there is none; when the default URL is refused, creates a
/// role and a database for the tests with a generated password. It never
/// edits an existing `pg_hba.conf` or any other setting of the cluster.
pub(crate) fn ensure_postgres(target: &PgTarget) -> Result<String, String> {
    let hint = |why: String| format!("{why}; {POSTGRES_HINT}");
    if reachable(&target.addr()) {
        println!("    PostgreSQL is up on {}", target.addr());
    } else {
        println!("    PostgreSQL is not reachable on {}", target.addr());
        if pg_versions().is_empty() {
            install(&["postgresql"], "postgresql").map_err(hint)?;
        }
        step("start PostgreSQL", || start_postgres(target)).map_err(hint)?;
        step("wait for PostgreSQL", || wait_for(&target.addr())).map_err(hint)?;
        println!("    PostgreSQL is up on {}", target.addr());
    }
    if !on_path("psql") {
        return Err(hint(
            "psql is not installed, so the tests' login cannot be checked".to_owned(),
        ));
    }
    let default = target.default_url();
    if can_log_in(&default) {
        println!("    the tests can log in as {default}");
        return Ok(default);
    }
    if let Ok(kept) = fs::read_to_string(&target.url_file) {
        let kept = kept.trim().to_owned();
        if can_log_in(&kept) {
            println!("    the tests can log in as {}", redact(&kept));
            return Ok(kept);
        }
    }
    println!("    {default} is refused; creating a role and a database for the tests");
    let url = step("create the tests' role and database", || {
        create_test_role(target)
    })
    .map_err(hint)?;
    if !can_log_in(&url) {
        return Err(hint(format!(
            "created role {TEST_ROLE}, but {} is refused: the cluster's pg_hba.conf allows no password login on 127.0.0.1 \
             (add `host all {TEST_ROLE} 127.0.0.1/32 scram-sha-256` yourself; this check never edits it)",
            redact(&url)
        )));
    }
    if let Some(dir) = target.url_file.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    fs::write(&target.url_file, format!("{url}\n"))
        .map_err(|e| format!("cannot write {}: {e}", target.url_file.display()))?;
    Ok(url)
}

/// Installed major versions, newest first.
fn pg_versions() -> Vec<String> {
    let mut versions: Vec<String> = fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|entry| entry.path().join("bin").join("postgres").is_file())
                .filter_map(|entry| entry.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    versions.sort_by_key(|v| std::cmp::Reverse(v.parse::<u32>().unwrap_or(0)));
    versions
}

fn start_postgres(target: &PgTarget) -> Result<(), String> {
    if !on_path("pg_ctlcluster") {
        return Err("pg_ctlcluster (Debian's postgresql-common) is not installed".into());
    }
    let name = &target.cluster.name;
    let version = match &target.cluster.version {
        Some(version) => version.clone(),
        None => pg_versions()
            .into_iter()
            .next()
            .ok_or("no PostgreSQL server is installed under /usr/lib/postgresql")?,
    };
    let config = Path::new("/etc/postgresql").join(&version).join(name);
    if !config.is_dir() {
        let port = target.port.to_string();
        println!("    no cluster {version}/{name}: pg_createcluster {version} {name} -p {port}");
        run("pg_createcluster", &[&version, name, "-p", &port])?;
    }
    run(
        "pg_ctlcluster",
        &["--skip-systemctl-redirect", &version, name, "start"],
    )
}

/// Whether `psql` can log in with `url` and run a query.
fn can_log_in(url: &str) -> bool {
    Command::new("psql")
        .args([url, "-Atqc", "SELECT 1"])
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "1")
}

/// Creates (or gives a new password to) the tests' role, and its database,
/// as the cluster's superuser over the local socket; returns the URL.
fn create_test_role(target: &PgTarget) -> Result<String, String> {
    let password = random_hex(16)?;
    // The password is hex, so it needs no quoting in SQL or in the URL.
    let role = format!(
        "DO $$ BEGIN \
           IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{TEST_ROLE}') THEN \
             ALTER ROLE {TEST_ROLE} LOGIN CREATEDB PASSWORD '{password}'; \
           ELSE \
             CREATE ROLE {TEST_ROLE} LOGIN CREATEDB PASSWORD '{password}'; \
           END IF; \
         END $$;"
    );
    as_superuser(target.port, &role)?;
    let exists = as_superuser(
        target.port,
        &format!("SELECT 1 FROM pg_database WHERE datname = '{TEST_ROLE}'"),
    )?;
    if exists.trim() != "1" {
        as_superuser(
            target.port,
            &format!("CREATE DATABASE {TEST_ROLE} OWNER {TEST_ROLE}"),
        )?;
    }
    Ok(format!(
        "postgres://{TEST_ROLE}:{password}@127.0.0.1:{}/{TEST_ROLE}",
        target.port
    ))
}

/// Runs `sql` as the `postgres` superuser over the local socket (peer
/// authentication, Debian's default), which needs root.
fn as_superuser(port: u16, sql: &str) -> Result<String, String> {
    if !is_root() {
        return Err(format!(
            "setting up the tests' role needs the postgres superuser; as root this check runs \
             `runuser -u postgres -- psql -p {port}`, and this is not root"
        ));
    }
    let mut command = Command::new("runuser");
    command
        .args(["-u", "postgres", "--", "psql", "-p", &port.to_string()])
        .args(["-d", "postgres", "-v", "ON_ERROR_STOP=1", "-Atqc", sql]);
    output_of(command, "psql as postgres")
}

fn random_hex(bytes: usize) -> Result<String, String> {
    use std::io::Read as _;
    let mut buffer = vec![0u8; bytes];
    fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut buffer))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(buffer.iter().map(|b| format!("{b:02x}")).collect())
}

/// `url` with its password masked.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// `host:port` of a `redis://` or `postgres://` URL.
fn socket_addr_of(url: &str, default_port: u16) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.is_empty() {
        return None;
    }
    // A bracketed IPv6 literal keeps its colons.
    let has_port = match host_port.rfind(']') {
        Some(close) => host_port[close..].contains(':'),
        None => host_port.contains(':'),
    };
    Some(if has_port {
        host_port.to_owned()
    } else {
        format!("{host_port}:{default_port}")
    })
}

// ---------------------------------------------------------------- shared

fn reachable(addr: &str) -> bool {
    use std::net::ToSocketAddrs as _;
    addr.to_socket_addrs().is_ok_and(|mut addrs| {
        addrs.any(|addr: SocketAddr| TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).is_ok())
    })
}

fn wait_for(addr: &str) -> Result<(), String> {
    let deadline = Instant::now() + START_WAIT;
    loop {
        if reachable(addr) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "started, but nothing answers on {addr} after {}s",
                START_WAIT.as_secs()
            ));
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Runs one step, printing its name and how long it took.
fn step<T>(name: &str, work: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let started = Instant::now();
    let outcome = work();
    let secs = started.elapsed().as_secs_f64();
    match &outcome {
        Ok(_) => println!("    {name}: done in {secs:.1}s"),
        Err(why) => println!("    {name}: failed after {secs:.1}s: {}", last_line(why)),
    }
    outcome
}

/// Runs `program args`, returning its output as the error when it fails.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let mut command = Command::new(program);
    command.args(args);
    output_of(command, program).map(drop)
}

/// Runs `command`: its standard output when it succeeds, else an error that
/// names it as `what` and quotes what it said (stderr, else stdout).
fn output_of(mut command: Command, what: &str) -> Result<String, String> {
    let output = command
        .output()
        .map_err(|e| format!("could not run {what}: {e}"))?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let mut text = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if text.is_empty() {
        text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    }
    Err(format!("{what} exited with {}: {text}", output.status))
}

// ---------------------------------------------------------------- installs

/// Installs Debian `packages` with apt-get, as root; `what` names them in
/// messages. Refreshes the package lists first when they are empty, and
/// once more when the install fails on stale ones.
pub(crate) fn install(packages: &[&str], what: &str) -> Result<(), String> {
    if !on_path("apt-get") {
        return Err(format!(
            "{what} is missing and apt-get is not available on this machine to install it"
        ));
    }
    if !is_root() {
        return Err(format!(
            "{what} is missing and installing it needs root (apt-get install -y {})",
            packages.join(" ")
        ));
    }
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend(packages);
    if !apt_lists_present() {
        step("apt-get update (the package lists are empty)", || {
            apt_get(&["update"])
        })?;
        return step(&format!("apt-get {}", args.join(" ")), || apt_get(&args));
    }
    match step(&format!("apt-get {}", args.join(" ")), || apt_get(&args)) {
        Ok(()) => Ok(()),
        // Usually stale package lists (a version gone from the mirror).
        Err(_) => {
            step("apt-get update", || apt_get(&["update"]))?;
            step(&format!("apt-get {}", args.join(" ")), || apt_get(&args))
        }
    }
}

fn apt_get(args: &[&str]) -> Result<(), String> {
    let mut command = Command::new("apt-get");
    command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
    output_of(command, &format!("apt-get {}", args.join(" "))).map(drop)
}

fn last_line(text: &str) -> &str {
    text.lines().last().unwrap_or(text)
}

/// Whether apt has package lists to install from (none right after a
/// minimal image is built, which clears them).
fn apt_lists_present() -> bool {
    fs::read_dir("/var/lib/apt/lists").is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|entry| entry.file_name().to_string_lossy().contains("_Packages"))
    })
}

/// Whether this process runs as root (effective uid 0), read from
/// /proc/self/status, else from `id -u`.
fn is_root() -> bool {
    if let Ok(status) = fs::read_to_string("/proc/self/status")
        && let Some(uids) = status.lines().find_map(|line| line.strip_prefix("Uid:"))
    {
        // Real, effective, saved, filesystem: the effective one counts.
        return uids.split_whitespace().nth(1) == Some("0");
    }
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

// ---------------------------------------------------------------- browser

/// The files the browser tests (examples/saas/tests/it/browser.rs) run.
const BROWSER_FILES: [&str; 2] = ["/usr/bin/chromium", "/usr/bin/chromedriver"];
/// The Debian packages that hold them.
const BROWSER_PACKAGES: [&str; 2] = ["chromium", "chromium-driver"];
const BROWSER_HINT: &str =
    "install them as root: apt-get update && apt-get install -y chromium chromium-driver";

/// Makes sure Chromium and ChromeDriver are installed, installing them with
/// apt-get (as root) when they are not.
fn ensure_browser() -> Result<(), String> {
    let started = Instant::now();
    println!("==> browser (Chromium and ChromeDriver for the end-to-end tests)");
    let missing = missing_browser_files();
    if missing.is_empty() {
        println!("    {} is installed", browser_version());
        println!(
            "==> browser checked in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    println!("    missing: {}", missing.join(", "));
    install(&BROWSER_PACKAGES, "Chromium/ChromeDriver").map_err(|why| {
        format!(
            "Chromium/ChromeDriver missing ({}): {why}; {BROWSER_HINT}",
            missing.join(", ")
        )
    })?;
    let still_missing = missing_browser_files();
    if !still_missing.is_empty() {
        return Err(format!(
            "apt-get installed {} but {} is still missing; {BROWSER_HINT}",
            BROWSER_PACKAGES.join(" "),
            still_missing.join(", ")
        ));
    }
    println!("    installed {}", browser_version());
    println!(
        "==> browser installed in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn missing_browser_files() -> Vec<&'static str> {
    BROWSER_FILES
        .into_iter()
        .filter(|file| !Path::new(file).is_file())
        .collect()
}

/// What the installed ChromeDriver says of its version (it matches
/// Chromium's: both come from the same Debian source package).
fn browser_version() -> String {
    Command::new("/usr/bin/chromedriver")
        .arg("--version")
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|version| !version.is_empty())
        .unwrap_or_else(|| "ChromeDriver".to_owned())
}

// ---------------------------------------------------------------- API tools

/// Where the API tools live: a Python virtual environment of their own,
/// so nothing of the system's Python changes. The tests look here unless
/// `AUTUMN_API_TOOLS` names another directory holding their `bin/`.
const API_TOOLS_DIR: &str = "/usr/local/lib/autumn-api-tools";
/// The tools, pinned: a new release of one must not turn CI red or green
/// by itself. The validator and Schemathesis check the documents; the
/// client generator makes the client the orders example's test drives;
/// `h2` is the HTTP/2 implementation the server's stream-level abuse
/// tests speak through; `aiosmtpd` is the SMTP server the mailer's tests
/// send to.
const API_TOOLS: [&str; 5] = [
    "openapi-spec-validator==0.9.0",
    "schemathesis==4.32.5",
    "openapi-python-client==0.29.1",
    "h2==4.4.1",
    "aiosmtpd==1.4.6",
];
/// The programs the tests run from the environment's `bin/`.
const API_TOOL_PROGRAMS: [&str; 4] = [
    "openapi-spec-validator",
    "schemathesis",
    "openapi-python-client",
    "python",
];

/// Makes sure the OpenAPI validator and Schemathesis are installed, in
/// their virtual environment, at the pinned versions.
fn ensure_api_tools() -> Result<(), String> {
    let started = Instant::now();
    println!(
        "==> API tools (openapi-spec-validator, Schemathesis, openapi-python-client, h2 and aiosmtpd for the OpenAPI, HTTP/2 and mail tests)"
    );
    let dir = Path::new(API_TOOLS_DIR);
    let stamp = dir.join("autumn-pins.txt");
    let wanted = API_TOOLS.join("\n");
    let installed = fs::read_to_string(&stamp).is_ok_and(|pins| pins == wanted)
        && API_TOOL_PROGRAMS
            .iter()
            .all(|tool| dir.join("bin").join(tool).is_file());
    if installed {
        println!("    {} is installed", API_TOOLS.join(", "));
    } else {
        let python = ["python3", "python"]
            .into_iter()
            .find(|python| on_path(python))
            .ok_or("Python 3 is not on PATH: install python3 and python3-venv")?;
        step(&format!("{python} -m venv {API_TOOLS_DIR}"), || {
            run(python, &["-m", "venv", API_TOOLS_DIR])
        })?;
        let pip = dir.join("bin").join("pip");
        let pip = pip
            .to_str()
            .ok_or("the virtual environment's path is not UTF-8")?;
        let mut args = vec!["install", "--quiet", "--disable-pip-version-check"];
        args.extend(API_TOOLS);
        step(&format!("pip install {}", API_TOOLS.join(" ")), || {
            run(pip, &args)
        })?;
        fs::write(&stamp, &wanted).map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    }
    println!(
        "==> API tools ready in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests;
