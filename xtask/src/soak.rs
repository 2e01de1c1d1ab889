//! `cargo xtask soak`: the orders and saas examples on Redis under a bounded
//! mixed load for a set time, beside a flooder per app (one client creating
//! keys or submit tokens as fast as it can), then these assertions:
//!
//! 1. no handler ran twice for one key: per key, the rows the app stored
//!    (orders by item, users by email) and the first-time answers clients
//!    got are each at most one, and equal;
//! 2. the normal load gets no 5xx and no 429, not even the documented 503s
//!    (`idempotency_store_unavailable`, `submit_token_store_unavailable`):
//!    the flooder fills its own quota, not the store everyone shares; and
//!    no answer a scenario did not expect;
//! 3. the normal load's p99 latency per request stays under [`p99_bound`];
//! 4. the flooder is held by its quota: it gets 429s (as many as the
//!    actuator's `quota_refusals` counts), no more first-time answers than
//!    its quota lets through as records expire, and Redis holds no more
//!    live records at the end than the quota and the normal load explain;
//! 5. each server's RSS stays flat: the largest sample of the last minute
//!    (the last half of a shorter run) is at most [`RSS_SLACK_KIB`] above
//!    the sample taken when the warm-up ends;
//! 6. every saas account got exactly one sign-up confirmation: the mail is
//!    a job queued with the account, sent through SMTP to a real server of
//!    the soak's own (`aiosmtpd`), and counted per recipient once saas has
//!    no mail left to send (see `mail.rs`).
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
//! loop, so the load is bounded by the number of threads), and one
//! flooder thread per app. Each thread is a client of its own: the apps
//! trust 127.0.0.1 as a proxy, and each thread names its own address in
//! `X-Forwarded-For` ([`client_address`]), which is what the quota counts
//! a caller by. Records and tokens live [`RECORD_TTL`], and each caller's
//! quota is sized from the rates a short calibration load measured first
//! ([`calibrate`]): room for a normal thread, well below what the flooder
//! would hold. Afterwards the run's keys are removed from the shared Redis.

use crate::http;
mod mail;
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
/// How long a record (orders) and a submitted token (saas) live
/// (`idempotency.ttl_secs`, `security.submit_token.ttl_secs`): short, so
/// that a caller's quota is a rate the flooder runs into within a run. No
/// scenario needs more: each retries its key or token within the same
/// scenario, a second or so after the first post (the slowest, a
/// double-click, waits for one sign-up's password hash). Should the
/// clean-up at the end fail, records outlive the run by this much at most
/// in the shared Redis.
const RECORD_TTL: Duration = Duration::from_secs(30);
/// How long the calibration load runs before the soak: the normal load
/// and the flooders, on servers of their own with no quota to speak of,
/// measuring the rates the soak's quota is sized from ([`quota_for`]).
const CALIBRATION: Duration = Duration::from_secs(10);
/// A calibrating thread's records all live to its end.
const _: () = assert!(CALIBRATION.as_secs() < RECORD_TTL.as_secs());
/// The quota over what the busiest normal load thread would hold live in
/// a [`RECORD_TTL`] at its calibrated rate: room for a thread that runs
/// faster in the soak than while calibrating (when the flooder's requests
/// still ran handlers instead of being refused), and for the jitter of a
/// shared machine. The flooder makes new records several times as fast as
/// a normal thread (on two shared cores, debug builds: 65 to 85 a second
/// against 10 to 12 for orders, 210 to 240 against 6 for saas), so a quota
/// three times a normal thread's need is still well below what it would
/// hold; [`calibrate`] stops the soak when it is not.
const QUOTA_HEADROOM: f64 = 3.0;
/// Requests the flooder keeps in flight, each on a connection of its own:
/// one client, from one address, sending as fast as it can. Eight make
/// about a third more records a second than four; more only take CPU from
/// the normal load.
const FLOOD_CONNECTIONS: usize = 8;
/// The bound on the normal load's p99 latency per request (first byte
/// written to last byte read) while the flooder runs, per app. Measured on
/// debug builds sharing two cores with other work: 105 to 140 ms for
/// orders, 280 to 350 ms for saas, whose sign-ups hash a password (Argon2,
/// 100 to 250 ms there). Three to four times that leaves room for a busier
/// machine; a flooder that held the others up (a store, a lock or a pool
/// taken by its keys) costs seconds, not milliseconds.
fn p99_bound(app: App) -> Duration {
    match app {
        App::Orders => Duration::from_millis(500),
        App::Saas => Duration::from_millis(1000),
    }
}
/// Requests whose latency is the scenario's own doing, left out of the
/// p99: the concurrent pair's first post sleeps 200 ms in its handler
/// (`delay_ms`), and the second waits for it.
const SLOW_BY_DESIGN: &[&str] = &["concurrent pair"];
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

/// The 503s the docs promise when a store cannot be asked, told apart from
/// other 5xx in the report; with the flooder held by its quota, none may
/// reach the normal load either.
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
    let sink = mail::Sink::start(root)?;
    let outcome = soak(
        &target.join("debug"),
        &dir,
        &run_id,
        (&redis_url, redis_addr),
        duration,
        &sink,
    );
    let _ = fs::remove_dir_all(&dir);
    // The servers are gone; their records need not wait for their TTL.
    let pattern = format!("autumn-soak:{run_id}:*");
    match redis::unlink_matching(redis_addr, &pattern) {
        Ok(n) => println!("==> soak: removed the run's {n} keys ({pattern}) from Redis"),
        Err(why) => println!(
            "==> soak: could not remove {pattern} from Redis ({why}); they expire within {}s",
            RECORD_TTL.as_secs()
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

    /// The guard whose counters the actuator keeps for the app's load.
    fn section(self) -> &'static str {
        match self {
            Self::Orders => "idempotency",
            Self::Saas => "submit_token",
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

/// Where the servers come from and what they share.
struct Launch<'a> {
    bin_dir: &'a Path,
    /// The working directory, which holds the SQLite files.
    dir: &'a Path,
    run_id: &'a str,
    redis_url: &'a str,
    /// The port of the SMTP server saas sends its soak's mail to.
    smtp_port: u16,
}

/// The load a server is started for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Calibration,
    Soak,
}

impl Launch<'_> {
    /// What `app`'s server for `stage` names its Redis keys and its
    /// database by: the app's name for the soak, so that no record of the
    /// calibration is met again.
    fn label(stage: Stage, app: App) -> String {
        match stage {
            Stage::Calibration => format!("calibration-{}", app.name()),
            Stage::Soak => app.name().to_owned(),
        }
    }

    /// The key prefix of `app`'s records in Redis, for `stage`.
    fn key_prefix(&self, stage: Stage, app: App) -> String {
        format!("autumn-soak:{}:{}", self.run_id, Self::label(stage, app))
    }

    /// Starts `app`, holding each caller to `quota` live records.
    fn start(&self, app: App, stage: Stage, quota: u64) -> Result<Server, String> {
        Server::start(self, app, stage, quota)
    }
}

impl Server {
    fn start(launch: &Launch<'_>, app: App, stage: Stage, quota: u64) -> Result<Self, String> {
        let binary = launch.bin_dir.join(app.name());
        let limit = BODY_LIMIT.to_string();
        let ttl = RECORD_TTL.as_secs().to_string();
        let mut command = Command::new(&binary);
        if app == App::Saas && stage == Stage::Soak {
            // Each sign-up's confirmation, to the soak's SMTP server; the
            // calibration's stay in files in the working directory.
            command
                .env("AUTUMN_MAIL__TRANSPORT", "smtp")
                .env("AUTUMN_MAIL__SMTP__HOST", "127.0.0.1")
                .env("AUTUMN_MAIL__SMTP__PORT", launch.smtp_port.to_string())
                .env("AUTUMN_MAIL__SMTP__TLS", "none");
        }
        let mut child = command
            .current_dir(launch.dir)
            .env("AUTUMN_SERVER__HOST", "127.0.0.1")
            .env("AUTUMN_SERVER__PORT", "0")
            .env("AUTUMN_IDEMPOTENCY__BACKEND", "redis")
            .env("AUTUMN_IDEMPOTENCY__REDIS__URL", launch.redis_url)
            .env(
                "AUTUMN_IDEMPOTENCY__REDIS__KEY_PREFIX",
                launch.key_prefix(stage, app),
            )
            .env("AUTUMN_IDEMPOTENCY__TTL_SECS", &ttl)
            .env("AUTUMN_SECURITY__SUBMIT_TOKEN__TTL_SECS", &ttl)
            // `max_bytes` stays at its default (64 MiB), far above what
            // the quota's small records weigh: the count is under test.
            .env("AUTUMN_IDEMPOTENCY__QUOTA__MAX_RECORDS", quota.to_string())
            // Every load thread connects from 127.0.0.1 and names a client
            // address of its own in X-Forwarded-For: a caller of its own
            // to the quota.
            .env("AUTUMN_SERVER__TRUSTED_PROXIES", r#"["127.0.0.1"]"#)
            // saas's sign-up rule (20 accounts an hour per address) would
            // refuse a worker's 21st sign-up; the soak is about the guards,
            // so each worker gets room for its whole run.
            .env("AUTUMN_RATE_LIMIT__RULES__SIGNUP__LIMIT", "1000000")
            .env("AUTUMN_RATE_LIMIT__RULES__SIGNUP__WINDOW_SECS", "3600")
            // The soak reads the counters on the app's one port.
            .env("AUTUMN_ACTUATOR__METRICS_ON_APP_PORT", "true")
            .env("AUTUMN_IDEMPOTENCY__MAX_BODY_BYTES", &limit)
            .env("AUTUMN_SECURITY__SUBMIT_TOKEN__MAX_FORM_BYTES", &limit)
            .env(
                "AUTUMN_DATABASE__URL",
                format!(
                    "sqlite://{}",
                    launch
                        .dir
                        .join(format!("{}.db", Launch::label(stage, app)))
                        .display()
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
    /// How long each answer took, but for [`SLOW_BY_DESIGN`] requests.
    latencies: Vec<Duration>,
    /// When each first-time answer that left a record (or a submitted
    /// token) in the store arrived: what the caller's quota counts. In
    /// order for one thread; merged ones are only counted.
    recorded: Vec<Instant>,
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
        self.latencies.extend(other.latencies);
        self.recorded.extend(other.recorded);
    }

    /// Answers with `status`.
    fn count(&self, status: u16) -> u64 {
        self.statuses.get(&status).copied().unwrap_or(0)
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
        if !SLOW_BY_DESIGN.contains(&kind) {
            self.latencies.push(response.elapsed);
        }
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
            self.recorded_run();
        }
    }

    /// A run behind the layer that left its record (or its token) in the
    /// store: a miss to the layer, a live record to the caller's quota.
    fn recorded_run(&mut self) {
        self.guarded_runs += 1;
        self.recorded.push(Instant::now());
    }
}

/// The `p`th percentile of `samples` (nearest rank); `None` when empty.
fn percentile(samples: &[Duration], p: f64) -> Option<Duration> {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}

/// The most of `times` (in order) within any span shorter than `window`:
/// the most records one caller held at once, when each lives `window`.
fn most_in_window(times: &[Instant], window: Duration) -> usize {
    let mut first = 0;
    let mut most = 0;
    for (last, at) in times.iter().enumerate() {
        while at.duration_since(times[first]) >= window {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most
}

/// Who sends a request, for the client address it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// A normal load thread, by index.
    Worker(usize),
    Flooder,
}

/// The client address `caller` of `app` names in `X-Forwarded-For`, which
/// the apps (trusting 127.0.0.1 as a proxy) count it as: 10.0.1.x for
/// orders, 10.0.2.x for saas; workers from .1 up, the flooder .250.
fn client_address(app: App, caller: Caller) -> String {
    let network = match app {
        App::Orders => 1,
        App::Saas => 2,
    };
    let host = match caller {
        Caller::Worker(index) => index + 1,
        Caller::Flooder => 250,
    };
    format!("10.0.{network}.{host}")
}

/// The workers' addresses stay below the flooder's.
const _: () = assert!(WORKERS_PER_APP < 249);

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
    /// Load thread `index` on `app`, at `addr`, from its own client address.
    fn new(run_id: &str, app: App, index: usize, addr: SocketAddr) -> Self {
        let client = client_address(app, Caller::Worker(index));
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
            a: Connection::new(addr).with_header("x-forwarded-for", &client),
            b: Connection::new(addr).with_header("x-forwarded-for", &client),
        }
    }
}

/// One app's soak.
struct AppRun {
    app: App,
    /// The live records each caller was held to.
    quota: u64,
    load: AppLoad,
}

/// When the load's phases end, counted from its start.
struct Phases {
    warmup: Duration,
    /// Where the RSS window starts.
    window_start: Duration,
    elapsed: Duration,
}

/// What an app holds once the load stopped.
struct Ending {
    /// Rows per key.
    rows: BTreeMap<String, u32>,
    /// The actuator's metrics document (or why it could not be read).
    metrics: String,
    /// Its records or tokens in Redis.
    live: Result<LiveRecords, String>,
}

/// The records (orders) or tokens (saas) an app's store held when the
/// load stopped, and how many the load explains.
#[derive(Debug)]
struct LiveRecords {
    count: u64,
    /// What the normal load left within the last [`RECORD_TTL`] (anything
    /// older has expired).
    recent: u64,
    /// `recent`, plus the flooder's quota, plus [`CLOCK_SLACK`].
    bound: u64,
}

fn soak(
    bin_dir: &Path,
    dir: &Path,
    run_id: &str,
    (redis_url, redis_addr): (&str, SocketAddr),
    duration: Duration,
    sink: &mail::Sink,
) -> Result<(), String> {
    let launch = Launch {
        bin_dir,
        dir,
        run_id,
        redis_url,
        smtp_port: sink.port,
    };
    println!(
        "==> soak: per app {WORKERS_PER_APP} load threads and a flooder ({FLOOD_CONNECTIONS} \
         requests in flight), each a caller of its own (X-Forwarded-For {} and up, {}); \
         records and tokens live {}s",
        client_address(App::Orders, Caller::Worker(0)),
        client_address(App::Orders, Caller::Flooder),
        RECORD_TTL.as_secs()
    );
    let quotas = calibrate(&launch)?;
    let warmup = (duration / 4).min(Duration::from_secs(30));
    let window = (duration / 2).min(Duration::from_secs(60));
    let servers = [
        launch.start(App::Orders, Stage::Soak, quotas[0])?,
        launch.start(App::Saas, Stage::Soak, quotas[1])?,
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
    let (loads, elapsed) = run_load(&servers, run_id, duration)?;

    let phases = Phases {
        warmup,
        window_start: duration.saturating_sub(window),
        elapsed,
    };
    let mut failures = Vec::new();
    let mut table = String::new();
    for ((server, load), quota) in servers.iter().zip(loads).zip(quotas) {
        let run = AppRun {
            app: server.app,
            quota,
            load,
        };
        // First, while what the load left is fresh.
        let live = live_records(redis_addr, &launch.key_prefix(Stage::Soak, run.app), &run);
        let ending = Ending {
            rows: stored_rows(server)?,
            metrics: Connection::new(server.addr)
                .send("GET /actuator/metrics HTTP/1.1", b"")
                .map(|r| r.body)
                .unwrap_or_else(|e| format!("({e})")),
            live,
        };
        report(&run, &ending, &phases, &mut table, &mut failures);
        if run.app == App::Saas {
            // The sign-ups' confirmations: once the queue is empty nothing
            // more can be sent, so the counts are final.
            match mail::wait_for_drain(server.addr) {
                Ok(waited) => {
                    let _ = writeln!(
                        table,
                        "  mail queue empty {:.1}s after the load",
                        waited.as_secs_f64()
                    );
                    mail::check(&ending.rows, &sink.accepted(), &mut table, &mut failures);
                }
                Err(why) => failures.push(why),
            }
        }
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

/// Runs the soak's load for [`CALIBRATION`] on servers of its own, which
/// hold no caller to a quota, and answers each app's quota: what its
/// busiest normal load thread makes in a [`RECORD_TTL`], times
/// [`QUOTA_HEADROOM`]. Fails when the flooder could not fill that quota
/// within a TTL: then nothing would hold it back.
fn calibrate(launch: &Launch<'_>) -> Result<[u64; 2], String> {
    let unlimited = 10_000_000;
    let servers = [
        launch.start(App::Orders, Stage::Calibration, unlimited)?,
        launch.start(App::Saas, Stage::Calibration, unlimited)?,
    ];
    println!(
        "==> soak: calibrating for {}s: the same load, no quota",
        CALIBRATION.as_secs()
    );
    let (loads, elapsed) = run_load(&servers, launch.run_id, CALIBRATION)?;
    let mut quotas = [0; 2];
    for ((server, load), quota) in servers.iter().zip(&loads).zip(&mut quotas) {
        let secs = elapsed.as_secs_f64();
        // Shorter than a TTL, the calibration's peak is the thread's count.
        let normal_rate = load.normal_peak as f64 / secs;
        let flood_rate = load.flood.recorded.len() as f64 / secs;
        *quota = quota_for(normal_rate);
        let ttl = RECORD_TTL.as_secs_f64();
        println!(
            "    {}: busiest normal thread {normal_rate:.1} records/s, flooder {flood_rate:.1}/s; \
             quota {quota} = {QUOTA_HEADROOM} x {normal_rate:.1}/s x {ttl:.0}s \
             (unheld, the flooder would hold {:.0})",
            server.app.name(),
            flood_rate * ttl
        );
        if flood_rate * ttl <= *quota as f64 {
            return Err(format!(
                "calibration: the {} flooder made {flood_rate:.1} records/s, too few to fill a \
                 quota of {quota} within {ttl:.0}s; nothing would hold it back",
                server.app.name()
            ));
        }
    }
    Ok(quotas)
}

/// The quota for a busiest normal load thread making `rate` records a
/// second: what it holds over a [`RECORD_TTL`], times [`QUOTA_HEADROOM`].
fn quota_for(rate: f64) -> u64 {
    ((rate * RECORD_TTL.as_secs_f64() * QUOTA_HEADROOM).ceil() as u64).max(1)
}

/// One app's share of a load.
#[derive(Default)]
struct AppLoad {
    /// The normal load threads' answers, merged.
    normal: Tally,
    /// The most records one normal load thread held live at once (by when
    /// its answers arrived).
    normal_peak: usize,
    /// The flooder's answers.
    flood: Tally,
    /// The most records the flooder held live at once.
    flood_peak: usize,
    /// RSS samples: time since the load started, KiB.
    rss: Vec<(Duration, u64)>,
}

/// Runs the normal load and the flooders on `servers` for `duration`,
/// sampling each server's RSS; fails when a server died. Answers each
/// app's load, and how long it ran.
fn run_load(
    servers: &[Server; 2],
    run_id: &str,
    duration: Duration,
) -> Result<([AppLoad; 2], Duration), String> {
    let started = Instant::now();
    let deadline = started + duration;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flooded = Arc::new(AtomicU64::new(0));
    let workers = spawn_workers(servers, run_id, deadline, &stop, &sent);
    let flooders = spawn_flooders(servers, run_id, deadline, &stop, &flooded);
    let (rss, died) = sample_rss(servers, started, deadline, &sent, &flooded);
    if died.is_some() {
        stop.store(true, Ordering::Relaxed);
    }
    let mut loads = join(workers, flooders)?;
    let elapsed = started.elapsed();
    if let Some(app) = died {
        let server = servers.iter().find(|s| s.app == app);
        return Err(format!(
            "{} exited during the soak; its log:\n{}",
            app.name(),
            server.map(Server::log_tail).unwrap_or_default()
        ));
    }
    for ((server, load), mut samples) in servers.iter().zip(&mut loads).zip(rss) {
        samples.extend(server.rss_kib().map(|kib| (elapsed, kib)));
        load.rss = samples;
    }
    Ok((loads, elapsed))
}

/// The normal load: [`WORKERS_PER_APP`] threads per app, each running one
/// scenario after another until `deadline`, answering its tally.
fn spawn_workers(
    servers: &[Server; 2],
    run_id: &str,
    deadline: Instant,
    stop: &Arc<AtomicBool>,
    sent: &Arc<AtomicU64>,
) -> Vec<thread::JoinHandle<Tally>> {
    let mut workers = Vec::new();
    for server in servers {
        for index in 0..WORKERS_PER_APP {
            let mut worker = Worker::new(run_id, server.app, index, server.addr);
            let app = server.app;
            let stop = Arc::clone(stop);
            let sent = Arc::clone(sent);
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
    workers
}

/// One [`flood`] thread per app.
fn spawn_flooders(
    servers: &[Server; 2],
    run_id: &str,
    deadline: Instant,
    stop: &Arc<AtomicBool>,
    flooded: &Arc<AtomicU64>,
) -> Vec<thread::JoinHandle<Tally>> {
    servers
        .iter()
        .map(|server| {
            let (app, addr, run_id) = (server.app, server.addr, run_id.to_owned());
            let stop = Arc::clone(stop);
            let flooded = Arc::clone(flooded);
            thread::spawn(move || flood(app, addr, &run_id, deadline, &stop, &flooded))
        })
        .collect()
}

/// Each server's RSS once a second until `deadline`, with a progress line
/// every ten; stops early, naming the app, when a server died.
fn sample_rss(
    servers: &[Server; 2],
    started: Instant,
    deadline: Instant,
    sent: &AtomicU64,
    flooded: &AtomicU64,
) -> ([Vec<(Duration, u64)>; 2], Option<App>) {
    let mut rss: [Vec<(Duration, u64)>; 2] = [Vec::new(), Vec::new()];
    let mut next_report = Duration::from_secs(10);
    while Instant::now() < deadline {
        let at = started.elapsed();
        for (server, samples) in servers.iter().zip(rss.iter_mut()) {
            match server.rss_kib() {
                Some(kib) => samples.push((at, kib)),
                None => return (rss, Some(server.app)),
            }
        }
        if at >= next_report {
            println!(
                "    {:>4}s  {} scenarios, {} flood requests, RSS orders {} MiB, saas {} MiB",
                at.as_secs(),
                sent.load(Ordering::Relaxed),
                flooded.load(Ordering::Relaxed),
                mib(rss[0].last().map_or(0, |s| s.1)),
                mib(rss[1].last().map_or(0, |s| s.1)),
            );
            next_report += Duration::from_secs(10);
        }
        thread::sleep(
            Duration::from_secs(1).min(deadline.saturating_duration_since(Instant::now())),
        );
    }
    (rss, None)
}

/// Each app's tallies, with the most records one of its normal threads
/// held at once (each thread is a caller of its own: its peak, not the
/// sum) and the flooder's.
fn join(
    workers: Vec<thread::JoinHandle<Tally>>,
    flooders: Vec<thread::JoinHandle<Tally>>,
) -> Result<[AppLoad; 2], String> {
    let mut loads: [AppLoad; 2] = Default::default();
    for (i, worker) in workers.into_iter().enumerate() {
        let tally = worker
            .join()
            .map_err(|_| "a load thread panicked".to_owned())?;
        let load = &mut loads[i / WORKERS_PER_APP];
        load.normal_peak = load
            .normal_peak
            .max(most_in_window(&tally.recorded, RECORD_TTL));
        load.normal.merge(tally);
    }
    for (load, flooder) in loads.iter_mut().zip(flooders) {
        load.flood = flooder
            .join()
            .map_err(|_| "a flooder thread panicked".to_owned())?;
        load.flood_peak = most_in_window(&load.flood.recorded, RECORD_TTL);
    }
    Ok(loads)
}

/// Records the live-record count may exceed its bound by: Redis expires
/// records by its own clock, this process tells their age by its own, so a
/// record answered right at a TTL's edge may be counted on one side and
/// live on the other. The normal load makes a few dozen a second.
const CLOCK_SLACK: u64 = 8;

/// Counts the records (orders) or tokens (saas) `run`'s app holds in Redis
/// under `key_prefix` now, against what its load explains: the flooder's
/// never exceed its quota (a record's count in the quota is settled after
/// the record is written, so it ends later), and the normal load's are
/// those it was answered within the last [`RECORD_TTL`].
fn live_records(redis: SocketAddr, key_prefix: &str, run: &AppRun) -> Result<LiveRecords, String> {
    let kind = match run.app {
        App::Orders => "idem",
        App::Saas => "tok",
    };
    let counted_at = Instant::now();
    let count = redis::count_matching(redis, &format!("{key_prefix}:{kind}:v1:*"))?;
    // A record answered more than RECORD_TTL before the count was written
    // before its answer arrived, so it has expired.
    let recent = run
        .load
        .normal
        .recorded
        .iter()
        .filter(|at| counted_at.duration_since(**at) < RECORD_TTL)
        .count() as u64;
    Ok(LiveRecords {
        count,
        recent,
        bound: recent + run.quota + CLOCK_SLACK,
    })
}

/// Counter `name` of `section` in the actuator's metrics document.
fn counter(metrics: &str, section: &str, name: &str) -> Option<u64> {
    let start = metrics.find(&format!("\"{section}\":{{"))?;
    let section = &metrics[start..];
    let section = &section[..section.find('}')?];
    let field = format!("\"{name}\":");
    let at = section.find(&field)? + field.len();
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
fn report(
    run: &AppRun,
    ending: &Ending,
    phases: &Phases,
    table: &mut String,
    failures: &mut Vec<String>,
) {
    let name = run.app.name();
    list_requests(name, &run.load.normal, phases.elapsed, table);
    check_runs(run, ending, table, failures);
    check_answers(name, &run.load.normal, table, failures);
    check_latency(run.app, &run.load.normal, table, failures);
    check_flood(run, &ending.metrics, phases.elapsed, table, failures);
    check_live_records(name, &ending.live, table, failures);
    check_rss(name, &run.load.rss, phases, table, failures);
    for (who, tally) in [("", &run.load.normal), ("the flooder's ", &run.load.flood)] {
        if !tally.problems.is_empty() {
            let _ = writeln!(table, "  {who}first problems:");
            for problem in &tally.problems {
                let _ = writeln!(table, "    {problem}");
            }
        }
    }
}

/// The normal load's requests by kind and by status.
fn list_requests(name: &str, tally: &Tally, elapsed: Duration, table: &mut String) {
    let total: u64 = tally.kinds.values().sum();
    let _ = writeln!(
        table,
        "\n== {name}: {total} requests from the normal load in {:.0}s ({:.0}/s)",
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
}

/// Double runs: per key, the rows stored against the first-time answers
/// (the normal load's and the flooder's), and the handler runs the layer
/// counted against those the answers say.
fn check_runs(run: &AppRun, ending: &Ending, table: &mut String, failures: &mut Vec<String>) {
    let name = run.app.name();
    let mut answers: BTreeMap<&str, u32> = BTreeMap::new();
    for tally in [&run.load.normal, &run.load.flood] {
        for (key, n) in &tally.first_answers {
            *answers.entry(key).or_default() += n;
        }
    }
    let mut keys: Vec<&str> = answers
        .keys()
        .copied()
        .chain(ending.rows.keys().map(String::as_str))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut doubles = Vec::new();
    for key in &keys {
        let answered = answers.get(key).copied().unwrap_or(0);
        let stored = ending.rows.get(*key).copied().unwrap_or(0);
        if answered > 1 || stored > 1 || answered != stored {
            doubles.push(format!(
                "{key}: {stored} stored, {answered} first-time answers"
            ));
        }
    }
    let _ = writeln!(
        table,
        "  handler runs (rows stored): {}, distinct keys: {}, first-time answers: {}",
        ending.rows.values().sum::<u32>(),
        keys.len(),
        answers.values().sum::<u32>()
    );
    let _ = writeln!(table, "  metrics: {}", ending.metrics.trim());
    let section = run.app.section();
    let misses = counter(&ending.metrics, section, "misses");
    let guarded = run.load.normal.guarded_runs + run.load.flood.guarded_runs;
    let _ = writeln!(
        table,
        "  runs behind the layer: {} by the {section} misses counter, {guarded} by the answers",
        misses.map_or("-".to_owned(), |n| n.to_string()),
    );
    if misses != Some(guarded) {
        failures.push(format!(
            "{name}: the {section} layer counted {} handler runs, the answers say {guarded}",
            misses.map_or("(unreadable)".to_owned(), |n| n.to_string()),
        ));
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
    if run.load.normal.first_answers.is_empty() {
        failures.push(format!(
            "{name}: no request ran the handler; the load never got through"
        ));
    }
}

/// The normal load's answers: no 5xx, no 429, nothing unexpected. A
/// documented 503 fails too: the flooder must fill its own quota, not the
/// store the others share.
fn check_answers(name: &str, tally: &Tally, table: &mut String, failures: &mut Vec<String>) {
    let too_many = tally.count(429);
    let _ = writeln!(
        table,
        "  5xx: {} documented 503, {} other; 429: {too_many}; unexpected answers: {}",
        tally.documented_503, tally.other_5xx, tally.unexpected
    );
    if tally.other_5xx > 0 {
        failures.push(format!(
            "{name}: {} 5xx answers besides the documented 503s",
            tally.other_5xx
        ));
    }
    if tally.documented_503 > 0 {
        failures.push(format!(
            "{name}: {} documented 503s reached the normal load",
            tally.documented_503
        ));
    }
    if too_many > 0 {
        failures.push(format!("{name}: the normal load got {too_many} 429s"));
    }
    if tally.unexpected > 0 {
        failures.push(format!("{name}: {} unexpected answers", tally.unexpected));
    }
}

/// The normal load's latency per request against [`p99_bound`].
fn check_latency(app: App, tally: &Tally, table: &mut String, failures: &mut Vec<String>) {
    let ms = |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{:.1}", millis(d)));
    let bound = p99_bound(app);
    let p99 = percentile(&tally.latencies, 99.0);
    let _ = writeln!(
        table,
        "  normal load latency per request (ms): p50 {}, p99 {}, max {} (bound: p99 {})",
        ms(percentile(&tally.latencies, 50.0)),
        ms(p99),
        ms(tally.latencies.iter().max().copied()),
        ms(Some(bound))
    );
    if let Some(p99) = p99.filter(|p99| *p99 > bound) {
        failures.push(format!(
            "{}: the normal load's p99 latency is {:.0} ms, above {} ms",
            app.name(),
            millis(p99),
            bound.as_millis()
        ));
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The first runs a caller's quota lets through in `elapsed`: the whole
/// quota in each [`RECORD_TTL`], as records expire, and once more for a
/// run that does not end on a TTL's end.
fn quota_allows(quota: u64, elapsed: Duration) -> u64 {
    let ttls = elapsed.as_secs_f64() / RECORD_TTL.as_secs_f64();
    (quota as f64 * (ttls + 1.0)) as u64
}

/// The flooder against its quota: refused, and as many refusals as the
/// layer counted; no more first runs than the quota lets through; nothing
/// but first runs and refusals. With the normal load's use of its own
/// quota beside it, for the headroom.
fn check_flood(
    run: &AppRun,
    metrics: &str,
    elapsed: Duration,
    table: &mut String,
    failures: &mut Vec<String>,
) {
    let name = run.app.name();
    let flood = &run.load.flood;
    let secs = elapsed.as_secs_f64().max(1.0);
    let requests = flood.kinds.get("flood").copied().unwrap_or(0);
    let fresh = flood.recorded.len() as u64;
    let refused = flood.count(429);
    let allowed = quota_allows(run.quota, elapsed);
    // Peaks are by when answers arrived, a little after their counts in
    // the quota started: a caller at its quota shows a few over it.
    let ttl = RECORD_TTL.as_secs();
    let _ = writeln!(
        table,
        "  flooder ({}): {requests} requests ({:.0}/s), {fresh} first runs ({:.1}/s, at most \
         {allowed} allowed), {refused} refused with 429; most answered within {ttl}s: {} \
         (quota {})",
        client_address(run.app, Caller::Flooder),
        requests as f64 / secs,
        fresh as f64 / secs,
        run.load.flood_peak,
        run.quota
    );
    let _ = writeln!(
        table,
        "  normal load threads: {:.1} records/s each; most answered to one thread within \
         {ttl}s: {} (quota {})",
        run.load.normal.recorded.len() as f64 / secs / WORKERS_PER_APP as f64,
        run.load.normal_peak,
        run.quota
    );
    let section = run.app.section();
    let counted = counter(metrics, section, "quota_refusals");
    let _ = writeln!(
        table,
        "  quota refusals: {} by the {section} counter, {refused} by the flooder's answers",
        counted.map_or("-".to_owned(), |n| n.to_string())
    );
    if refused == 0 {
        failures.push(format!(
            "{name}: the flooder was never refused; its quota did not hold it"
        ));
    }
    if counted != Some(refused) {
        failures.push(format!(
            "{name}: the {section} layer counted {} quota refusals, the flooder got {refused}",
            counted.map_or("(unreadable)".to_owned(), |n| n.to_string())
        ));
    }
    if fresh > allowed {
        failures.push(format!(
            "{name}: the flooder got {fresh} first runs, more than the {allowed} its quota allows"
        ));
    }
    let other = flood.unexpected + flood.other_5xx + flood.documented_503;
    if other > 0 {
        failures.push(format!(
            "{name}: the flooder got {other} answers that are neither a first run nor a quota refusal"
        ));
    }
}

/// The records or tokens left in Redis against what the load explains: a
/// flooder that got past its quota leaves more.
fn check_live_records(
    name: &str,
    live: &Result<LiveRecords, String>,
    table: &mut String,
    failures: &mut Vec<String>,
) {
    let live = match live {
        Ok(live) => live,
        Err(why) => {
            failures.push(format!(
                "{name}: could not count the records in Redis: {why}"
            ));
            return;
        }
    };
    let _ = writeln!(
        table,
        "  Redis: {} live records at the end (bound {}: the normal load's last {}s, {}, \
         plus the flooder's quota and {CLOCK_SLACK})",
        live.count,
        live.bound,
        RECORD_TTL.as_secs(),
        live.recent
    );
    if live.count > live.bound {
        failures.push(format!(
            "{name}: Redis holds {} live records, more than the {} the load explains",
            live.count, live.bound
        ));
    }
    // Nothing found although the load just left records: the pattern
    // names no record, and the check above proves nothing.
    if live.count == 0 && live.recent > 0 {
        failures.push(format!(
            "{name}: no records found in Redis, though the normal load left {}",
            live.recent
        ));
    }
}

/// RSS: the sample at the end of the warm-up against the last window.
fn check_rss(
    name: &str,
    rss: &[(Duration, u64)],
    phases: &Phases,
    table: &mut String,
    failures: &mut Vec<String>,
) {
    let baseline = rss.iter().find(|(at, _)| *at >= phases.warmup).map(|s| s.1);
    let window_max = rss
        .iter()
        .filter(|(at, _)| *at >= phases.window_start)
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

// ---- the flooder --------------------------------------------------------

/// One client of `app` creating new keys (orders) or submitting new tokens
/// (saas) as fast as it can until `deadline`, from an address of its own,
/// with a request in flight on each of [`FLOOD_CONNECTIONS`] connections.
/// Its quota should hold it: every answer is a first run or a quota
/// refusal (429); anything else is unexpected.
fn flood(
    app: App,
    addr: SocketAddr,
    run_id: &str,
    deadline: Instant,
    stop: &AtomicBool,
    sent: &AtomicU64,
) -> Tally {
    let client = client_address(app, Caller::Flooder);
    let mut connections: Vec<Connection> = (0..FLOOD_CONNECTIONS)
        .map(|_| Connection::new(addr).with_header("x-forwarded-for", &client))
        .collect();
    let mut tally = Tally::default();
    let mut n = 0u64;
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        // Every connection's request written before any answer is read.
        let mut written = Vec::with_capacity(FLOOD_CONNECTIONS);
        for connection in &mut connections {
            let (head, body, item) = flood_request(app, run_id, n);
            n += 1;
            written.push((item, connection.write(&head, &body)));
        }
        for (connection, (item, write)) in connections.iter_mut().zip(written) {
            let answer = write.and_then(|()| connection.read());
            judge_flood(&mut tally, app, &item, answer);
        }
        sent.fetch_add(FLOOD_CONNECTIONS as u64, Ordering::Relaxed);
    }
    tally
}

/// The flooder's `n`th request: its head, its body, and the item its row
/// is stored under (orders). Orders get a new key on a valid order; saas
/// gets a made-up token on the log-out form, which needs no session (none
/// is sent), stores no row and answers 303 at once: the token's record is
/// all it leaves behind.
fn flood_request(app: App, run_id: &str, n: u64) -> (String, Vec<u8>, String) {
    match app {
        App::Orders => {
            let item = format!("{run_id}-flood-{n}");
            let body = order(&item, 1, None);
            (keyed(&format!("soak-{item}")), body, item)
        }
        App::Saas => (
            LOGOUT_POST.to_owned(),
            format!("_submit_token=flood-{run_id}-{n}").into_bytes(),
            String::new(),
        ),
    }
}

const LOGOUT_POST: &str =
    "POST /logout HTTP/1.1\r\ncontent-type: application/x-www-form-urlencoded";

/// Counts one of the flooder's answers: a first run (201 for orders, 303
/// for saas), or the quota's 429.
fn judge_flood(tally: &mut Tally, app: App, item: &str, answer: Result<Response, String>) {
    let (fresh, refused): (fn(&Response) -> bool, _) = match app {
        App::Orders => (fresh_201, problem(429, "idempotency_quota_exceeded")),
        App::Saas => (fresh_303, problem(429, "submit_token_quota_exceeded")),
    };
    let Some(response) = tally.judge("flood", answer, |r| fresh(r) || refused(r)) else {
        return;
    };
    match app {
        _ if response.status == 429 => {}
        App::Orders => tally.first_answer(item, true),
        App::Saas => tally.recorded_run(),
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

    /// The counters of an orders app with `misses`, beside a flooder
    /// refused five times.
    fn metrics(misses: u64) -> String {
        metrics_refusing(misses, 5)
    }

    fn metrics_refusing(misses: u64, refusals: u64) -> String {
        format!(
            r#"{{"idempotency":{{"conflicts":0,"hits":3,"misses":{misses},"quota_refusals":{refusals}}},"submit_token":{{"conflicts":0,"hits":0,"misses":0,"quota_refusals":0}}}}"#
        )
    }

    /// The quota of the runs below: over 6 s, it lets 12 first runs by.
    const QUOTA: u64 = 10;

    /// A flooder whose five requests were all refused.
    fn refused_flooder() -> Tally {
        let mut tally = Tally::default();
        tally.kinds.insert("flood", 5);
        tally.statuses.insert(429, 5);
        tally
    }

    fn run(normal: Tally, flood: Tally, rss: Vec<(Duration, u64)>) -> AppRun {
        AppRun {
            app: App::Orders,
            quota: QUOTA,
            load: AppLoad {
                normal,
                normal_peak: 2,
                flood,
                flood_peak: 0,
                rss,
            },
        }
    }

    /// `count` records in Redis at the end, where the normal load left two
    /// within the TTL.
    fn live(count: u64) -> Result<LiveRecords, String> {
        Ok(LiveRecords {
            count,
            recent: 2,
            bound: 2 + QUOTA + CLOCK_SLACK,
        })
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

    /// What [`report`] finds wrong with `run` over 6 s, the warm-up ending
    /// at 2 s and the RSS window starting at 4 s.
    fn report_failures(
        run: &AppRun,
        rows: &BTreeMap<String, u32>,
        metrics: &str,
        live: Result<LiveRecords, String>,
    ) -> Vec<String> {
        let ending = Ending {
            rows: rows.clone(),
            metrics: metrics.to_owned(),
            live,
        };
        let phases = Phases {
            warmup: 2 * SECOND,
            window_start: 4 * SECOND,
            elapsed: 6 * SECOND,
        };
        let mut table = String::new();
        let mut failures = Vec::new();
        report(run, &ending, &phases, &mut table, &mut failures);
        failures
    }

    /// What [`report`] finds wrong with the normal load's `tally`, beside
    /// a flooder held by its quota.
    fn failures(
        tally: Tally,
        rows: &BTreeMap<String, u32>,
        rss: &[(Duration, u64)],
        metrics: &str,
    ) -> Vec<String> {
        let run = run(tally, refused_flooder(), rss.to_vec());
        report_failures(&run, rows, metrics, live(2))
    }

    const FLAT: &[u64] = &[10_000, 18_000, 19_000, 19_100, 19_200, 19_000, 19_300];

    #[test]
    fn clean_figures_pass() {
        let failures = failures(
            clean_tally(),
            &rows(&[("a", 1), ("b", 1)]),
            &rss(FLAT),
            &metrics(2),
        );
        assert!(failures.is_empty(), "{failures:?}");
    }

    #[test]
    fn a_key_stored_twice_fails() {
        let failures = failures(
            clean_tally(),
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
        let failures = failures(tally, &rows(&[("a", 1), ("b", 1)]), &rss(FLAT), &metrics(3));
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("ran more than once"));
    }

    #[test]
    fn a_row_nobody_was_answered_for_fails() {
        let failures = failures(
            clean_tally(),
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
            clean_tally(),
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
            clean_tally(),
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
            elapsed: Duration::ZERO,
        })
    }

    #[test]
    fn every_5xx_stops_the_scenario_and_fails() {
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

        let failures = failures(tally, &BTreeMap::new(), &rss(FLAT), &metrics(0));
        assert!(
            failures
                .iter()
                .any(|f| f.contains("2 5xx answers besides the documented 503s")),
            "{failures:?}"
        );
        // With the flooder held by its quota, the store never has to
        // refuse the others: a documented 503 fails the soak too.
        assert!(
            failures
                .iter()
                .any(|f| f.contains("2 documented 503s reached the normal load")),
            "{failures:?}"
        );
    }

    #[test]
    fn a_429_for_the_normal_load_fails() {
        let mut tally = clean_tally();
        let refused = answer(429, r#"{"code":"idempotency_quota_exceeded"}"#);
        assert!(tally.judge("first call", refused, fresh_201).is_none());
        let failures = failures(tally, &rows(&[("a", 1), ("b", 1)]), &rss(FLAT), &metrics(2));
        assert!(
            failures
                .iter()
                .any(|f| f.contains("the normal load got 1 429s")),
            "{failures:?}"
        );
    }

    #[test]
    fn a_p99_above_the_bound_fails() {
        let mut tally = clean_tally();
        // 98 quick answers and two slow ones: the 99th of 100 is slow.
        tally.latencies = [vec![Duration::from_millis(5); 98], vec![2 * SECOND; 2]].concat();
        let failures = failures(tally, &rows(&[("a", 1), ("b", 1)]), &rss(FLAT), &metrics(2));
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("p99 latency is 2000 ms, above 500 ms"));
    }

    #[test]
    fn a_flooder_never_refused_fails() {
        let mut flood = Tally::default();
        flood.kinds.insert("flood", 3);
        flood.statuses.insert(201, 3);
        let run = run(clean_tally(), flood, rss(FLAT));
        let failures = report_failures(
            &run,
            &rows(&[("a", 1), ("b", 1)]),
            &metrics_refusing(2, 0),
            live(2),
        );
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("the flooder was never refused"));
    }

    #[test]
    fn a_flooder_past_its_quota_fails() {
        // 13 first runs in 6 s, where a quota of 10 over a 30 s TTL lets 12.
        let mut flood = refused_flooder();
        for n in 0..13 {
            flood.first_answer(&format!("f{n}"), true);
        }
        flood.statuses.insert(201, 13);
        let stored: Vec<(String, u32)> = (0..13).map(|n| (format!("f{n}"), 1)).collect();
        let mut rows = rows(&[("a", 1), ("b", 1)]);
        rows.extend(stored);
        let run = run(clean_tally(), flood, rss(FLAT));
        let failures = report_failures(&run, &rows, &metrics(15), live(2));
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].contains("13 first runs, more than the 12 its quota allows"),
            "{failures:?}"
        );
    }

    #[test]
    fn refusals_the_layer_did_not_count_fail() {
        let run = run(clean_tally(), refused_flooder(), rss(FLAT));
        let failures = report_failures(
            &run,
            &rows(&[("a", 1), ("b", 1)]),
            &metrics_refusing(2, 4),
            live(2),
        );
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("counted 4 quota refusals, the flooder got 5"));
    }

    #[test]
    fn more_live_records_than_the_load_explains_fail() {
        let run = run(clean_tally(), refused_flooder(), rss(FLAT));
        let rows = rows(&[("a", 1), ("b", 1)]);
        let bound = 2 + QUOTA + CLOCK_SLACK;
        assert!(report_failures(&run, &rows, &metrics(2), live(bound)).is_empty());
        let failures = report_failures(&run, &rows, &metrics(2), live(bound + 1));
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("more than the"), "{failures:?}");
        // Nothing found at all: the pattern is wrong, not the store right.
        let failures = report_failures(&run, &rows, &metrics(2), live(0));
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("no records found"), "{failures:?}");
    }

    #[test]
    fn the_percentile_is_the_nearest_rank() {
        let ms = Duration::from_millis;
        let samples: Vec<Duration> = (1..=100).rev().map(ms).collect();
        assert_eq!(percentile(&samples, 99.0), Some(ms(99)));
        assert_eq!(percentile(&samples, 50.0), Some(ms(50)));
        assert_eq!(percentile(&samples, 100.0), Some(ms(100)));
        assert_eq!(percentile(&[ms(7)], 99.0), Some(ms(7)));
        assert_eq!(percentile(&[], 99.0), None);
    }

    #[test]
    fn most_in_window_is_what_one_window_holds() {
        let start = Instant::now();
        let at = |secs: &[u64]| -> Vec<Instant> {
            secs.iter().map(|s| start + SECOND * *s as u32).collect()
        };
        let window = 30 * SECOND;
        // 0, 1 and 2 end before 31; 2 and 31 are 29 s apart, 2 and 33 31.
        assert_eq!(most_in_window(&at(&[0, 1, 2, 31, 32, 33, 34]), window), 4);
        assert_eq!(most_in_window(&at(&[0, 10, 20, 29]), window), 4);
        assert_eq!(most_in_window(&at(&[0, 30, 60]), window), 1);
        assert_eq!(most_in_window(&[], window), 0);
    }

    #[test]
    fn each_caller_has_an_address_of_its_own() {
        let mut addresses = Vec::new();
        for app in [App::Orders, App::Saas] {
            for index in 0..WORKERS_PER_APP {
                addresses.push(client_address(app, Caller::Worker(index)));
            }
            addresses.push(client_address(app, Caller::Flooder));
        }
        for address in &addresses {
            let ip: std::net::Ipv4Addr = address.parse().expect("an IPv4 address");
            assert_eq!(ip.octets()[0], 10, "{address}");
        }
        let count = addresses.len();
        addresses.sort();
        addresses.dedup();
        assert_eq!(addresses.len(), count);
        assert_eq!(client_address(App::Orders, Caller::Worker(0)), "10.0.1.1");
        assert_eq!(client_address(App::Saas, Caller::Flooder), "10.0.2.250");
    }

    #[test]
    fn the_quota_follows_the_measured_rate() {
        // Ten records a second over a 30 s TTL, three times over.
        assert_eq!(quota_for(10.0), 900);
        assert_eq!(quota_for(0.0), 1);
        // A quota a TTL as records expire, and one more for the part-TTL.
        assert_eq!(quota_allows(100, 60 * SECOND), 300);
        assert_eq!(quota_allows(100, 45 * SECOND), 250);
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
    fn counters_are_read_per_section() {
        let doc = r#"{"idempotency":{"conflicts":1,"hits":2,"misses":30,"quota_refusals":4},"submit_token":{"conflicts":0,"hits":5,"misses":7,"quota_refusals":9}}"#;
        assert_eq!(counter(doc, "idempotency", "misses"), Some(30));
        assert_eq!(counter(doc, "submit_token", "misses"), Some(7));
        assert_eq!(counter(doc, "submit_token", "quota_refusals"), Some(9));
        assert_eq!(counter(doc, "idempotency", "store_full"), None);
        assert_eq!(
            counter("(connection refused)", "idempotency", "misses"),
            None
        );
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
