//! The services the tests need, on loopback: reachable, or started when they
//! are installed, or a warning that names what to do.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::on_path;

/// Whether an unreachable service fails `cargo xtask ci`: the store tests run
/// against real Redis and PostgreSQL, so a missing one is an error that says
/// what to install or start.
const REQUIRED: bool = true;

/// How long a service that was just started gets to accept connections.
const START_WAIT: Duration = Duration::from_secs(15);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

struct Service {
    name: &'static str,
    addr: SocketAddr,
    /// Starts the service; `Err` says why it could not be.
    start: fn() -> Result<(), String>,
    /// What to tell a developer whose machine lacks the service.
    hint: &'static str,
}

fn services() -> [Service; 2] {
    [
        Service {
            name: "Redis",
            addr: SocketAddr::from(([127, 0, 0, 1], 6379)),
            start: start_redis,
            hint: "install it (apt-get install redis-server) or start it: \
                   redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save \"\" --appendonly no",
        },
        Service {
            name: "PostgreSQL",
            addr: SocketAddr::from(([127, 0, 0, 1], 5432)),
            start: start_postgres,
            hint: "install it (apt-get install postgresql) or start it: \
                   pg_ctlcluster --skip-systemctl-redirect <version> main start",
        },
    ]
}

/// Makes sure every service answers; see [`REQUIRED`] for what happens when
/// one does not.
pub(crate) fn ensure() -> Result<(), String> {
    let started = Instant::now();
    println!("==> services");
    let mut waiting = Vec::new();
    let mut missing = Vec::new();
    for service in services() {
        if reachable(service.addr) {
            println!("    {} is up on {}", service.name, service.addr);
            continue;
        }
        println!(
            "    {} is not reachable on {}; starting it",
            service.name, service.addr
        );
        match (service.start)() {
            Ok(()) => waiting.push(service),
            Err(why) => missing.push((service, why)),
        }
    }
    let deadline = Instant::now() + START_WAIT;
    for service in waiting {
        if wait_for(service.addr, deadline) {
            println!("    {} is up on {}", service.name, service.addr);
        } else {
            let why = format!("started, but not answering after {}s", START_WAIT.as_secs());
            missing.push((service, why));
        }
    }
    for (service, why) in &missing {
        eprintln!(
            "warning: {} is not reachable on {} ({why}): {}",
            service.name, service.addr, service.hint
        );
    }
    println!(
        "==> services checked in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    if REQUIRED && !missing.is_empty() {
        let names: Vec<_> = missing.iter().map(|(s, _)| s.name).collect();
        return Err(format!("services not reachable: {}", names.join(", ")));
    }
    Ok(())
}

fn reachable(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).is_ok()
}

fn wait_for(addr: SocketAddr, deadline: Instant) -> bool {
    loop {
        if reachable(addr) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(250));
    }
}

/// Runs `program args`, returning its output as the error when it fails.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("could not run {program}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if text.is_empty() {
        text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    }
    Err(format!("{program} exited with {}: {text}", output.status))
}

fn start_redis() -> Result<(), String> {
    if !on_path("redis-server") {
        return Err("redis-server is not installed".into());
    }
    run(
        "redis-server",
        &[
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "-::1",
            "--port",
            "6379",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
    )
}

fn start_postgres() -> Result<(), String> {
    if !on_path("pg_ctlcluster") {
        return Err("pg_ctlcluster is not installed".into());
    }
    // One directory per installed major version; try the newest first.
    let mut versions: Vec<String> = fs::read_dir("/etc/postgresql")
        .map_err(|e| format!("no cluster in /etc/postgresql: {e}"))?
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join("main").is_dir())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    versions.sort_by_key(|v| std::cmp::Reverse(v.parse::<u32>().unwrap_or(0)));
    let mut last_error = String::from("no `main` cluster in /etc/postgresql");
    for version in versions {
        match run(
            "pg_ctlcluster",
            &["--skip-systemctl-redirect", &version, "main", "start"],
        ) {
            Ok(()) => return Ok(()),
            Err(why) => last_error = why,
        }
    }
    Err(last_error)
}
