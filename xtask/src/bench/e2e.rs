//! The end-to-end benchmark: Autumn and a plain-axum twin running the same
//! orders handler, each as its own release process pinned to one core,
//! driven by wrk pinned to the other, in interleaved rounds. Prints each
//! row's median, its spread, and its ratio to the plain-axum row it is
//! measured against (the median of the per-round ratios, so slow drift of
//! a noisy machine cancels out).
//!
//! `cargo xtask bench tls` runs the TLS suite instead: the layer-off POST
//! over HTTPS (HTTP/1.1 from wrk) and over HTTP/2 (chosen by ALPN, from
//! h2load), Autumn serving TLS itself and the plain-axum twin on the same
//! TLS and HTTP stack (`bench/src/tls.rs`), each pair in the same rounds.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::cert::SelfSigned;
use super::h2load;
use super::server::{CpuSplit, Server, cpu_of};
use super::wrk::{self, Keys, Load, Outcome};
use crate::http::Connection;

/// The Redis the Redis rows use (and whose CPU they report).
pub(super) const REDIS_URL: &str = "redis://127.0.0.1:6379";

/// The order every POST carries.
pub(super) const ORDER: &str = r#"{"item":"widget","qty":2}"#;

/// How the bench is run: `cargo xtask bench [--rounds N] [--secs S]
/// [--connections C] [--threads T]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) rounds: u32,
    pub(crate) seconds: u32,
    pub(crate) connections: u32,
    pub(crate) threads: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            rounds: 3,
            seconds: 10,
            connections: 32,
            threads: 2,
        }
    }
}

impl Settings {
    /// `wrk -t2 -c32 -d10s, 3 rounds; server on core 0, wrk on core 1`.
    pub(super) fn describe(&self, server: Option<usize>, load: Option<usize>) -> String {
        self.describe_load("wrk", "wrk", server, load)
    }

    /// The same with other load generators: `tools` as they run (`wrk and
    /// h2load -m1`), `names` as they are called (`wrk and h2load`).
    fn describe_load(
        &self,
        tools: &str,
        names: &str,
        server: Option<usize>,
        load: Option<usize>,
    ) -> String {
        let core = |core: Option<usize>| core.map_or("any".to_owned(), |c| c.to_string());
        format!(
            "{tools} -t{} -c{} -d{}s, {} rounds; server on core {}, {names} on core {}",
            self.threads,
            self.connections,
            self.seconds,
            self.rounds,
            core(server),
            core(load),
        )
    }

    pub(crate) fn parse(args: &[String]) -> Result<Self, String> {
        let mut settings = Self::default();
        let mut args = args.iter();
        while let Some(flag) = args.next() {
            let slot = match flag.as_str() {
                "--rounds" => &mut settings.rounds,
                "--secs" => &mut settings.seconds,
                "--connections" => &mut settings.connections,
                "--threads" => &mut settings.threads,
                other => return Err(format!("bench: unknown option `{other}`")),
            };
            *slot = args
                .next()
                .and_then(|value| value.parse().ok())
                .filter(|value| *value > 0)
                .ok_or_else(|| format!("bench: {flag} needs a positive number"))?;
        }
        Ok(settings)
    }
}

/// Which rows a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Suite {
    /// `cargo xtask bench`: every row over plain HTTP/1.1.
    Http,
    /// `cargo xtask bench tls`: the rows over HTTPS and HTTP/2.
    Tls,
}

/// How a row's requests travel, and so which load generator sends them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// HTTP/1.1 over TCP, from wrk.
    Http,
    /// HTTP/1.1 over TLS, from wrk, which offers no protocol by ALPN: both
    /// servers then answer in HTTP/1.1.
    Https,
    /// HTTP/2 over TLS, `h2` by ALPN, from h2load.
    H2,
}

impl Transport {
    fn suite(self) -> Suite {
        match self {
            Self::Http => Suite::Http,
            Self::Https | Self::H2 => Suite::Tls,
        }
    }
}

/// Which server a row loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Plain,
    /// The same twin on the allocator Autumn apps get: what of Autumn's
    /// figures is the allocator rather than the framework.
    PlainMimalloc,
    /// axum with the middleware that gives it Autumn's defaults (request
    /// id, access log, security headers, compression, panic catcher,
    /// timeout, sessions): what the features cost outside Autumn.
    PlainFeatured,
    AutumnMemory,
    /// Autumn with every optional feature off: what the framework itself
    /// costs.
    AutumnLean,
    /// The same with the actuator off too, so nothing counts requests:
    /// what the request metrics cost.
    AutumnLeanUncounted,
    AutumnRedis,
    /// The plain twin serving HTTPS (HTTP/2 or HTTP/1.1 by ALPN) with the
    /// run's certificate.
    PlainTls,
    /// Autumn, as `AutumnMemory`, serving HTTPS itself (`[server.tls]`)
    /// with the same certificate.
    AutumnTls,
}

/// What turns off each of Autumn's optional per-request features: the
/// access line, security headers, sessions, submit tokens, the
/// cross-origin check and compression.
const LEAN: [(&str, &str); 6] = [
    ("AUTUMN_LOG__ACCESS_LOG", "false"),
    ("AUTUMN_SECURITY__HEADERS__ENABLED", "false"),
    ("AUTUMN_SESSION__ENABLED", "false"),
    ("AUTUMN_SECURITY__SUBMIT_TOKEN__ENABLED", "false"),
    ("AUTUMN_SECURITY__CROSS_ORIGIN__ENABLED", "false"),
    ("AUTUMN_COMPRESSION__ENABLED", "false"),
];

/// The session cookie a returning visitor sends: an id of the session
/// cookie's form, so no new one is issued. Under the name the default
/// `[session]` reads (`SessionConfig::effective_cookie_name()`, the `Secure`
/// cookie's `__Host-` prefix on `cookie_name`), spelled out because this
/// crate does not depend on Autumn's.
const RETURNING_VISITOR: &str = "__Host-autumn_session=5bb676cec88f632751865b2494348e0f092b8f08";

/// One line of the table.
struct Row {
    name: &'static str,
    target: Target,
    path: &'static str,
    transport: Transport,
    post: bool,
    keys: Keys,
    /// Whether each request carries [`RETURNING_VISITOR`]'s cookie.
    returning: bool,
    /// The row this one is divided by.
    baseline: Option<usize>,
    /// The plain-axum row on Autumn's allocator this one is also divided by.
    same_allocator: Option<usize>,
}

/// How many rows a round measures.
pub(super) const ROW_COUNT: usize = ROWS.len();

const ROWS: &[Row] = &[
    Row {
        name: "plain axum, POST, one fixed key",
        target: Target::Plain,
        path: "/orders",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: None,
        same_allocator: None,
    },
    Row {
        name: "plain axum, POST, unique keys",
        target: Target::Plain,
        path: "/orders",
        transport: Transport::Http,
        post: true,
        keys: Keys::Unique,
        returning: false,
        baseline: None,
        same_allocator: None,
    },
    Row {
        name: "plain axum, GET form page",
        target: Target::Plain,
        path: "/orders/new",
        transport: Transport::Http,
        post: false,
        keys: Keys::None,
        returning: false,
        baseline: None,
        same_allocator: None,
    },
    Row {
        name: "plain axum on mimalloc, POST, one fixed key",
        target: Target::PlainMimalloc,
        path: "/orders",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: None,
        same_allocator: None,
    },
    Row {
        name: "plain axum on mimalloc, POST, unique keys",
        target: Target::PlainMimalloc,
        path: "/orders",
        transport: Transport::Http,
        post: true,
        keys: Keys::Unique,
        returning: false,
        baseline: None,
        same_allocator: None,
    },
    Row {
        name: "Autumn, layer off, one fixed key",
        target: Target::AutumnMemory,
        path: "/orders-off",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(0),
        same_allocator: Some(3),
    },
    // The layer-off route again under a rate-limit rule that lets every
    // request through, counted in memory and in Redis: what a rule costs,
    // read against the row above (see `COMPARED`), so measured right after
    // it, where a noisy machine has drifted least.
    Row {
        name: "Autumn, rate limit (memory), layer off, one fixed key",
        target: Target::AutumnMemory,
        path: "/orders-limited",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(0),
        same_allocator: Some(3),
    },
    Row {
        name: "Autumn, rate limit (Redis), layer off, one fixed key",
        target: Target::AutumnRedis,
        path: "/orders-limited",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(0),
        same_allocator: Some(3),
    },
    Row {
        name: "Autumn, layer off, unique keys",
        target: Target::AutumnMemory,
        path: "/orders-off",
        transport: Transport::Http,
        post: true,
        keys: Keys::Unique,
        returning: false,
        baseline: Some(1),
        same_allocator: Some(4),
    },
    Row {
        name: "axum + the same middleware, POST",
        target: Target::PlainFeatured,
        path: "/orders-off",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(0),
        same_allocator: Some(3),
    },
    Row {
        name: "Autumn, optional features off, layer off",
        target: Target::AutumnLean,
        path: "/orders-off",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(0),
        same_allocator: Some(3),
    },
    Row {
        name: "Autumn, optional features and actuator off, layer off",
        target: Target::AutumnLeanUncounted,
        path: "/orders-off",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(0),
        same_allocator: Some(3),
    },
    Row {
        name: "Autumn, memory store, replay",
        target: Target::AutumnMemory,
        path: "/orders",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(0),
        same_allocator: Some(3),
    },
    Row {
        name: "Autumn, memory store, replay, sealed cookie",
        target: Target::AutumnMemory,
        path: "/orders-signed",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(0),
        same_allocator: Some(3),
    },
    Row {
        name: "Autumn, memory store, first-time",
        target: Target::AutumnMemory,
        path: "/orders",
        transport: Transport::Http,
        post: true,
        keys: Keys::Unique,
        returning: false,
        baseline: Some(1),
        same_allocator: Some(4),
    },
    Row {
        name: "Autumn, GET form page, token minted",
        target: Target::AutumnMemory,
        path: "/orders/new",
        transport: Transport::Http,
        post: false,
        keys: Keys::None,
        returning: false,
        baseline: Some(2),
        same_allocator: None,
    },
    Row {
        name: "Autumn, GET form page, no token",
        target: Target::AutumnMemory,
        path: "/orders/blank",
        transport: Transport::Http,
        post: false,
        keys: Keys::None,
        returning: false,
        baseline: Some(2),
        same_allocator: None,
    },
    Row {
        name: "Autumn, GET form page, minted, cookie sent",
        target: Target::AutumnMemory,
        path: "/orders/new",
        transport: Transport::Http,
        post: false,
        keys: Keys::None,
        returning: true,
        baseline: Some(2),
        same_allocator: None,
    },
    Row {
        name: "Autumn, GET form page, no token, cookie sent",
        target: Target::AutumnMemory,
        path: "/orders/blank",
        transport: Transport::Http,
        post: false,
        keys: Keys::None,
        returning: true,
        baseline: Some(2),
        same_allocator: None,
    },
    Row {
        name: "Autumn, Redis store, replay",
        target: Target::AutumnRedis,
        path: "/orders",
        transport: Transport::Http,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(0),
        same_allocator: Some(3),
    },
    Row {
        name: "Autumn, Redis store, first-time",
        target: Target::AutumnRedis,
        path: "/orders",
        transport: Transport::Http,
        post: true,
        keys: Keys::Unique,
        returning: false,
        baseline: Some(1),
        same_allocator: Some(4),
    },
    // The TLS suite (`cargo xtask bench tls`): the layer-off POST of the
    // rows above, served over HTTPS by both servers from one certificate
    // made for the run, each pair measured back to back.
    Row {
        name: "plain axum, HTTPS, POST, one fixed key",
        target: Target::PlainTls,
        path: "/orders",
        transport: Transport::Https,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: None,
        same_allocator: None,
    },
    Row {
        name: "Autumn, HTTPS, layer off, one fixed key",
        target: Target::AutumnTls,
        path: "/orders-off",
        transport: Transport::Https,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(21),
        same_allocator: None,
    },
    Row {
        name: "plain axum, HTTP/2, POST, one fixed key",
        target: Target::PlainTls,
        path: "/orders",
        transport: Transport::H2,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: None,
        same_allocator: None,
    },
    Row {
        name: "Autumn, HTTP/2, layer off, one fixed key",
        target: Target::AutumnTls,
        path: "/orders-off",
        transport: Transport::H2,
        post: true,
        keys: Keys::Fixed,
        returning: false,
        baseline: Some(23),
        same_allocator: None,
    },
];

/// One row's measurement in one round.
#[derive(Debug, Clone, Copy)]
struct Sample {
    outcome: Outcome,
    /// Server CPU per request, in user space and in the kernel.
    cpu_per_request: CpuSplit,
    /// Redis CPU over the run, as a share of one core (Redis rows only).
    redis_core_share: Option<f64>,
}

pub(crate) fn run(root: &Path, settings: &Settings, suite: Suite) -> Result<(), String> {
    super::require_tools(suite == Suite::Tls)?;
    let bin = build(root)?;
    let (server_core, load_core) = super::pinned_cores();
    let run_id = super::run_id("b");
    // Made before the servers are started, so removed after they stopped.
    let cert = match suite {
        Suite::Http => None,
        Suite::Tls => Some(SelfSigned::make(root, &run_id)?),
    };
    let servers = match &cert {
        None => http_servers(&bin, &run_id, settings, server_core)?,
        Some(cert) => tls_servers(&bin, &run_id, settings, server_core, cert)?,
    };
    let redis_pid = servers
        .iter()
        .any(|(target, _)| *target == Target::AutumnRedis)
        .then(redis_pid)
        .flatten();
    let server_of = |target: Target| {
        servers
            .iter()
            .find(|(t, _)| *t == target)
            .map(|(_, server)| server)
    };
    let fixed_key = format!("{run_id}-fixed");
    // The TLS servers are not primed: their rows are all layer off.
    for (_, server) in servers.iter().filter(|(target, _)| !target.is_tls()) {
        prime(server.addr, &fixed_key)?;
    }
    println!(
        "==> {}",
        match suite {
            Suite::Http => settings.describe(server_core, load_core),
            Suite::Tls => settings.describe_load(
                "wrk and h2load -m1",
                "wrk and h2load",
                server_core,
                load_core,
            ),
        }
    );
    let script = std::env::temp_dir().join(format!("autumn-bench-{run_id}.lua"));
    let body = std::env::temp_dir().join(format!("autumn-bench-{run_id}.json"));
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); ROWS.len()];
    // Round 0 is a short warm-up, not counted: each server's code paths and
    // allocator settle before the measured rounds.
    for round in 0..=settings.rounds {
        let seconds = if round == 0 { 2 } else { settings.seconds };
        for (index, row) in ROWS.iter().enumerate() {
            if row.transport.suite() != suite {
                continue;
            }
            let Some(server) = server_of(row.target) else {
                continue;
            };
            let load = load_for(
                row,
                server.addr,
                settings,
                load_core,
                format!("{run_id}-r{round}-{index}"),
                seconds,
            );
            let cpu_before = server.cpu_split()?;
            let redis_before = match (row.target, redis_pid) {
                (Target::AutumnRedis, Some(pid)) => Some(cpu_of(pid)?),
                _ => None,
            };
            server.clear_log()?;
            let measured = match row.transport {
                Transport::Http | Transport::Https => {
                    Measured::Wrk(wrk::run(&load, &script, &fixed_key)?)
                }
                Transport::H2 => Measured::H2(h2load::run(&load, &body, &fixed_key)?),
            };
            if round == 0 {
                continue;
            }
            let cpu = server.cpu_split()?.saturating_sub(cpu_before);
            let redis_core_share = match (redis_before, redis_pid) {
                (Some(before), Some(pid)) => {
                    Some(cpu_of(pid)?.saturating_sub(before).as_secs_f64() / f64::from(seconds))
                }
                _ => None,
            };
            if let Some(refusal) = measured
                .refusal(&format!("{} (round {round})", row.name), || {
                    server.trouble()
                })
            {
                return Err(refusal);
            }
            let outcome = measured.outcome();
            let per = u32::try_from(outcome.requests.max(1)).unwrap_or(u32::MAX);
            println!(
                "    round {round}: {:<45} {:>9.0} req/s",
                row.name, outcome.per_second
            );
            samples[index].push(Sample {
                outcome,
                cpu_per_request: CpuSplit {
                    user: cpu.user / per,
                    system: cpu.system / per,
                },
                redis_core_share,
            });
        }
    }
    let _ = std::fs::remove_file(&script);
    let _ = std::fs::remove_file(&body);
    print!("{}", report(&samples));
    Ok(())
}

impl Target {
    fn is_tls(self) -> bool {
        matches!(self, Self::PlainTls | Self::AutumnTls)
    }
}

/// What one load generator reported.
enum Measured {
    Wrk(Outcome),
    H2(h2load::Report),
}

impl Measured {
    fn outcome(&self) -> Outcome {
        match self {
            Self::Wrk(outcome) => *outcome,
            Self::H2(report) => report.outcome(),
        }
    }

    fn refusal(&self, what: &str, trouble: impl FnOnce() -> String) -> Option<String> {
        match self {
            Self::Wrk(outcome) => outcome.refusal(what, trouble),
            Self::H2(report) => report.refusal(what, trouble),
        }
    }
}

/// The environment of an autumn-orders run of this bench: `backend` for
/// the keys and for the rate-limit counts (named, not left to follow the
/// keys' backend by default, so a rule row counts where its name says),
/// and the Redis the Redis rows use.
fn autumn_env(run_id: &str, backend: &str, settings: &Settings) -> Vec<(&'static str, String)> {
    let mut env = super::autumn_env(run_id, backend, settings);
    env.push(("AUTUMN_IDEMPOTENCY__REDIS__URL", REDIS_URL.to_owned()));
    env.push(("AUTUMN_RATE_LIMIT__BACKEND", backend.to_owned()));
    env
}

/// The servers of the plain-HTTP rows: the three plain twins and Autumn
/// three times (as it is, optional features off, and the actuator off
/// too), and on Redis when Redis answers.
fn http_servers(
    bin: &Path,
    run_id: &str,
    settings: &Settings,
    core: Option<usize>,
) -> Result<Vec<(Target, Server)>, String> {
    let common = |backend: &str| autumn_env(run_id, backend, settings);
    let lean = || LEAN.map(|(key, value)| (key, value.to_owned())).to_vec();
    let mut servers = vec![
        (
            Target::Plain,
            Server::start("plain axum", &bin.join("plain-axum"), &[], core)?,
        ),
        (
            Target::PlainMimalloc,
            Server::start(
                "plain axum on mimalloc",
                &bin.join("plain-axum-mimalloc"),
                &[],
                core,
            )?,
        ),
        (
            Target::PlainFeatured,
            Server::start(
                "axum + the same middleware",
                &bin.join("plain-axum-featured"),
                &[],
                core,
            )?,
        ),
        (
            Target::AutumnMemory,
            Server::start(
                "Autumn, memory",
                &bin.join("autumn-orders"),
                &common("memory"),
                core,
            )?,
        ),
        (
            Target::AutumnLean,
            Server::start(
                "Autumn, optional features off",
                &bin.join("autumn-orders"),
                &[common("memory"), lean()].concat(),
                core,
            )?,
        ),
        (
            Target::AutumnLeanUncounted,
            Server::start(
                "Autumn, optional features and actuator off",
                &bin.join("autumn-orders"),
                &[
                    common("memory"),
                    lean(),
                    vec![("AUTUMN_ACTUATOR__ENABLED", "false".to_owned())],
                ]
                .concat(),
                core,
            )?,
        ),
    ];
    if redis_pid().is_some() {
        servers.push((
            Target::AutumnRedis,
            Server::start(
                "Autumn, Redis",
                &bin.join("autumn-orders"),
                &common("redis"),
                core,
            )?,
        ));
    } else {
        println!(
            "    Redis at 127.0.0.1:6379 does not answer: its rows are skipped (start it with `cargo xtask services`)"
        );
    }
    Ok(servers)
}

/// The servers of the TLS rows, both on `cert`: the plain twin on the
/// system allocator, and Autumn as on its memory rows (its defaults).
fn tls_servers(
    bin: &Path,
    run_id: &str,
    settings: &Settings,
    core: Option<usize>,
    cert: &SelfSigned,
) -> Result<Vec<(Target, Server)>, String> {
    Ok(vec![
        (
            Target::PlainTls,
            Server::start(
                "plain axum, HTTPS",
                &bin.join("plain-axum"),
                &cert.plain_env(),
                core,
            )?,
        ),
        (
            Target::AutumnTls,
            Server::start(
                "Autumn, HTTPS",
                &bin.join("autumn-orders"),
                &[autumn_env(run_id, "memory", settings), cert.autumn_env()].concat(),
                core,
            )?,
        ),
    ])
}

fn load_for<'a>(
    row: &Row,
    addr: SocketAddr,
    settings: &Settings,
    core: Option<usize>,
    run_id: String,
    seconds: u32,
) -> Load<'a> {
    let scheme = match row.transport {
        Transport::Http => "http",
        Transport::Https | Transport::H2 => "https",
    };
    Load {
        url: format!("{scheme}://{addr}{}", row.path),
        post_json: row.post.then_some(ORDER),
        keys: row.keys,
        cookie: row.returning.then_some(RETURNING_VISITOR),
        run_id,
        threads: settings.threads,
        connections: settings.connections,
        seconds,
        core,
    }
}

/// Sends the fixed key once, so every request of a replay row is a replay
/// (and none meets the first run in flight).
pub(super) fn prime(addr: SocketAddr, key: &str) -> Result<(), String> {
    let mut connection = Connection::new(addr);
    let response = connection.send(
        &format!(
            "POST /orders HTTP/1.1\r\ncontent-type: application/json\r\nidempotency-key: {key}"
        ),
        ORDER.as_bytes(),
    )?;
    if response.status == 201 {
        Ok(())
    } else {
        Err(format!(
            "priming {addr}: {} {}",
            response.status, response.body
        ))
    }
}

/// The pid of the Redis on 127.0.0.1:6379, if it answers.
pub(super) fn redis_pid() -> Option<u32> {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", "6379", "info", "server"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// Builds the servers (Autumn and the three plain-axum twins) in release
/// mode; returns their directory: under `CARGO_TARGET_DIR` when it is set
/// (relative to the workspace, where cargo runs), else `target/`, so the
/// run starts the binaries just built rather than older ones or none.
pub(super) fn build(root: &Path) -> Result<PathBuf, String> {
    let args = ["build", "--release", "-p", "autumn-bench"].map(str::to_owned);
    crate::cargo(root, &args, &[])?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| root.join("target"), |dir| root.join(dir));
    Ok(target.join("release"))
}

pub(super) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// The table: per row, median req/s (min–max), median ratio to its
/// baseline (min–max), median server CPU per request.
fn report(samples: &[Vec<Sample>]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{:<45} {:>10} {:>19} {:>8} {:>15} {:>8} {:>13} {:>8} {:>15}",
        "",
        "req/s",
        "(min-max)",
        "ratio",
        "(min-max)",
        "cpu/req",
        "(user + sys)",
        "ratio*",
        "(min-max)"
    );
    for (index, row) in ROWS.iter().enumerate() {
        let rounds = &samples[index];
        if rounds.is_empty() {
            continue;
        }
        let mut rates: Vec<f64> = rounds.iter().map(|s| s.outcome.per_second).collect();
        let (low, high) = spread(&rates);
        let rate = median(&mut rates);
        let micros = |part: fn(&CpuSplit) -> Duration| {
            let mut values: Vec<f64> = rounds
                .iter()
                .map(|s| part(&s.cpu_per_request).as_secs_f64() * 1e6)
                .collect();
            median(&mut values)
        };
        let user = micros(|split| split.user);
        let system = micros(|split| split.system);
        let cpu = micros(|split| split.user + split.system);
        let ratio = |base: Option<usize>, none: &str| match base
            .map(|base| ratio(rounds, &samples[base]))
        {
            Some((r, low, high)) => format!("{r:>8.3} {:>15}", format!("({low:.3}-{high:.3})")),
            None => format!("{none:>8} {:>15}", ""),
        };
        let _ = writeln!(
            out,
            "{:<45} {rate:>10.0} {:>19} {} {cpu:>6.1}us {:>13} {}",
            row.name,
            format!("({low:.0}-{high:.0})"),
            ratio(row.baseline, "1"),
            format!("({user:.1} + {system:.1})"),
            ratio(row.same_allocator, ""),
        );
        let mut shares: Vec<f64> = rounds.iter().filter_map(|s| s.redis_core_share).collect();
        if !shares.is_empty() {
            let _ = writeln!(
                out,
                "{:<45} Redis itself used {:.2} of a core",
                "",
                median(&mut shares)
            );
        }
    }
    out.push_str(&comparisons(samples));
    if ROWS
        .iter()
        .zip(samples)
        .any(|(row, rounds)| row.transport != Transport::Http && !rounds.is_empty())
    {
        let _ = writeln!(
            out,
            "HTTPS: HTTP/1.1 over TLS from wrk; HTTP/2: over TLS, h2 by ALPN, from h2load, one stream at a time per connection; both servers on tokio-rustls (ring) with the run's self-signed P-256 certificate"
        );
    }
    let _ = writeln!(
        out,
        "ratio: to plain axum as a new axum app runs (system allocator); ratio*: to plain axum on mimalloc, the allocator Autumn apps get"
    );
    let _ = writeln!(
        out,
        "cpu/req: the server's CPU per request, in user space + in the kernel (mostly loopback TCP, and waking wrk when it sleeps)"
    );
    out
}

/// The comparisons between rows that are not against bare axum, each the
/// median of its per-round ratios: Autumn with the layer off against axum
/// with the same middleware (what Autumn costs for the same features), and
/// Autumn's form page with a minted token against the same page without
/// one, for a first visit (which also issues the session cookie a token is
/// bound to) and for a visitor who has the cookie (what minting costs); and
/// a replay whose recorded cookie is opened against one with nothing sealed
/// (what sealing costs a replay); the lean app against the same with
/// the actuator off (what the request metrics cost); and the layer-off
/// route under a rate-limit rule against the same route without one, with
/// the counts in memory and in Redis (what a rule costs a request it lets
/// through).
const COMPARED: [(&str, &str, &str); 7] = [
    (
        "Autumn, optional features off, layer off",
        "Autumn, optional features and actuator off, layer off",
        "of the same without request metrics",
    ),
    (
        "Autumn, memory store, replay, sealed cookie",
        "Autumn, memory store, replay",
        "of a replay with nothing sealed",
    ),
    (
        "Autumn, layer off, one fixed key",
        "axum + the same middleware, POST",
        "of axum with the same middleware",
    ),
    (
        "Autumn, GET form page, token minted",
        "Autumn, GET form page, no token",
        "of the same page without a token",
    ),
    (
        "Autumn, GET form page, minted, cookie sent",
        "Autumn, GET form page, no token, cookie sent",
        "of the same page without a token",
    ),
    (
        "Autumn, rate limit (memory), layer off, one fixed key",
        "Autumn, layer off, one fixed key",
        "of the same route without a rule: the cost of a rule (memory)",
    ),
    (
        "Autumn, rate limit (Redis), layer off, one fixed key",
        "Autumn, layer off, one fixed key",
        "of the same route without a rule: the cost of a rule (Redis)",
    ),
];

fn comparisons(samples: &[Vec<Sample>]) -> String {
    let measured = |name: &str| {
        ROWS.iter()
            .position(|row| row.name == name)
            .map(|index| &samples[index])
            .filter(|rounds| !rounds.is_empty())
    };
    let mut out = String::new();
    for (row, base, label) in COMPARED {
        if let (Some(rounds), Some(base)) = (measured(row), measured(base)) {
            let (r, low, high) = ratio(rounds, base);
            let _ = writeln!(out, "{row:<45} {r:.3} ({low:.3}-{high:.3}) {label}");
        }
    }
    out
}

/// The median of the per-round ratios of `rounds` to `base`, and their
/// spread: slow drift of a noisy machine cancels out.
fn ratio(rounds: &[Sample], base: &[Sample]) -> (f64, f64, f64) {
    let mut ratios: Vec<f64> = rounds
        .iter()
        .zip(base)
        .map(|(s, b)| s.outcome.per_second / b.outcome.per_second)
        .collect();
    let (low, high) = spread(&ratios);
    (median(&mut ratios), low, high)
}

fn spread(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), v| {
            (low.min(*v), high.max(*v))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_key_outlives_every_round_of_a_run() {
        for rounds in [1, 3, 5, 20] {
            let settings = Settings {
                rounds,
                ..Settings::default()
            };
            // Every row of every round (and the warm-up), as long as a
            // measured round's rows run.
            let run = u64::from(rounds + 1) * ROWS.len() as u64 * u64::from(settings.seconds);
            assert!(
                super::super::record_ttl_secs(&settings) > run,
                "{rounds} rounds"
            );
        }
    }

    /// One round of a row: 1,000 requests at `per_second`, with the CPU
    /// per request given in microseconds.
    /// Where the row called `name` is in the table.
    fn index(name: &str) -> usize {
        ROWS.iter()
            .position(|row| row.name == name)
            .expect("a row of that name")
    }

    fn sample(per_second: f64, user_us: u64, system_us: u64) -> Sample {
        Sample {
            outcome: super::super::wrk::Outcome {
                requests: 1_000,
                per_second,
                failures: super::super::wrk::Failures::default(),
            },
            cpu_per_request: CpuSplit {
                user: Duration::from_micros(user_us),
                system: Duration::from_micros(system_us),
            },
            redis_core_share: None,
        }
    }

    #[test]
    fn the_report_gives_each_row_its_cpu_in_user_space_and_in_the_kernel() {
        let mut samples = vec![Vec::new(); ROWS.len()];
        samples[0] = vec![sample(100_000.0, 3, 5), sample(120_000.0, 3, 4)];
        let report = report(&samples);
        let line = report
            .lines()
            .find(|line| line.starts_with(ROWS[0].name))
            .expect("the row is reported");
        // Medians of the two rounds: 3 us in user space, 4.5 in the kernel.
        assert!(line.contains("7.5us"), "{line}");
        assert!(line.contains("(3.0 + 4.5)"), "{line}");
    }

    #[test]
    fn autumn_is_also_measured_against_axum_with_the_same_middleware() {
        let at = |per_second| sample(per_second, 0, 0);
        // Every row measured at 100k, the two compared here at their own rates.
        let mut samples = vec![vec![at(100_000.0); 3]; ROWS.len()];
        samples[index("axum + the same middleware, POST")] =
            vec![at(50_000.0), at(40_000.0), at(60_000.0)];
        samples[index("Autumn, layer off, one fixed key")] = Vec::new();
        assert!(
            !report(&samples).contains("of axum with the same middleware"),
            "no comparison without the Autumn row"
        );
        samples[index("Autumn, layer off, one fixed key")] =
            vec![at(70_000.0), at(60_000.0), at(60_000.0)];
        let report = report(&samples);
        let line = report
            .lines()
            .find(|line| line.contains("of axum with the same middleware"))
            .expect("the comparison is reported");
        // Per round: 1.4, 1.5 and 1.0; the median and the spread.
        assert!(
            line.starts_with("Autumn, layer off, one fixed key"),
            "{line}"
        );
        assert!(line.contains("1.400 (1.000-1.500)"), "{line}");
    }

    #[test]
    fn the_tls_rows_are_served_over_tls_and_loaded_as_their_tools_can() {
        for row in ROWS {
            assert_eq!(
                row.target.is_tls(),
                row.transport.suite() == Suite::Tls,
                "{}",
                row.name
            );
            if row.transport == Transport::H2 {
                // h2load sends the same headers on every request.
                assert_ne!(row.keys, Keys::Unique, "{}", row.name);
            }
        }
        let tls = |transport| {
            ROWS.iter()
                .filter(|row| row.transport == transport && row.baseline.is_some())
                .count()
        };
        assert_eq!((tls(Transport::Https), tls(Transport::H2)), (1, 1));
    }

    #[test]
    fn a_tls_load_goes_to_https() {
        let settings = Settings::default();
        let addr = SocketAddr::from(([127, 0, 0, 1], 4443));
        let url = |name: &str| {
            let row = ROWS.iter().find(|row| row.name == name).expect("a row");
            load_for(row, addr, &settings, None, "r".into(), 1).url
        };
        assert_eq!(
            url("Autumn, HTTP/2, layer off, one fixed key"),
            "https://127.0.0.1:4443/orders-off"
        );
        assert_eq!(
            url("plain axum, HTTPS, POST, one fixed key"),
            "https://127.0.0.1:4443/orders"
        );
        assert_eq!(
            url("Autumn, layer off, one fixed key"),
            "http://127.0.0.1:4443/orders-off"
        );
    }

    #[test]
    fn the_report_says_how_the_tls_rows_were_loaded_only_when_they_were() {
        let mut samples = vec![Vec::new(); ROWS.len()];
        samples[0] = vec![sample(100_000.0, 3, 5)];
        assert!(!report(&samples).contains("h2load"));
        let mut samples = vec![Vec::new(); ROWS.len()];
        samples[index("plain axum, HTTP/2, POST, one fixed key")] = vec![sample(50_000.0, 3, 5)];
        samples[index("Autumn, HTTP/2, layer off, one fixed key")] = vec![sample(40_000.0, 4, 5)];
        let report = report(&samples);
        assert!(report.contains("h2load"), "{report}");
        let line = report
            .lines()
            .find(|line| line.starts_with("Autumn, HTTP/2"))
            .expect("the row is reported");
        assert!(line.contains("0.800"), "{line}");
    }

    #[test]
    fn a_rule_row_is_read_against_the_same_route_without_a_rule() {
        let row = |name: &str| {
            ROWS.iter()
                .find(|row| row.name == name)
                .expect("a row of that name")
        };
        let limited: Vec<&Row> = ROWS
            .iter()
            .filter(|row| row.path == "/orders-limited")
            .collect();
        assert_eq!(
            limited.iter().map(|row| row.target).collect::<Vec<_>>(),
            [Target::AutumnMemory, Target::AutumnRedis]
        );
        for limited in limited {
            let (_, base, label) = COMPARED
                .iter()
                .find(|(name, _, _)| *name == limited.name)
                .expect("the rule row is compared");
            assert!(label.contains("without a rule"), "{label}");
            // Measured right after it, with only the other rule row between.
            assert!(
                matches!(index(limited.name).checked_sub(index(base)), Some(1 | 2)),
                "{}",
                limited.name
            );
            let base = row(base);
            // The layer-off route of the app as it is, loaded alike.
            assert_eq!(base.path, "/orders-off", "{}", limited.name);
            assert_eq!(base.target, Target::AutumnMemory, "{}", limited.name);
            assert_eq!(
                (base.post, base.keys, base.transport, base.returning),
                (
                    limited.post,
                    limited.keys,
                    limited.transport,
                    limited.returning
                ),
                "{}",
                limited.name
            );
        }
        // Each server counts where its keys are kept, as the row names say.
        for backend in ["memory", "redis"] {
            let env = autumn_env("r", backend, &Settings::default());
            assert!(
                env.contains(&("AUTUMN_RATE_LIMIT__BACKEND", backend.to_owned())),
                "{env:?}"
            );
        }
    }

    #[test]
    fn the_report_gives_what_a_rule_costs() {
        let at = |per_second| sample(per_second, 0, 0);
        let mut samples = vec![vec![at(100_000.0); 3]; ROWS.len()];
        samples[index("Autumn, rate limit (memory), layer off, one fixed key")] =
            vec![at(90_000.0), at(95_000.0), at(80_000.0)];
        samples[index("Autumn, rate limit (Redis), layer off, one fixed key")] = Vec::new();
        let report = report(&samples);
        let line = report
            .lines()
            .find(|line| line.contains("the cost of a rule (memory)"))
            .expect("the comparison is reported");
        // Per round: 0.90, 0.95 and 0.80 of the layer-off row.
        assert!(line.contains("0.900 (0.800-0.950)"), "{line}");
        assert!(
            !report.contains("the cost of a rule (Redis)"),
            "no comparison without the Redis row"
        );
    }

    #[test]
    fn every_comparison_names_two_rows() {
        for (row, base, _) in COMPARED {
            for name in [row, base] {
                assert!(
                    ROWS.iter().any(|r| r.name == name),
                    "no row is called {name:?}"
                );
            }
        }
    }

    #[test]
    fn the_default_is_the_published_setup() {
        assert_eq!(
            Settings::parse(&[]),
            Ok(Settings {
                rounds: 3,
                seconds: 10,
                connections: 32,
                threads: 2
            })
        );
    }

    #[test]
    fn options_override_and_nonsense_is_refused() {
        let args = ["--rounds", "5", "--secs", "2"].map(str::to_owned);
        let settings = Settings::parse(&args).expect("valid");
        assert_eq!((settings.rounds, settings.seconds), (5, 2));
        assert!(Settings::parse(&["--rounds".to_owned(), "0".to_owned()]).is_err());
        assert!(Settings::parse(&["--fast".to_owned()]).is_err());
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert!((median(&mut [3.0, 1.0, 2.0]) - 2.0).abs() < 1e-9);
        assert!((median(&mut [4.0, 1.0, 3.0, 2.0]) - 2.5).abs() < 1e-9);
    }

    #[test]
    fn every_ratio_points_at_a_plain_axum_row() {
        for row in ROWS {
            if let Some(base) = row.baseline {
                let plain = if row.target.is_tls() {
                    Target::PlainTls
                } else {
                    Target::Plain
                };
                assert_eq!(ROWS[base].target, plain, "{}", row.name);
                assert_eq!(ROWS[base].post, row.post, "{}", row.name);
                // Measured over the same protocol, with the same load.
                assert_eq!(ROWS[base].transport, row.transport, "{}", row.name);
                assert_eq!(ROWS[base].keys, row.keys, "{}", row.name);
            }
            if let Some(base) = row.same_allocator {
                assert_eq!(ROWS[base].target, Target::PlainMimalloc, "{}", row.name);
                assert_eq!(ROWS[base].keys, row.keys, "{}", row.name);
                // The same load as the system-allocator baseline.
                assert_eq!(
                    row.baseline.map(|b| ROWS[b].keys),
                    Some(row.keys),
                    "{}",
                    row.name
                );
            }
        }
    }
}
