//! The service step against scratch services on free ports: a Redis it must
//! start, and a PostgreSQL cluster it must create, start and give the tests a
//! login on, without weakening the cluster's authentication.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;

use super::*;

fn free_port() -> u16 {
    crate::http::free_port().expect("a free loopback port")
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("autumn-xtask-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// Sends one inline command to the Redis on `port`, returns its first reply line.
fn redis_command(port: u16, command: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(format!("{command}\r\n").as_bytes())?;
    let mut reply = [0u8; 64];
    let read = stream.read(&mut reply)?;
    Ok(String::from_utf8_lossy(&reply[..read]).trim().to_owned())
}

/// Stops the scratch Redis however the test ends.
struct StopRedis(u16);

impl Drop for StopRedis {
    fn drop(&mut self) {
        let _ = redis_command(self.0, "SHUTDOWN NOSAVE");
    }
}

#[test]
fn starts_a_scratch_redis_on_a_free_port() {
    let port = free_port();
    let dir = scratch_dir("redis");
    let target = RedisTarget {
        port,
        dir: Some(dir.clone()),
    };
    assert!(!reachable(&target.addr()), "port {port} should be free");

    ensure_redis(&target).unwrap_or_else(|why| panic!("the Redis step failed: {why}"));
    let _stop = StopRedis(port);

    assert_eq!(redis_command(port, "PING").expect("PING"), "+PONG");
    assert!(
        dir.join("redis.pid").is_file(),
        "pid file in the scratch dir"
    );
    // Running the step again finds it up and leaves it alone.
    ensure_redis(&target).expect("second run");
    assert_eq!(redis_command(port, "PING").expect("PING"), "+PONG");
}

/// Drops the scratch cluster however the test ends.
struct DropCluster {
    version: String,
    name: String,
}

impl Drop for DropCluster {
    fn drop(&mut self) {
        let _ = Command::new("pg_dropcluster")
            .args(["--stop", &self.version, &self.name])
            .output();
    }
}

#[test]
fn creates_starts_and_opens_a_scratch_postgres_cluster() {
    let Some(version) = pg_versions().into_iter().next() else {
        panic!("no PostgreSQL server under /usr/lib/postgresql; {POSTGRES_HINT}");
    };
    let port = free_port();
    let name = format!("autumn_scratch_{port}");
    let dir = scratch_dir("postgres");
    let target = PgTarget {
        port,
        cluster: PgCluster {
            version: Some(version.clone()),
            name: name.clone(),
        },
        url_file: dir.join("postgres-url"),
    };
    let _drop = DropCluster {
        version: version.clone(),
        name: name.clone(),
    };
    let outcome = ensure_postgres(&target);

    if !is_root() {
        // Without root nothing can be created: the step says what to do by hand.
        let why = outcome.expect_err("creating a cluster needs root");
        assert!(why.contains("TEST_DATABASE_URL"), "{why}");
        return;
    }
    let url = outcome.unwrap_or_else(|why| panic!("the PostgreSQL step failed: {why}"));

    // A fresh Debian cluster asks for a password on loopback, so the
    // default login is refused and the step made a role of its own.
    assert_ne!(url, target.default_url());
    assert!(url.contains(TEST_ROLE), "{}", redact(&url));
    assert!(can_log_in(&url), "the tests' URL logs in");
    assert!(
        !can_log_in(&target.default_url()),
        "the cluster's own authentication is unchanged: postgres still needs a password on loopback"
    );
    let hba = Path::new("/etc/postgresql")
        .join(&version)
        .join(&name)
        .join("pg_hba.conf");
    let hba = fs::read_to_string(&hba).expect("pg_hba.conf");
    assert!(
        !hba.lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .any(|line| line.split_whitespace().any(|word| word == "trust")),
        "no trust entry was added:\n{hba}"
    );
    // The tests make a schema per test: the role may.
    let created = Command::new("psql")
        .args([url.as_str(), "-v", "ON_ERROR_STOP=1", "-Atqc"])
        .arg("CREATE SCHEMA autumn_scratch_check; SELECT 1")
        .output()
        .expect("psql");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );

    // Stopped again, the step starts it and reuses the kept login.
    run(
        "pg_ctlcluster",
        &["--skip-systemctl-redirect", &version, &name, "stop"],
    )
    .expect("stop the scratch cluster");
    assert!(!reachable(&target.addr()));
    let again = ensure_postgres(&target).expect("second run");
    assert_eq!(again, url, "the kept login is reused");
}

#[test]
fn finds_the_address_in_a_service_url() {
    assert_eq!(
        socket_addr_of("redis://127.0.0.1:6380/0", 6379).as_deref(),
        Some("127.0.0.1:6380")
    );
    assert_eq!(
        socket_addr_of("postgres://me:secret@db.local/test?sslmode=disable", 5432).as_deref(),
        Some("db.local:5432")
    );
    assert_eq!(
        socket_addr_of("redis://[::1]:7000", 6379).as_deref(),
        Some("[::1]:7000")
    );
    assert_eq!(socket_addr_of("not a url", 1), None);
}

#[test]
fn masks_passwords_in_urls() {
    assert_eq!(
        redact("postgres://autumn_test:abc123@127.0.0.1:5432/autumn_test"),
        "postgres://autumn_test:***@127.0.0.1:5432/autumn_test"
    );
    assert_eq!(
        redact("postgres://postgres@127.0.0.1/test"),
        "postgres://postgres@127.0.0.1/test"
    );
}

#[test]
fn installs_valkey_into_a_scratch_directory_and_finds_it_the_second_time() {
    let dir = scratch_dir("valkey");
    let target = ValkeyTarget {
        lib: dir.join("lib"),
        link: dir.join("bin").join("valkey-server"),
    };
    ensure_valkey(&target).unwrap_or_else(|why| panic!("the Valkey step failed: {why}"));
    let version = valkey_version(&target.link).expect("the linked valkey-server runs");
    assert!(valkey_major(&version) >= 8, "Valkey {version}");
    assert!(
        speaks_tls(&target.binary()),
        "Valkey {version} is built with TLS"
    );
    // Running the step again finds it and installs nothing.
    let before = fs::metadata(&target.link).and_then(|m| m.modified()).ok();
    ensure_valkey(&target).expect("second run");
    assert_eq!(
        fs::metadata(&target.link).and_then(|m| m.modified()).ok(),
        before
    );
    let _ = fs::remove_dir_all(&dir);
}
