//! `cargo xtask bench sizing`: the figures of the sizing guide
//! (docs/cloud-native.md). The `autumn-orders` server of the end-to-end
//! bench, release build, pinned to one core, wrk pinned to the other, once
//! per store: memory, Redis, a Redis Cluster of six nodes started here,
//! PostgreSQL directly and through a PgBouncer started here in transaction
//! mode (`statement_cache = false`). For each store, first-time requests
//! (a new key each) and replays (one key), in interleaved rounds; per row
//! the median requests per second, the same divided by the server's CPU
//! (requests per second per app core), and the share of a core the store's
//! own processes used.
//!
//! A store whose service cannot be had (no Redis on 6379, no
//! `redis-server`, no PostgreSQL, no `pgbouncer`) is skipped with a line
//! saying why.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::e2e::{self, Settings};
use super::server::{Server, cpu_of};
use super::wrk::{self, Keys, Load};

/// The PostgreSQL the database rows use, unless `TEST_DATABASE_URL` says
/// otherwise (its database is only used to create the bench's own).
const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// How long the cluster or PgBouncer may take to come up.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Which processes are the store's, for its CPU share.
enum StoreProcesses {
    None,
    Pids(Vec<u32>),
    /// Every process named `postgres` (the server's backends come and go
    /// with connections), plus these.
    Postgres(Vec<u32>),
}

impl StoreProcesses {
    /// CPU time per process now.
    fn snapshot(&self) -> HashMap<u32, Duration> {
        let (mut pids, postgres) = match self {
            Self::None => return HashMap::new(),
            Self::Pids(pids) => (pids.clone(), false),
            Self::Postgres(pids) => (pids.clone(), true),
        };
        if postgres {
            pids.extend(processes_named("postgres"));
        }
        pids.into_iter()
            .filter_map(|pid| cpu_of(pid).ok().map(|cpu| (pid, cpu)))
            .collect()
    }
}

/// CPU used between two snapshots, counting processes that started
/// meanwhile from zero.
fn used(before: &HashMap<u32, Duration>, after: &HashMap<u32, Duration>) -> Duration {
    after
        .iter()
        .map(|(pid, cpu)| cpu.saturating_sub(before.get(pid).copied().unwrap_or_default()))
        .sum()
}

/// The pids of processes whose command name is `name`.
fn processes_named(name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
        .collect()
}

/// One store under test: its server and its processes.
struct Store {
    name: &'static str,
    server: Server,
    processes: StoreProcesses,
    fixed_key: String,
}

/// One row's measurement in one round.
#[derive(Debug, Clone, Copy)]
struct Sample {
    per_second: f64,
    /// Requests per second of server CPU.
    per_core: f64,
    /// The store's processes' CPU, as a share of one core.
    store_share: Option<f64>,
}

pub(crate) fn run(root: &Path, settings: &Settings) -> Result<(), String> {
    super::require_tools(false)?;
    let bin = e2e::build(root)?.join("autumn-orders");
    let (server_core, load_core) = super::pinned_cores();
    let run_id = super::run_id("s");
    let env = |backend: &str, extra: &[(&'static str, String)]| {
        let mut env = super::autumn_env(&run_id, backend, settings);
        env.extend_from_slice(extra);
        env
    };

    let mut stores = Vec::new();
    let start = |name, env: &[(&str, String)], processes| -> Result<Store, String> {
        Ok(Store {
            name,
            server: Server::start(name, &bin, env, server_core)?,
            processes,
            fixed_key: format!("{run_id}-{}", name.replace(' ', "-")),
        })
    };
    stores.push(start("memory", &env("memory", &[]), StoreProcesses::None)?);

    match e2e::redis_pid() {
        Some(pid) => stores.push(start(
            "Redis",
            &env(
                "redis",
                &[("AUTUMN_IDEMPOTENCY__REDIS__URL", e2e::REDIS_URL.to_owned())],
            ),
            StoreProcesses::Pids(vec![pid]),
        )?),
        None => println!("    Redis: skipped, nothing answers at {}", e2e::REDIS_URL),
    }

    let cluster = match Cluster::start(&run_id) {
        Ok(cluster) => {
            stores.push(start(
                "Redis Cluster",
                &env(
                    "redis",
                    &[("AUTUMN_IDEMPOTENCY__REDIS__URL", cluster.url())],
                ),
                StoreProcesses::Pids(cluster.pids()),
            )?);
            Some(cluster)
        }
        Err(why) => {
            println!("    Redis Cluster: skipped, {why}");
            None
        }
    };

    let postgres = std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| POSTGRES_URL.to_owned());
    let database = match Database::create(&postgres, &run_id) {
        Ok(database) => Some(database),
        Err(why) => {
            println!("    PostgreSQL: skipped, {why}");
            None
        }
    };
    let mut bouncer = None;
    if let Some(database) = &database {
        stores.push(start(
            "PostgreSQL",
            &env(
                "database",
                &[("AUTUMN_DATABASE__URL", database.url.clone())],
            ),
            StoreProcesses::Postgres(Vec::new()),
        )?);
        match PgBouncer::start(&database.url) {
            Ok(started) => {
                stores.push(start(
                    "PgBouncer",
                    &env(
                        "database",
                        &[
                            ("AUTUMN_DATABASE__URL", started.url(&database.name)),
                            ("AUTUMN_DATABASE__STATEMENT_CACHE", "false".to_owned()),
                        ],
                    ),
                    StoreProcesses::Postgres(vec![started.child.id()]),
                )?);
                bouncer = Some(started);
            }
            Err(why) => println!("    PgBouncer: skipped, {why}"),
        }
    }

    for store in &stores {
        e2e::prime(store.server.addr, &store.fixed_key)?;
    }
    println!(
        "==> sizing: {}, stores unpinned",
        settings.describe(server_core, load_core)
    );
    let script = std::env::temp_dir().join(format!("autumn-sizing-{run_id}.lua"));
    let rows = [("first-time", Keys::Unique), ("replay", Keys::Fixed)];
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); stores.len() * rows.len()];
    for round in 0..=settings.rounds {
        // Round 0 is a short warm-up, not counted.
        let seconds = if round == 0 { 2 } else { settings.seconds };
        for (store_index, store) in stores.iter().enumerate() {
            for (row_index, (row, keys)) in rows.iter().enumerate() {
                let load = Load {
                    url: format!("http://{}/orders", store.server.addr),
                    post_json: Some(e2e::ORDER),
                    keys: *keys,
                    cookie: None,
                    run_id: format!("{run_id}-r{round}-{store_index}-{row_index}"),
                    threads: settings.threads,
                    connections: settings.connections,
                    seconds,
                    core: load_core,
                };
                let cpu_before = store.server.cpu()?;
                let store_before = store.processes.snapshot();
                store.server.clear_log()?;
                let started = Instant::now();
                let outcome = wrk::run(&load, &script, &store.fixed_key)?;
                let wall = started.elapsed().as_secs_f64().max(f64::from(seconds));
                if round == 0 {
                    continue;
                }
                if let Some(refusal) = outcome
                    .refusal(&format!("{} {row} (round {round})", store.name), || {
                        store.server.trouble()
                    })
                {
                    return Err(refusal);
                }
                let cpu = store.server.cpu()?.saturating_sub(cpu_before);
                let store_share = match store.processes {
                    StoreProcesses::None => None,
                    _ => {
                        Some(used(&store_before, &store.processes.snapshot()).as_secs_f64() / wall)
                    }
                };
                // Requests over the server's CPU seconds: what one fully
                // busy app core would serve.
                #[allow(clippy::cast_precision_loss)]
                let per_core = outcome.requests as f64 / cpu.as_secs_f64().max(0.01);
                println!(
                    "    round {round}: {:<14} {row:<10} {:>8.0} req/s {:>8.0} per app core",
                    store.name, outcome.per_second, per_core
                );
                samples[store_index * rows.len() + row_index].push(Sample {
                    per_second: outcome.per_second,
                    per_core,
                    store_share,
                });
            }
        }
    }
    let _ = std::fs::remove_file(&script);
    let names: Vec<(&str, &str)> = stores
        .iter()
        .flat_map(|store| rows.iter().map(move |(row, _)| (store.name, *row)))
        .collect();
    print!("{}", report(&names, &samples));
    // Servers first: they hold connections to the services stopped next.
    drop(stores);
    drop(bouncer);
    drop(cluster);
    drop(database);
    Ok(())
}

/// The table: per store and kind of request, the medians.
fn report(names: &[(&str, &str)], samples: &[Vec<Sample>]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{:<14} {:<10} {:>10} {:>14} {:>16}",
        "store", "requests", "req/s", "per app core", "store CPU (core)"
    );
    for ((store, row), rounds) in names.iter().zip(samples) {
        if rounds.is_empty() {
            continue;
        }
        let mut rates: Vec<f64> = rounds.iter().map(|s| s.per_second).collect();
        let mut per_core: Vec<f64> = rounds.iter().map(|s| s.per_core).collect();
        let mut shares: Vec<f64> = rounds.iter().filter_map(|s| s.store_share).collect();
        let share = if shares.is_empty() {
            "-".to_owned()
        } else {
            format!("{:.2}", e2e::median(&mut shares))
        };
        let _ = writeln!(
            out,
            "{store:<14} {row:<10} {:>10.0} {:>14.0} {share:>16}",
            e2e::median(&mut rates),
            e2e::median(&mut per_core),
        );
    }
    out
}

/// Polls `ready` every 100 ms until it holds or `READY_WITHIN` passes.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let started = Instant::now();
    while !ready() {
        if started.elapsed() > READY_WITHIN {
            return Err(format!("{what} within {}s", READY_WITHIN.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// `redis-cli -p port ARGS`, its output when it ran.
fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Six `redis-server`s joined into a cluster of three masters with a
/// replica each, as the tests start one; killed (and their directory
/// removed) on drop.
struct Cluster {
    nodes: Vec<(u16, Child)>,
    dir: PathBuf,
}

impl Cluster {
    fn start(run_id: &str) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("autumn-sizing-cluster-{run_id}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("no directory for it: {e}"))?;
        let mut cluster = Self {
            nodes: Vec::new(),
            dir,
        };
        for index in 0..6 {
            let node_dir = cluster.dir.join(index.to_string());
            std::fs::create_dir_all(&node_dir)
                .map_err(|e| format!("no directory for a node: {e}"))?;
            let (port, bus) = (crate::http::free_port()?, crate::http::free_port()?);
            let log = std::fs::File::create(node_dir.join("log"))
                .map_err(|e| format!("no log file for a node: {e}"))?;
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--cluster-port",
                    &bus.to_string(),
                ])
                .args(["--bind", "127.0.0.1", "--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf", "--save", ""])
                .args(["--appendonly", "no", "--dir"])
                .arg(&node_dir)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    format!("cannot run redis-server ({e}); apt-get install redis-server")
                })?;
            cluster.nodes.push((port, child));
        }
        for &(port, _) in &cluster.nodes {
            wait_for(&format!("node {port} did not answer PING"), || {
                redis_cli(port, &["PING"]).is_some_and(|pong| pong.trim() == "PONG")
            })?;
        }
        let mut create = Command::new("redis-cli");
        create.args(["--cluster", "create"]);
        for (port, _) in &cluster.nodes {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let created = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run redis-cli ({e})"))?;
        if !created.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&created.stdout)
            ));
        }
        for &(port, _) in &cluster.nodes {
            wait_for(&format!("node {port} did not see the cluster ok"), || {
                redis_cli(port, &["CLUSTER", "INFO"])
                    .is_some_and(|info| info.contains("cluster_state:ok"))
            })?;
        }
        Ok(cluster)
    }

    fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    fn pids(&self) -> Vec<u32> {
        self.nodes.iter().map(|(_, child)| child.id()).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A database of the bench's own, dropped afterwards.
struct Database {
    /// The server's URL with the database's name.
    url: String,
    name: String,
    /// The URL it was created from.
    admin: String,
}

impl Database {
    fn create(admin: &str, run_id: &str) -> Result<Self, String> {
        let name = format!("autumn_sizing_{run_id}");
        let Some((server, _)) = admin.rsplit_once('/') else {
            return Err(format!("{admin} names no database"));
        };
        psql(admin, &format!("CREATE DATABASE {name}"))?;
        Ok(Self {
            url: format!("{server}/{name}"),
            name,
            admin: admin.to_owned(),
        })
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = psql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

fn psql(url: &str, sql: &str) -> Result<(), String> {
    let output = Command::new("psql")
        .args([url, "-Atqc", sql])
        .env("PGCONNECT_TIMEOUT", "5")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run psql ({e})"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "psql {url}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// PgBouncer in transaction mode in front of the database's server, as
/// the tests start it; stopped (and its directory removed) on drop.
struct PgBouncer {
    child: Child,
    port: u16,
    user: String,
    dir: PathBuf,
}

impl PgBouncer {
    fn start(database_url: &str) -> Result<Self, String> {
        let program = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .find(|path| Path::new(path).exists())
            .ok_or("pgbouncer is not installed (apt-get install pgbouncer)")?;
        let authority = database_url
            .split_once("://")
            .map_or(database_url, |(_, rest)| rest);
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let (host, port) = authority
            .split(['/', '?'])
            .next()
            .and_then(|a| a.rsplit_once(':'))
            .ok_or_else(|| format!("{database_url} names no host:port"))?;
        let user = database_url
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('@'))
            .map_or("postgres", |(user, _)| {
                user.split(':').next().unwrap_or("postgres")
            });
        let listen = crate::http::free_port()?;
        let dir = std::env::temp_dir().join(format!("autumn-sizing-pgbouncer-{listen}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("no directory for it: {e}"))?;
        let users = dir.join("users.txt");
        std::fs::write(&users, format!("\"{user}\" \"\"\n"))
            .map_err(|e| format!("cannot write {}: {e}", users.display()))?;
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n* = host={host} port={port}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {listen}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {users}\n\
                 pool_mode = transaction\nmax_client_conn = 1000\n\
                 default_pool_size = 10\nlogfile = {log}\n",
                users = users.display(),
                log = dir.join("log").display(),
            ),
        )
        .map_err(|e| format!("cannot write {}: {e}", ini.display()))?;
        let mut command = Command::new(program);
        if running_as_root() {
            // PgBouncer refuses to run as root.
            use std::os::unix::fs::PermissionsExt as _;
            for path in [&dir, &users, &ini] {
                let mode = if path == &dir { 0o777 } else { 0o644 };
                let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
            }
            command.args(["-u", "postgres"]);
        }
        let child = command
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        let mut bouncer = Self {
            child,
            port: listen,
            user: user.to_owned(),
            dir,
        };
        let exited = wait_for(&format!("pgbouncer did not listen on {listen}"), || {
            matches!(bouncer.child.try_wait(), Ok(Some(_)))
                || std::net::TcpStream::connect(("127.0.0.1", listen)).is_ok()
        });
        if let Ok(Some(status)) = bouncer.child.try_wait() {
            let log = std::fs::read_to_string(bouncer.dir.join("log")).unwrap_or_default();
            return Err(format!("pgbouncer exited ({status}): {log}"));
        }
        exited?;
        Ok(bouncer)
    }

    fn url(&self, database: &str) -> String {
        format!(
            "postgres://{}@127.0.0.1:{}/{database}",
            self.user, self.port
        )
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_used_counts_new_processes_from_zero() {
        let before = HashMap::from([(1, Duration::from_millis(100))]);
        let after = HashMap::from([
            (1, Duration::from_millis(300)),
            (2, Duration::from_millis(50)),
        ]);
        assert_eq!(used(&before, &after), Duration::from_millis(250));
    }

    #[test]
    fn the_report_has_a_line_per_measured_row() {
        let sample = Sample {
            per_second: 1000.0,
            per_core: 1250.0,
            store_share: Some(0.25),
        };
        let table = report(
            &[("Redis", "first-time"), ("Redis", "replay")],
            &[vec![sample], Vec::new()],
        );
        assert!(
            table.contains("Redis          first-time       1000           1250             0.25"),
            "{table}"
        );
        assert!(!table.contains("replay"), "{table}");
    }
}
