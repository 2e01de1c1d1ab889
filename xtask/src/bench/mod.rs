//! `cargo xtask bench`: the end-to-end benchmark (see `e2e.rs`);
//! `cargo xtask bench tls`, its HTTPS and HTTP/2 rows (the same, served
//! over TLS with a certificate made for the run, see `cert.rs`, HTTP/2
//! loaded by h2load, see `h2load.rs`); `cargo xtask bench sizing`, the same setup once per store, for the
//! sizing guide (see `sizing.rs`); `cargo xtask bench jobs`, one job
//! worker's throughput on PostgreSQL and SQLite; and `cargo xtask bench micro`, the
//! in-process one under `crates/autumn-web/benches/idempotency` (per-key
//! memory, store round trips, sessions).

mod cert;
mod e2e;
mod h2load;
mod server;
mod sizing;
mod wrk;

use std::path::Path;
use std::time::Instant;

use crate::on_path;

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let started = Instant::now();
    match args.first().map(String::as_str) {
        Some("micro") => micro(root)?,
        Some("sizing") => sizing::run(root, &e2e::Settings::parse(&args[1..])?)?,
        Some("tls") => e2e::run(root, &e2e::Settings::parse(&args[1..])?, e2e::Suite::Tls)?,
        Some("jobs") => jobs(root)?,
        _ => e2e::run(root, &e2e::Settings::parse(args)?, e2e::Suite::Http)?,
    }
    println!("==> bench done in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// One job worker's throughput on PostgreSQL and on SQLite: the release
/// `autumn-jobs` pinned to core 0 (the database runs where the kernel puts
/// it), no-op jobs, from the worker's start until every job is done.
fn jobs(root: &Path) -> Result<(), String> {
    let args = [
        "build",
        "--release",
        "-p",
        "autumn-bench",
        "--bin",
        "autumn-jobs",
    ]
    .map(str::to_owned);
    crate::cargo(root, &args, &[])?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from);
    let binary = target.join("release").join("autumn-jobs");
    for backend in ["postgres", "sqlite"] {
        let status = std::process::Command::new("taskset")
            .args(["-c", "0"])
            .arg(&binary)
            .arg(backend)
            .status()
            .map_err(|error| format!("cannot run {}: {error}", binary.display()))?;
        if !status.success() {
            return Err(format!("autumn-jobs {backend} failed ({status})"));
        }
    }
    Ok(())
}

fn micro(root: &Path) -> Result<(), String> {
    // With the store features, the bench also measures the Redis and
    // PostgreSQL stores (each skipped, with a line saying so, when its
    // service does not answer).
    let args = [
        "bench",
        "-p",
        "autumn-web",
        "--bench",
        "idempotency",
        "--features",
        "redis,postgres",
    ]
    .map(str::to_owned);
    crate::cargo(root, &args, &[])
}

/// wrk is installed from Debian's packages when missing; with `tls`, also
/// h2load (the HTTP/2 load generator) and openssl (for the certificate).
fn require_tools(tls: bool) -> Result<(), String> {
    if !on_path("wrk") {
        crate::services::install(&["wrk"], "wrk (the load generator)")?;
    }
    if tls && !on_path("h2load") {
        crate::services::install(&["nghttp2-client"], "h2load (the HTTP/2 load generator)")?;
    }
    if tls && !on_path("openssl") {
        crate::services::install(&["openssl"], "openssl (for the bench's certificate)")?;
    }
    Ok(())
}

/// The server's core and the load generator's, when this process may run
/// on at least two and `taskset` is there to pin them; `None` (with a line
/// saying the figures are less trustworthy) otherwise.
/// A run's id: `prefix` and the time, so the run's keys are its own.
fn run_id(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default()
    )
}

/// How long the records of a run live: longer than the run. The replay
/// rows replay one key recorded at the start; once it expired, the next
/// request ran the handler again and the other connections sending that key
/// got 409 while it ran (a 5-round run failed so with a TTL of 600 s). A
/// bound on the run: every round (and the warm-up) of every row, of
/// `seconds` each, with 10 s of starting and priming per row, and ten
/// minutes to spare; long enough, yet gone from a shared Redis soon after.
fn record_ttl_secs(settings: &e2e::Settings) -> u64 {
    let rows_per_round = e2e::ROW_COUNT as u64;
    let row = u64::from(settings.seconds) + 10;
    (u64::from(settings.rounds) + 1) * rows_per_round * row + 600
}

/// The environment every autumn-orders run shares: the `prod` profile
/// with the memory stores allowed, `backend` for the keys, records that
/// outlive the run (see [`record_ttl_secs`]), and a Redis key prefix of the
/// run's own.
fn autumn_env(
    run_id: &str,
    backend: &str,
    settings: &e2e::Settings,
) -> Vec<(&'static str, String)> {
    vec![
        ("AUTUMN_PROFILE", "prod".to_owned()),
        // Production refuses to start without one; fixed so that every
        // replica of a run opens the others' records.
        (
            "AUTUMN_SECURITY__SECRET_KEY",
            "bench-secret-key-0123456789abcdef0123456789".to_owned(),
        ),
        ("AUTUMN_IDEMPOTENCY__BACKEND", backend.to_owned()),
        (
            "AUTUMN_IDEMPOTENCY__ALLOW_MEMORY_IN_PRODUCTION",
            "true".to_owned(),
        ),
        (
            "AUTUMN_SESSION__ALLOW_MEMORY_IN_PRODUCTION",
            "true".to_owned(),
        ),
        (
            "AUTUMN_IDEMPOTENCY__TTL_SECS",
            record_ttl_secs(settings).to_string(),
        ),
        // Room for every first-time key of a run (3 rounds of 10 s at
        // 100k requests a second): a full store answers 503, which is right
        // for an app and no measurement for a bench.
        (
            "AUTUMN_IDEMPOTENCY__MEMORY__MAX_ENTRIES",
            "10000000".to_owned(),
        ),
        (
            "AUTUMN_IDEMPOTENCY__MEMORY__MAX_BYTES",
            (4_u64 << 30).to_string(),
        ),
        // The load comes from one address: the same room in its quota,
        // so the quota is counted on every first-time key (its cost is
        // measured) but never refuses one.
        (
            "AUTUMN_IDEMPOTENCY__QUOTA__MAX_RECORDS",
            "10000000".to_owned(),
        ),
        (
            "AUTUMN_IDEMPOTENCY__QUOTA__MAX_BYTES",
            (4_u64 << 30).to_string(),
        ),
        (
            "AUTUMN_IDEMPOTENCY__REDIS__KEY_PREFIX",
            format!("autumn-bench:{run_id}"),
        ),
        ("RUST_LOG", "info".to_owned()),
    ]
}

/// The cores the server and the load run on, when they can be pinned.
fn pinned_cores() -> (Option<usize>, Option<usize>) {
    cores().map_or((None, None), |(server, load)| (Some(server), Some(load)))
}

fn cores() -> Option<(usize, usize)> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if cores >= 2 && on_path("taskset") {
        Some((0, 1))
    } else {
        println!(
            "    not pinning: {cores} core(s), taskset {}; server and load share the CPU, so ratios are rougher",
            if on_path("taskset") {
                "found"
            } else {
                "missing"
            }
        );
        None
    }
}
