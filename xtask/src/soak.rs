//! `cargo xtask soak`: the orders and saas examples on Redis under a bounded
//! mixed load for a set time, then three assertions:
//!
//! 1. no handler ran twice for one key: per key, the rows the app stored
//!    (orders by item, users by email) and the first-time answers clients
//!    got are each at most one, and equal;
//! 2. no 5xx other than the documented 503s (`idempotency_store_unavailable`,
//!    `submit_token_store_unavailable`), and no other answer a scenario did
//!    not expect;
//! 3. each server's RSS stays flat: the largest sample of the last minute
//!    (the last half of a shorter run) is at most [`RSS_SLACK_KIB`] above
//!    the sample taken when the warm-up ends.
//!
//! The examples are the debug builds `cargo test` and `cargo xtask ci`
//! already make, so a soak costs no second compile of the dependency tree;
//! a double run or a leak does not depend on the optimisation level. Each
//! runs as its own process on a free loopback port, with
//! `[idempotency] backend = "redis"`, a `key_prefix` of its own, and its
//! rows in a SQLite file in a temporary directory (a database whose cache
//! is bounded: rows kept in memory would make any RSS bound meaningless).
//! The load comes from this process: a few threads per app, each with
//! keep-alive connections, each running one scenario after another (closed
//! loop, so the load is bounded by the number of threads).
//! Afterwards the run's keys are removed from the shared Redis.

use crate::http;
mod redis;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use std::{env, fs};

use http::{Connection, Response, json_string};

/// `cargo xtask soak`: two minutes.
const DEFAULT_SECS: u64 = 120;
/// `cargo xtask soak --long`: ten minutes.
const LONG_SECS: u64 = 600;
/// Load threads per app. The machine may have two cores shared with other
/// work: three closed-loop clients per app keep both servers busy without
/// starving them of CPU.
const WORKERS_PER_APP: usize = 3;
/// How much the RSS may grow between the end of the warm-up and the last
/// window. Allocator arenas and connection buffers settle in steps, and
/// SQLite's page cache (2 MiB per pooled connection at most) fills as the
/// tables grow; a leak grows without end. Two-minute runs grow by about
/// 0.1 MiB after the warm-up at some 750 requests a second, so a leak of
/// 100 bytes a request (6 MiB in 90 s) already comes close.
const RSS_SLACK_KIB: u64 = 8 * 1024;
/// `max_body_bytes` and `max_form_bytes` given to the apps: small, so that
/// an oversized body is cheap to send.
const BODY_LIMIT: usize = 16 * 1024;
/// How long a server gets to log its address.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of each server's log kept to show when something fails.
const LOG_TAIL: usize = 40;
/// Problems quoted in the report (all are counted).
const QUOTED_PROBLEMS: usize = 15;

const USAGE: &str = "usage: cargo xtask soak [--long | --secs N]";

/// The 503s the docs promise when a store cannot be asked; anything else in
/// the 5xx range fails the soak.
const DOCUMENTED_503: &[&str] = &[
    "idempotency_store_unavailable",
    "submit_token_store_unavailable",
];

/// Answers that say the store failed, documented and allowed anywhere a
/// keyed request is sent: the scenario stops there, the handler did not run.
const STORE_TROUBLE_409: &[&str] = &["idempotency_lock_unavailable"];

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let secs = parse_args(args)?;
    let duration = Duration::from_secs(secs);
    let redis_url =
        env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned());
    let redis_addr = check_redis(&redis_url)?;

    println!("==> soak: building the examples (debug)");
    crate::cargo(
        root,
        &["build", "-p", "orders", "-p", "saas"].map(str::to_owned),
        &[],
    )?;
    let target = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let run_id = format!(
        "{:x}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or_default()
    );
    let dir = env::temp_dir().join(format!("autumn-soak-{run_id}"));
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let outcome = soak(&target.join("debug"), &dir, &run_id, &redis_url, duration);
    let _ = fs::remove_dir_all(&dir);
    // The servers are gone; their records need not wait for their TTL.
    let pattern = format!("autumn-soak:{run_id}:*");
    match redis::unlink_matching(redis_addr, &pattern) {
        Ok(n) => println!("==> soak: removed the run's {n} keys ({pattern}) from Redis"),
        Err(why) => println!(
            "==> soak: could not remove {pattern} from Redis ({why}); they expire within 10 minutes"
        ),
    }
    outcome
}

fn parse_args(args: &[String]) -> Result<u64, String> {
    let mut secs = DEFAULT_SECS;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--long" => secs = LONG_SECS,
            "--secs" => {
                secs = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n >= 10)
                    .ok_or_else(|| {
                        format!("--secs needs a number of seconds, at least 10\n{USAGE}")
                    })?;
            }
            other => return Err(format!("unknown soak argument `{other}`\n{USAGE}")),
        }
    }
    Ok(secs)
}

fn check_redis(url: &str) -> Result<SocketAddr, String> {
    let host_port = url
        .trim_start_matches("redis://")
        .split(['/', '?'])
        .next()
        .unwrap_or("127.0.0.1:6379");
    let addr: SocketAddr = host_port.parse().map_err(|_| {
        format!("the soak needs a loopback Redis given as redis://IP:PORT, not {url}")
    })?;
    TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map(|_| addr)
        .map_err(|e| {
            format!("Redis does not answer on {addr} ({e}); start it with `cargo xtask services`")
        })
}

/// Which example.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum App {
    Orders,
    Saas,
}

impl App {
    fn name(self) -> &'static str {
        match self {
            Self::Orders => "orders",
            Self::Saas => "saas",
        }
    }
}

/// A running example, killed on drop.
struct Server {
    app: App,
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(
        app: App,
        bin_dir: &Path,
        dir: &Path,
        run_id: &str,
        redis_url: &str,
    ) -> Result<Self, String> {
        let binary = bin_dir.join(app.name());
        let limit = BODY_LIMIT.to_string();
        let mut child = Command::new(&binary)
            .current_dir(dir)
            .env("AUTUMN_SERVER__HOST", "127.0.0.1")
            .env("AUTUMN_SERVER__PORT", "0")
            .env("AUTUMN_IDEMPOTENCY__BACKEND", "redis")
            .env("AUTUMN_IDEMPOTENCY__REDIS__URL", redis_url)
            .env(
                "AUTUMN_IDEMPOTENCY__REDIS__KEY_PREFIX",
                format!("autumn-soak:{run_id}:{}", app.name()),
            )
            // Should the clean-up at the end fail, records outlive the run
            // by ten minutes at most in the shared Redis.
            .env("AUTUMN_IDEMPOTENCY__TTL_SECS", "600")
            // Every worker calls from 127.0.0.1: one caller to the quota,
            // given room for the whole run's keys.
            .env("AUTUMN_IDEMPOTENCY__QUOTA__MAX_RECORDS", "10000000")
            .env("AUTUMN_IDEMPOTENCY__QUOTA__MAX_BYTES", "4294967296")
            // The soak reads the counters on the app's one port.
            .env("AUTUMN_ACTUATOR__METRICS_ON_APP_PORT", "true")
            .env("AUTUMN_SECURITY__SUBMIT_TOKEN__TTL_SECS", "600")
            .env("AUTUMN_IDEMPOTENCY__MAX_BODY_BYTES", &limit)
            .env("AUTUMN_SECURITY__SUBMIT_TOKEN__MAX_FORM_BYTES", &limit)
            .env(
                "AUTUMN_DATABASE__URL",
                format!(
                    "sqlite://{}",
                    dir.join(format!("{}.db", app.name())).display()
                ),
            )
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (found, address) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            drain(stdout, Arc::clone(&log), Some(found));
        }
        if let Some(stderr) = child.stderr.take() {
            drain(stderr, Arc::clone(&log), None);
        }
        let mut server = Self {
            app,
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
        };
        match address.recv_timeout(START_TIMEOUT) {
            Ok(addr) => server.addr = addr,
            Err(_) => {
                return Err(format!(
                    "{} did not log its address within {}s; its log:\n{}",
                    app.name(),
                    START_TIMEOUT.as_secs(),
                    server.log_tail()
                ));
            }
        }
        Ok(server)
    }

    fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.iter().fold(String::new(), |mut out, line| {
            let _ = writeln!(out, "    | {line}");
            out
        })
    }

    /// VmRSS in KiB, or `None` once the process is gone (or a zombie).
    fn rss_kib(&self) -> Option<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        if status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
        {
            return None;
        }
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }
}

/// Keeps reading a server's output so that it never blocks on a full pipe,
/// keeping the last [`LOG_TAIL`] lines, and sends the address of the
/// `listening on http://...` line to `found`.
fn drain(
    output: impl Read + Send + 'static,
    log: Arc<Mutex<Vec<String>>>,
    mut found: Option<mpsc::Sender<SocketAddr>>,
) {
    thread::spawn(move || {
        for line in BufReader::new(output).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find("listening on http://") {
                let rest = &line[at + "listening on http://".len()..];
                let end = rest
                    .find(|c: char| c.is_whitespace() || c == '/')
                    .unwrap_or(rest.len());
                if let (Some(tx), Ok(addr)) = (found.take(), rest[..end].parse()) {
                    let _ = tx.send(addr);
                }
            }
            let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
            if log.len() == LOG_TAIL {
                log.remove(0);
            }
            log.push(line);
        }
    });
}

/// What the load threads saw.
#[derive(Default)]
struct Tally {
    /// Requests by scenario step.
    kinds: BTreeMap<&'static str, u64>,
    /// Requests by status.
    statuses: BTreeMap<u16, u64>,
    /// 503s with a documented code.
    documented_503: u64,
    /// 5xx answers that are not documented 503s.
    other_5xx: u64,
    /// Answers a scenario did not expect, and transport errors.
    unexpected: u64,
    problems: Vec<String>,
    /// Per key (the order's item, the user's email): first-time answers,
    /// those that say the handler ran for it.
    first_answers: BTreeMap<String, u32>,
    /// Answers to a key or token that came from the handler, first-time or
    /// refused by it (not recorded): what the layer counts as misses.
    guarded_runs: u64,
}

impl Tally {
    fn merge(&mut self, other: Self) {
        for (kind, n) in other.kinds {
            *self.kinds.entry(kind).or_default() += n;
        }
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        self.documented_503 += other.documented_503;
        self.other_5xx += other.other_5xx;
        self.unexpected += other.unexpected;
        for problem in other.problems {
            if self.problems.len() < QUOTED_PROBLEMS {
                self.problems.push(problem);
            }
        }
        for (key, n) in other.first_answers {
            *self.first_answers.entry(key).or_default() += n;
        }
        self.guarded_runs += other.guarded_runs;
    }

    fn problem(&mut self, what: String) {
        if self.problems.len() < QUOTED_PROBLEMS {
            self.problems.push(what);
        }
    }

    /// Counts one answer to a `kind` request and judges it: `Some` when
    /// `expected` accepts it, `None` (the scenario stops) otherwise. A
    /// documented store failure stops the scenario without being a problem.
    fn judge(
        &mut self,
        kind: &'static str,
        answer: Result<Response, String>,
        expected: impl FnOnce(&Response) -> bool,
    ) -> Option<Response> {
        *self.kinds.entry(kind).or_default() += 1;
        let response = match answer {
            Ok(response) => response,
            Err(why) => {
                self.unexpected += 1;
                self.problem(format!("{kind}: {why}"));
                return None;
            }
        };
        *self.statuses.entry(response.status).or_default() += 1;
        let code = response.code().unwrap_or("");
        if response.status == 503 && DOCUMENTED_503.contains(&code) {
            self.documented_503 += 1;
            return None;
        }
        if response.status == 409 && STORE_TROUBLE_409.contains(&code) {
            return None;
        }
        if response.status >= 500 {
            self.other_5xx += 1;
            self.problem(format!(
                "{kind}: {} {}",
                response.status,
                excerpt(&response.body)
            ));
            return None;
        }
        if !expected(&response) {
            self.unexpected += 1;
            self.problem(format!(
                "{kind}: unexpected {} {}",
                response.status,
                excerpt(&response.body)
            ));
            return None;
        }
        Some(response)
    }

    /// A first-time answer for `key`; `guarded` when the request went
    /// through the idempotency or submit-token layer (it had a key or a
    /// token), which counts it as a miss.
    fn first_answer(&mut self, key: &str, guarded: bool) {
        *self.first_answers.entry(key.to_owned()).or_default() += 1;
        if guarded {
            self.guarded_runs += 1;
        }
    }
}

fn excerpt(body: &str) -> String {
    let mut end = body.len().min(200);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    body[..end].replace('\n', " ")
}

/// A small xorshift generator: the mix only needs to be varied, not secure.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One load thread's context.
struct Worker {
    run_id: String,
    index: usize,
    rng: Rng,
    tally: Tally,
    a: Connection,
    b: Connection,
}

impl Worker {
    fn new(run_id: &str, index: usize, addr: SocketAddr) -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7)
            ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Self {
            run_id: run_id.to_owned(),
            index,
            rng: Rng::new(seed),
            tally: Tally::default(),
            a: Connection::new(addr),
            b: Connection::new(addr),
        }
    }
}

fn soak(
    bin_dir: &Path,
    dir: &Path,
    run_id: &str,
    redis_url: &str,
    duration: Duration,
) -> Result<(), String> {
    let warmup = (duration / 4).min(Duration::from_secs(30));
    let window = (duration / 2).min(Duration::from_secs(60));
    let servers = [
        Server::start(App::Orders, bin_dir, dir, run_id, redis_url)?,
        Server::start(App::Saas, bin_dir, dir, run_id, redis_url)?,
    ];
    println!(
        "==> soak: orders on {}, saas on {}, Redis {redis_url} (prefix autumn-soak:{run_id}:*); \
         {}s of load, warm-up {}s, RSS window the last {}s",
        servers[0].addr,
        servers[1].addr,
        duration.as_secs(),
        warmup.as_secs(),
        window.as_secs()
    );

    let started = Instant::now();
    let deadline = started + duration;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for server in &servers {
        for index in 0..WORKERS_PER_APP {
            let mut worker = Worker::new(run_id, index, server.addr);
            let app = server.app;
            let stop = Arc::clone(&stop);
            let sent = Arc::clone(&sent);
            workers.push(thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                    match app {
                        App::Orders => orders_scenario(&mut worker, n),
                        App::Saas => saas_scenario(&mut worker, n),
                    }
                    n += 1;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                worker.tally
            }));
        }
    }

    // RSS once a second, until the load stops; a server that died stops it.
    let mut rss: [Vec<(Duration, u64)>; 2] = [Vec::new(), Vec::new()];
    let mut died = None;
    let mut next_report = Duration::from_secs(10);
    while Instant::now() < deadline {
        let at = started.elapsed();
        for (server, samples) in servers.iter().zip(rss.iter_mut()) {
            match server.rss_kib() {
                Some(kib) => samples.push((at, kib)),
                None => died = died.or(Some(server.app)),
            }
        }
        if died.is_some() {
            stop.store(true, Ordering::Relaxed);
            break;
        }
        if at >= next_report {
            println!(
                "    {:>4}s  {} scenarios, RSS orders {} MiB, saas {} MiB",
                at.as_secs(),
                sent.load(Ordering::Relaxed),
                mib(rss[0].last().map_or(0, |s| s.1)),
                mib(rss[1].last().map_or(0, |s| s.1)),
            );
            next_report += Duration::from_secs(10);
        }
        thread::sleep(
            Duration::from_secs(1).min(deadline.saturating_duration_since(Instant::now())),
        );
    }
    let mut tallies = [Tally::default(), Tally::default()];
    for (i, worker) in workers.into_iter().enumerate() {
        let tally = worker
            .join()
            .map_err(|_| "a load thread panicked".to_owned())?;
        tallies[i / WORKERS_PER_APP].merge(tally);
    }
    let elapsed = started.elapsed();
    for (server, samples) in servers.iter().zip(rss.iter_mut()) {
        if let Some(kib) = server.rss_kib() {
            samples.push((elapsed, kib));
        }
    }
    if let Some(app) = died {
        let server = servers.iter().find(|s| s.app == app);
        return Err(format!(
            "{} exited during the soak; its log:\n{}",
            app.name(),
            server.map(Server::log_tail).unwrap_or_default()
        ));
    }

    let mut failures = Vec::new();
    let mut table = String::new();
    for ((server, tally), samples) in servers.iter().zip(&tallies).zip(&rss) {
        let rows = stored_rows(server)?;
        let metrics = Connection::new(server.addr)
            .send("GET /actuator/metrics HTTP/1.1", b"")
            .map(|r| r.body)
            .unwrap_or_else(|e| format!("({e})"));
        report(
            server.app,
            tally,
            &rows,
            samples,
            warmup,
            duration.saturating_sub(window),
            elapsed,
            &metrics,
            &mut table,
            &mut failures,
        );
    }
    println!("{table}");
    if failures.is_empty() {
        println!("==> soak passed in {:.0}s", elapsed.as_secs_f64());
        Ok(())
    } else {
        for server in &servers {
            println!(
                "--- last lines of {}'s log:\n{}",
                server.app.name(),
                server.log_tail()
            );
        }
        Err(format!("soak: {}", failures.join("; ")))
    }
}

/// `misses` of `section` in the actuator's metrics document.
fn misses(metrics: &str, section: &str) -> Option<u64> {
    let start = metrics.find(&format!("\"{section}\":{{"))?;
    let section = &metrics[start..];
    let section = &section[..section.find('}')?];
    let at = section.find("\"misses\":")? + "\"misses\":".len();
    let digits: String = section[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// Rows per key as the app stored them: orders by item, users by email.
fn stored_rows(server: &Server) -> Result<BTreeMap<String, u32>, String> {
    let (path, field) = match server.app {
        App::Orders => ("/orders", "item"),
        App::Saas => ("/users.json", "email"),
    };
    let response = Connection::new(server.addr)
        .send(&format!("GET {path} HTTP/1.1"), b"")
        .map_err(|e| format!("{}: GET {path}: {e}", server.app.name()))?;
    if response.status != 200 {
        return Err(format!(
            "{}: GET {path} answered {}: {}",
            server.app.name(),
            response.status,
            excerpt(&response.body)
        ));
    }
    let mut rows = BTreeMap::new();
    let marker = format!("\"{field}\":\"");
    let mut rest = response.body.as_str();
    while let Some(at) = rest.find(&marker) {
        rest = &rest[at + marker.len()..];
        let end = rest.find('"').unwrap_or(rest.len());
        *rows.entry(rest[..end].to_owned()).or_default() += 1;
        rest = &rest[end..];
    }
    Ok(rows)
}

/// Appends one app's figures to `table` and its failed assertions to
/// `failures`.
#[allow(clippy::too_many_arguments)]
fn report(
    app: App,
    tally: &Tally,
    rows: &BTreeMap<String, u32>,
    rss: &[(Duration, u64)],
    warmup: Duration,
    window_start: Duration,
    elapsed: Duration,
    metrics: &str,
    table: &mut String,
    failures: &mut Vec<String>,
) {
    let name = app.name();
    let total: u64 = tally.kinds.values().sum();
    let _ = writeln!(
        table,
        "\n== {name}: {total} requests in {:.0}s ({:.0}/s)",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64().max(1.0)
    );
    let _ = writeln!(table, "  requests by kind:");
    for (kind, n) in &tally.kinds {
        let _ = writeln!(table, "    {kind:<28} {n:>8}");
    }
    let _ = writeln!(table, "  answers by status:");
    for (status, n) in &tally.statuses {
        let _ = writeln!(table, "    {status:<28} {n:>8}");
    }

    // Double runs: per key, stored rows and first-time answers.
    let mut keys: Vec<&String> = tally.first_answers.keys().chain(rows.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut doubles = Vec::new();
    for key in &keys {
        let answers = tally.first_answers.get(*key).copied().unwrap_or(0);
        let stored = rows.get(*key).copied().unwrap_or(0);
        if answers > 1 || stored > 1 || answers != stored {
            doubles.push(format!(
                "{key}: {stored} stored, {answers} first-time answers"
            ));
        }
    }
    let runs: u32 = rows.values().sum();
    let _ = writeln!(
        table,
        "  handler runs (rows stored): {runs}, distinct keys: {}, first-time answers: {}",
        keys.len(),
        tally.first_answers.values().sum::<u32>()
    );
    let _ = writeln!(table, "  metrics: {}", metrics.trim());
    let section = match app {
        App::Orders => "idempotency",
        App::Saas => "submit_token",
    };
    let misses = misses(metrics, section);
    let _ = writeln!(
        table,
        "  runs behind the layer: {} by the {section} misses counter, {} by the answers",
        misses.map_or("-".to_owned(), |n| n.to_string()),
        tally.guarded_runs
    );
    if misses != Some(tally.guarded_runs) {
        failures.push(format!(
            "{name}: the {section} layer counted {} handler runs, the answers say {}",
            misses.map_or("(unreadable)".to_owned(), |n| n.to_string()),
            tally.guarded_runs
        ));
    }
    let _ = writeln!(
        table,
        "  5xx: {} documented 503, {} other; unexpected answers: {}",
        tally.documented_503, tally.other_5xx, tally.unexpected
    );

    // RSS: the sample at the end of the warm-up against the last window.
    let baseline = rss.iter().find(|(at, _)| *at >= warmup).map(|s| s.1);
    let window_max = rss
        .iter()
        .filter(|(at, _)| *at >= window_start)
        .map(|s| s.1)
        .max();
    let start = rss.first().map_or(0, |s| s.1);
    let end = rss.last().map_or(0, |s| s.1);
    let max = rss.iter().map(|s| s.1).max().unwrap_or(0);
    let _ = writeln!(
        table,
        "  RSS MiB: start {}, after warm-up {}, end {}, max {}, max of last window {} \
         (bound: after warm-up + {})",
        mib(start),
        baseline.map_or("-".to_owned(), mib),
        mib(end),
        mib(max),
        window_max.map_or("-".to_owned(), mib),
        mib(RSS_SLACK_KIB)
    );
    if !tally.problems.is_empty() {
        let _ = writeln!(table, "  first problems:");
        for problem in &tally.problems {
            let _ = writeln!(table, "    {problem}");
        }
    }

    if !doubles.is_empty() {
        let _ = writeln!(table, "  keys run more than once, or not as answered:");
        for line in doubles.iter().take(QUOTED_PROBLEMS) {
            let _ = writeln!(table, "    {line}");
        }
        failures.push(format!(
            "{name}: {} keys whose handler ran more than once or not as answered",
            doubles.len()
        ));
    }
    if tally.other_5xx > 0 {
        failures.push(format!(
            "{name}: {} 5xx answers besides the documented 503s",
            tally.other_5xx
        ));
    }
    if tally.unexpected > 0 {
        failures.push(format!("{name}: {} unexpected answers", tally.unexpected));
    }
    if tally.first_answers.is_empty() {
        failures.push(format!(
            "{name}: no request ran the handler; the load never got through"
        ));
    }
    match (baseline, window_max) {
        (Some(baseline), Some(window_max)) if window_max > baseline + RSS_SLACK_KIB => {
            failures.push(format!(
                "{name}: RSS grew from {} MiB after warm-up to {} MiB in the last window \
                 (bound + {} MiB)",
                mib(baseline),
                mib(window_max),
                mib(RSS_SLACK_KIB)
            ));
        }
        (Some(_), Some(_)) => {}
        _ => failures.push(format!("{name}: too few RSS samples")),
    }
}

// ---- orders -------------------------------------------------------------

const JSON_POST: &str = "POST /orders HTTP/1.1\r\ncontent-type: application/json";

fn keyed(key: &str) -> String {
    format!("{JSON_POST}\r\nidempotency-key: {key}")
}

fn order(item: &str, qty: u32, delay_ms: Option<u32>) -> Vec<u8> {
    match delay_ms {
        Some(ms) => format!(r#"{{"item":"{item}","qty":{qty},"delay_ms":{ms}}}"#),
        None => format!(r#"{{"item":"{item}","qty":{qty}}}"#),
    }
    .into_bytes()
}

fn fresh_201(r: &Response) -> bool {
    r.status == 201 && r.header("x-idempotent-replayed").is_none()
}

fn replay_of(first_id: &str) -> impl Fn(&Response) -> bool + '_ {
    move |r: &Response| {
        r.status == 201
            && r.header("x-idempotent-replayed") == Some("true")
            && json_string(&r.body, "id") == Some(first_id)
    }
}

fn problem(status: u16, code: &'static str) -> impl Fn(&Response) -> bool {
    move |r: &Response| r.status == status && r.code() == Some(code)
}

/// One orders scenario. Keys (and the items they create, which is how the
/// rows are counted per key) are unique to the run, the thread and `n`.
fn orders_scenario(w: &mut Worker, n: u64) {
    let item = format!("{}-o{}-{n}", w.run_id, w.index);
    let key = format!("soak-{item}");
    match w.rng.below(20) {
        // A first call, then retries and a reuse with another body.
        0..=9 => {
            let answer = w.a.send(&keyed(&key), &order(&item, 1, None));
            let Some(first) = w.tally.judge("first call", answer, fresh_201) else {
                return;
            };
            w.tally.first_answer(&item, true);
            let Some(id) = json_string(&first.body, "id").map(str::to_owned) else {
                w.tally.unexpected += 1;
                w.tally
                    .problem(format!("first call: no id in {}", excerpt(&first.body)));
                return;
            };
            for _ in 0..w.rng.below(3) {
                let answer = w.a.send(&keyed(&key), &order(&item, 1, None));
                if w.tally.judge("replay", answer, replay_of(&id)).is_none() {
                    return;
                }
            }
            if w.rng.below(3) == 0 {
                let answer = w.a.send(&keyed(&key), &order(&item, 2, None));
                w.tally.judge(
                    "key reused, other body",
                    answer,
                    problem(422, "idempotency_key_reused"),
                );
            }
        }
        // Two at once: one runs, the other is told it is in flight (or,
        // when the first finished before it was looked up, replayed).
        10..=11 => {
            let body = order(&item, 1, Some(200));
            let head = keyed(&key);
            if let Err(why) = w.a.write(&head, &body) {
                w.tally.judge("concurrent pair", Err(why), |_| true);
                return;
            }
            thread::sleep(Duration::from_millis(20));
            let second_written = w.b.write(&head, &body);
            let first = w.a.read();
            let second = second_written.and_then(|()| w.b.read());
            let mut fresh = 0;
            let mut answered = 0;
            let mut ids = Vec::new();
            for answer in [first, second] {
                let judged = w.tally.judge("concurrent pair", answer, |r| {
                    fresh_201(r)
                        || problem(409, "idempotency_key_in_flight")(r)
                        || (r.status == 201 && r.header("x-idempotent-replayed") == Some("true"))
                });
                let Some(r) = judged else { continue };
                answered += 1;
                if r.status == 201 {
                    if fresh_201(&r) {
                        fresh += 1;
                        w.tally.first_answer(&item, true);
                    }
                    ids.extend(json_string(&r.body, "id").map(str::to_owned));
                }
            }
            ids.dedup();
            if fresh > 1 || ids.len() > 1 || (answered == 2 && fresh == 0) {
                w.tally.unexpected += 1;
                w.tally
                    .problem(format!("concurrent pair {key}: {fresh} ran, ids {ids:?}"));
            } else if let Some(id) = ids.first() {
                let answer = w.a.send(&keyed(&key), &body);
                w.tally.judge("replay", answer, replay_of(id));
            }
        }
        // No key: runs every time, so sent once.
        12 => {
            let answer = w.a.send(JSON_POST, &order(&item, 1, None));
            if w.tally.judge("no key", answer, fresh_201).is_some() {
                w.tally.first_answer(&item, false);
            }
        }
        // Malformed keys: too long, quoted form broken, header twice.
        13 | 14 => {
            let head = match n % 3 {
                0 => keyed(&"k".repeat(256)),
                1 => keyed("\"unterminated"),
                _ => format!("{}\r\nidempotency-key: {key}-2", keyed(&key)),
            };
            let answer = w.a.send(&head, &order(&item, 1, None));
            w.tally
                .judge("bad key", answer, problem(400, "idempotency_key_malformed"));
        }
        // A body over max_body_bytes.
        15 => {
            let answer = w.a.send(
                &keyed(&key),
                &order(&"x".repeat(BODY_LIMIT + 1024), 1, None),
            );
            w.tally.judge(
                "oversized body",
                answer,
                problem(413, "request_body_too_large"),
            );
        }
        // Broken JSON, and a blank item the handler refuses: 4xx, nothing
        // stored (the blank item's run is not a row).
        16 => {
            let answer = w.a.send(&keyed(&key), br#"{"item": "#);
            // Axum's extractor refuses it inside the handler's service.
            if w.tally
                .judge("broken JSON", answer, |r| (400..500).contains(&r.status))
                .is_some()
            {
                w.tally.guarded_runs += 1;
            }
        }
        17 => {
            let answer = w.a.send(&keyed(&key), &order("", 1, None));
            if w.tally
                .judge("blank item", answer, |r| r.status == 422)
                .is_some()
            {
                w.tally.guarded_runs += 1;
            }
        }
        _ => {
            let answer = w.a.send("GET /actuator/metrics HTTP/1.1", b"");
            w.tally.judge("metrics", answer, |r| r.status == 200);
        }
    }
}

// ---- saas ---------------------------------------------------------------

const FORM_POST: &str = "POST /signup HTTP/1.1\r\ncontent-type: application/x-www-form-urlencoded";

/// `application/x-www-form-urlencoded` escaping of everything but
/// unreserved characters.
fn form_escape(value: &str) -> String {
    value.bytes().fold(String::new(), |mut out, b| {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
        out
    })
}

fn signup(token: &str, email: &str, name: &str) -> Vec<u8> {
    format!(
        "_submit_token={}&email={}&name={}&password={}",
        form_escape(token),
        form_escape(email),
        form_escape(name),
        form_escape(SOAK_PASSWORD)
    )
    .into_bytes()
}

/// The password of every account the soak makes (the sign-up form wants
/// one of at least 8 characters).
const SOAK_PASSWORD: &str = "soak password";

/// The hidden token field's value in a rendered form.
fn token_in(page: &str) -> Option<String> {
    let field = page.find("name=\"_submit_token\"")?;
    // The value may come before or after the name inside the same tag.
    let tag_start = page[..field].rfind('<')?;
    let tag_end = field + page[field..].find('>')?;
    let tag = &page[tag_start..tag_end];
    let value = tag.find("value=\"")? + "value=\"".len();
    let len = tag[value..].find('"')?;
    Some(tag[value..value + len].to_owned())
}

fn fresh_303(r: &Response) -> bool {
    r.status == 303 && r.header("x-submit-token-replayed").is_none()
}

fn replayed_303(location: &str) -> impl Fn(&Response) -> bool + '_ {
    move |r: &Response| {
        r.status == 303
            && r.header("x-submit-token-replayed") == Some("true")
            && r.header("location") == Some(location)
    }
}

/// One saas scenario: a fresh form each time, emails unique to the run, the
/// thread and `n` (users are counted per email).
fn saas_scenario(w: &mut Worker, n: u64) {
    let email = format!("{}-s{}-{n}@soak.example", w.run_id, w.index);
    let answer = w.a.send("GET /signup HTTP/1.1", b"");
    let Some(page) = w.tally.judge("form (GET)", answer, |r| r.status == 200) else {
        return;
    };
    let Some(token) = token_in(&page.body) else {
        w.tally.unexpected += 1;
        w.tally
            .problem("form (GET): no _submit_token field".to_owned());
        return;
    };
    match w.rng.below(10) {
        // A post, then resends of it, sometimes with a field edited.
        0..=4 => {
            let body = signup(&token, &email, "Soak");
            let answer = w.a.send(FORM_POST, &body);
            let Some(first) = w.tally.judge("form post", answer, fresh_303) else {
                return;
            };
            w.tally.first_answer(&email, true);
            let location = first.header("location").unwrap_or_default().to_owned();
            for _ in 0..=w.rng.below(2) {
                let answer = w.a.send(FORM_POST, &body);
                if w.tally
                    .judge("form resend", answer, replayed_303(&location))
                    .is_none()
                {
                    return;
                }
            }
            if w.rng.below(3) == 0 {
                // Back, edit a field, submit again: the token names the
                // rendering, not the content, so the first answer stands.
                let answer = w.a.send(FORM_POST, &signup(&token, &email, "Edited"));
                w.tally
                    .judge("resend, fields edited", answer, replayed_303(&location));
            }
        }
        // A double-click: both posts in flight; the duplicate waits
        // (in_flight_wait_ms) and gets the first's redirect. One runs.
        5 | 6 => {
            let body = signup(&token, &email, "Soak");
            if let Err(why) = w.a.write(FORM_POST, &body) {
                w.tally.judge("double-click", Err(why), |_| true);
                return;
            }
            let second_written = w.b.write(FORM_POST, &body);
            let first = w.a.read();
            let second = second_written.and_then(|()| w.b.read());
            let mut fresh = 0;
            let mut answered = 0;
            let mut locations = Vec::new();
            for answer in [first, second] {
                // A duplicate that waited in_flight_wait_ms in vain gets 409.
                let judged = w.tally.judge("double-click", answer, |r| {
                    r.status == 303 || problem(409, "submit_token_in_flight")(r)
                });
                if let Some(r) = judged
                    && r.status == 303
                {
                    answered += 1;
                    if fresh_303(&r) {
                        fresh += 1;
                        w.tally.first_answer(&email, true);
                    }
                    locations.extend(r.header("location").map(str::to_owned));
                }
            }
            locations.dedup();
            if fresh > 1 || locations.len() > 1 || (answered == 2 && fresh == 0) {
                w.tally.unexpected += 1;
                w.tally.problem(format!(
                    "double-click {email}: {fresh} ran, locations {locations:?}"
                ));
            }
        }
        // Rejected by the handler (not recorded), then fixed with the same
        // token.
        7 => {
            let answer = w.a.send(FORM_POST, &signup(&token, "not-an-email", "Soak"));
            if w.tally
                .judge("form rejected", answer, |r| r.status == 422)
                .is_none()
            {
                return;
            }
            w.tally.guarded_runs += 1;
            let answer = w.a.send(FORM_POST, &signup(&token, &email, "Soak"));
            if w.tally.judge("form fixed", answer, fresh_303).is_some() {
                w.tally.first_answer(&email, true);
            }
        }
        // Bad input the layer refuses before any handler.
        _ => {
            let (kind, body, status, code) = match n % 4 {
                0 => (
                    "bad token",
                    signup("bad token", &email, "Soak"),
                    400,
                    "submit_token_malformed",
                ),
                1 => (
                    "token twice",
                    [
                        signup(&token, &email, "Soak"),
                        format!("&_submit_token={token}").into_bytes(),
                    ]
                    .concat(),
                    400,
                    "submit_token_repeated",
                ),
                2 => (
                    "broken form",
                    format!("_submit_token={}&email=%zz&name=Soak", form_escape(&token))
                        .into_bytes(),
                    400,
                    "form_malformed",
                ),
                _ => (
                    "oversized form",
                    signup(&token, &email, &"x".repeat(BODY_LIMIT + 1024)),
                    413,
                    "form_too_large",
                ),
            };
            let answer = w.a.send(FORM_POST, &body);
            w.tally.judge(kind, answer, problem(status, code));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// `samples` one a second, the warm-up ending at 2 s, the window
    /// starting at 4 s.
    fn rss(samples: &[u64]) -> Vec<(Duration, u64)> {
        samples
            .iter()
            .enumerate()
            .map(|(i, kib)| (SECOND * i as u32, *kib))
            .collect()
    }

    fn metrics(misses: u64) -> String {
        format!(
            r#"{{"idempotency":{{"conflicts":0,"hits":3,"misses":{misses}}},"submit_token":{{"conflicts":0,"hits":0,"misses":0}}}}"#
        )
    }

    /// Two keys, each stored once and answered once, both guarded.
    fn clean_tally() -> Tally {
        let mut tally = Tally::default();
        tally.first_answer("a", true);
        tally.first_answer("b", true);
        tally
    }

    fn rows(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
    }

    fn failures(
        tally: &Tally,
        rows: &BTreeMap<String, u32>,
        rss: &[(Duration, u64)],
        metrics: &str,
    ) -> Vec<String> {
        let mut table = String::new();
        let mut failures = Vec::new();
        report(
            App::Orders,
            tally,
            rows,
            rss,
            2 * SECOND,
            4 * SECOND,
            6 * SECOND,
            metrics,
            &mut table,
            &mut failures,
        );
        failures
    }

    const FLAT: &[u64] = &[10_000, 18_000, 19_000, 19_100, 19_200, 19_000, 19_300];

    #[test]
    fn clean_figures_pass() {
        let failures = failures(
            &clean_tally(),
            &rows(&[("a", 1), ("b", 1)]),
            &rss(FLAT),
            &metrics(2),
        );
        assert!(failures.is_empty(), "{failures:?}");
    }

    #[test]
    fn a_key_stored_twice_fails() {
        let failures = failures(
            &clean_tally(),
            &rows(&[("a", 2), ("b", 1)]),
            &rss(FLAT),
            &metrics(2),
        );
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("1 keys whose handler ran more than once"));
    }

    #[test]
    fn a_key_answered_twice_as_first_fails() {
        let mut tally = clean_tally();
        tally.first_answer("a", true);
        let failures = failures(
            &tally,
            &rows(&[("a", 1), ("b", 1)]),
            &rss(FLAT),
            &metrics(3),
        );
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("ran more than once"));
    }

    #[test]
    fn a_row_nobody_was_answered_for_fails() {
        let failures = failures(
            &clean_tally(),
            &rows(&[("a", 1), ("b", 1), ("c", 1)]),
            &rss(FLAT),
            &metrics(2),
        );
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("not as answered"));
    }

    #[test]
    fn more_misses_than_answers_fails() {
        let failures = failures(
            &clean_tally(),
            &rows(&[("a", 1), ("b", 1)]),
            &rss(FLAT),
            &metrics(3),
        );
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("counted 3 handler runs, the answers say 2"));
    }

    #[test]
    fn rss_growing_past_the_bound_after_warm_up_fails() {
        // Growth before the end of the warm-up does not count; growth in
        // the window does.
        let growing = [10_000, 18_000, 19_000, 25_000, 30_000, 34_000, 36_000];
        let failures = failures(
            &clean_tally(),
            &rows(&[("a", 1), ("b", 1)]),
            &rss(&growing),
            &metrics(2),
        );
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].contains("RSS grew from 18.6 MiB"),
            "{failures:?}"
        );
    }

    fn answer(status: u16, body: &str) -> Result<Response, String> {
        Ok(Response {
            status,
            headers: Vec::new(),
            body: body.to_owned(),
        })
    }

    #[test]
    fn documented_503s_stop_the_scenario_other_5xx_fail() {
        let mut tally = Tally::default();
        let documented = answer(
            503,
            r#"{"code":"idempotency_store_unavailable","status":503}"#,
        );
        assert!(tally.judge("first call", documented, |_| true).is_none());
        let token_store = answer(503, r#"{"code":"submit_token_store_unavailable"}"#);
        assert!(tally.judge("form post", token_store, |_| true).is_none());
        assert_eq!((tally.documented_503, tally.other_5xx), (2, 0));

        assert!(
            tally
                .judge("first call", answer(503, "{}"), |_| true)
                .is_none()
        );
        let internal = answer(500, r#"{"code":"internal_error"}"#);
        assert!(tally.judge("first call", internal, |_| true).is_none());
        assert_eq!((tally.documented_503, tally.other_5xx), (2, 2));

        let failures = failures(&tally, &BTreeMap::new(), &rss(FLAT), &metrics(0));
        assert!(
            failures
                .iter()
                .any(|f| f.contains("2 5xx answers besides the documented 503s")),
            "{failures:?}"
        );
    }

    #[test]
    fn unexpected_answers_and_transport_errors_are_counted() {
        let mut tally = Tally::default();
        assert!(
            tally
                .judge("replay", answer(201, "{}"), |r| r.status == 200)
                .is_none()
        );
        assert!(
            tally
                .judge("replay", Err("reset".to_owned()), |_| true)
                .is_none()
        );
        assert!(
            tally
                .judge("replay", answer(200, "{}"), |r| r.status == 200)
                .is_some()
        );
        assert_eq!(tally.unexpected, 2);
        assert_eq!(tally.kinds.get("replay"), Some(&3));
        assert_eq!(tally.problems.len(), 2);
    }

    #[test]
    fn the_token_is_read_from_the_hidden_field() {
        let page = r#"<form method="POST"><input type="hidden" name="_submit_token" value="3f2a-9c"><input name="email"></form>"#;
        assert_eq!(token_in(page).as_deref(), Some("3f2a-9c"));
        let value_first = r#"<input value="xyz" name="_submit_token" type="hidden">"#;
        assert_eq!(token_in(value_first).as_deref(), Some("xyz"));
        assert_eq!(token_in("<form></form>"), None);
    }

    #[test]
    fn misses_are_read_per_section() {
        let doc = r#"{"idempotency":{"conflicts":1,"hits":2,"misses":30},"submit_token":{"conflicts":0,"hits":5,"misses":7}}"#;
        assert_eq!(misses(doc, "idempotency"), Some(30));
        assert_eq!(misses(doc, "submit_token"), Some(7));
        assert_eq!(misses("(connection refused)", "idempotency"), None);
    }

    #[test]
    fn form_values_are_escaped() {
        assert_eq!(form_escape("a b@c.d&e=%"), "a%20b%40c.d%26e%3D%25");
    }

    #[test]
    fn arguments_pick_the_duration() {
        let args = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(parse_args(&args(&[])), Ok(DEFAULT_SECS));
        assert_eq!(parse_args(&args(&["--long"])), Ok(LONG_SECS));
        assert_eq!(parse_args(&args(&["--secs", "30"])), Ok(30));
        assert!(parse_args(&args(&["--secs", "3"])).is_err());
        assert!(parse_args(&args(&["--secs"])).is_err());
        assert!(parse_args(&args(&["--fast"])).is_err());
    }
}
