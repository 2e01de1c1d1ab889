//! The services the tests need, on loopback: reachable, or started when they
//! are installed, or a warning that names what to do. Also the browser the
//! saas example's end-to-end tests drive: Debian's Chromium and ChromeDriver,
//! installed with apt-get when they are missing.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
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

/// Makes sure every service answers (see [`REQUIRED`] for what happens when
/// one does not), then that the browser for the end-to-end tests is there.
pub(crate) fn ensure() -> Result<(), String> {
    ensure_services()?;
    ensure_browser()
}

fn ensure_services() -> Result<(), String> {
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

/// The files the browser tests (examples/saas/tests/browser.rs) run.
const BROWSER_FILES: [&str; 2] = ["/usr/bin/chromium", "/usr/bin/chromedriver"];
/// The Debian packages that hold them.
const BROWSER_PACKAGES: [&str; 2] = ["chromium", "chromium-driver"];
const BROWSER_HINT: &str =
    "install them as root: apt-get update && apt-get install -y chromium chromium-driver";

/// Makes sure Chromium and ChromeDriver are installed, installing them with
/// apt-get (as root, after `apt-get update` when the package lists are empty
/// or stale) when they are not.
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
    install_browser().map_err(|why| {
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

fn install_browser() -> Result<(), String> {
    if !on_path("apt-get") {
        return Err("apt-get is not available on this machine".into());
    }
    if !is_root() {
        return Err("installing needs root, and this is not root".into());
    }
    let mut install = vec!["install", "-y"];
    install.extend(BROWSER_PACKAGES);
    if !apt_lists_present() {
        println!("    the apt package lists are empty: apt-get update");
        apt_get(&["update"])?;
        println!("    apt-get {}", install.join(" "));
        return apt_get(&install);
    }
    println!("    apt-get {}", install.join(" "));
    match apt_get(&install) {
        Ok(()) => Ok(()),
        Err(why) => {
            // Usually stale package lists (a version that is gone from the
            // mirror): refresh them and try once more.
            println!(
                "    that failed ({}); apt-get update, then again",
                last_line(&why)
            );
            apt_get(&["update"])?;
            println!("    apt-get {}", install.join(" "));
            apt_get(&install)
        }
    }
}

fn apt_get(args: &[&str]) -> Result<(), String> {
    let started = Instant::now();
    let output = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|e| format!("could not run apt-get: {e}"))?;
    if output.status.success() {
        println!(
            "    apt-get {} done in {:.1}s",
            args[0],
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if text.is_empty() {
        text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    }
    Err(format!(
        "apt-get {} exited with {}: {text}",
        args.join(" "),
        output.status
    ))
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
