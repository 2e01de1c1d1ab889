//! Autumn's own automation, run as `cargo xtask <command>`.
//!
//! - `ci`: the checks CI runs (formatting, clippy, tests, docs, feature
//!   builds), after making sure the services the tests need are up.
//! - `bench`: the end-to-end benchmark against plain axum (see `bench/`).
//! - `services`: only the service setup (see `services.rs`).
//! - `new`: a new app from the starter template: `autumn new` (the
//!   `autumn-cli` crate), with the app next to the clone.
//! - `cycles`: the module cycles of every crate (see `cycles.rs`), which
//!   `ci` checks.
//! - `openapi`: the examples' committed OpenAPI documents, rewritten.
//! - `soak`: the examples under load for a while, beside a flooding client,
//!   checked for double runs, 5xx, the flooder held by its quota and memory
//!   growth.
//!
//! Std only, so that it builds in seconds before anything else.

mod bench;
mod cycles;
mod http;
mod openapi;
mod services;
mod soak;

use std::env;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci        check services, then fmt, clippy, test, doc and feature builds;
            stops at the first failure
  bench     end to end: Autumn and a plain-axum twin as release processes
            pinned to one core, wrk on the other, interleaved rounds,
            medians and ratios (--rounds 3 --secs 10 --connections 32
            --threads 2); `bench sizing`: the same, once per store (memory,
            Redis, a Redis Cluster, PostgreSQL direct and through PgBouncer),
            req/s per app core and the store's CPU; `bench jobs`: one job
            worker's jobs/s on PostgreSQL and SQLite; `bench micro`: the
            in-process bench (memory per key, store round trips, sessions)
  services  make sure Redis and PostgreSQL answer on loopback and the tests
            can log in (as root on Debian/Ubuntu: apt-get install, start
            and set up whatever is missing), and that Chromium and
            ChromeDriver are installed
  cycles    the module cycles of each crate (ci fails on any not listed in
            xtask/src/cycles.rs, and on a listed one that has shrunk)
  new       a new app, as `autumn new` (see `autumn new --help`)
            (a page, a form, a JSON API, a test, autumn.toml)
  openapi   write the OpenAPI documents the examples commit
            (examples/orders/openapi.json, examples/payments/openapi.json)
  soak      the orders and saas examples on Redis under mixed load for 2
            minutes (--long: 10, --secs N: N) beside a client flooding each
            with new keys, then: no handler run twice per key, no 5xx or
            429 for the normal load and its p99 bounded, the flooder held
            by its quota, RSS flat
  help      this text";

/// Features of `autumn-web` that are each built alone by `cargo xtask ci`
/// (on top of `--no-default-features`). Adding a backend is one line here:
/// `"redis"`, `"postgres"`, `"sqlite"`.
const FEATURES: &[&str] = &["redis", "postgres", "sqlite", "database"];

fn main() -> ExitCode {
    let mut args = env::args().skip(1);
    let command = args.next();
    let root = repo_root();
    let result = match command.as_deref() {
        Some("ci") => ci(&root),
        Some("bench") => bench::run(&root, &args.collect::<Vec<_>>()),
        Some("services") => services::ensure(&root).map(|_| ()),
        Some("cycles") => {
            cycles::print(&root);
            Ok(())
        }
        Some("new") => autumn_cli::new::run(
            &autumn_cli::new::Defaults::in_clone(&root),
            &args.collect::<Vec<_>>(),
        ),
        Some("soak") => soak::run(&root, &args.collect::<Vec<_>>()),
        Some("openapi") => openapi::run(&root),
        Some("help" | "-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("xtask: unknown command `{other}`\n\n{USAGE}");
            return ExitCode::from(2);
        }
        None => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("\nxtask: FAILED: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: the parent of this crate's directory.
fn repo_root() -> PathBuf {
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or(manifest_dir)
}

/// One `cargo` invocation of the CI pipeline.
struct Step {
    name: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Step {
    fn new(name: impl Into<String>, args: &[&str]) -> Self {
        Self {
            name: name.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
        }
    }

    fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }
}

fn ci_steps() -> Vec<Step> {
    let mut steps = vec![
        Step::new("fmt", &["fmt", "--all", "--check"]),
        Step::new(
            "clippy",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ],
        ),
        // No RUSTFLAGS here: changing them between steps rebuilds everything.
        // Warnings are made fatal by clippy's `-D warnings` above, which sees
        // the `[workspace.lints]` rustc lints too.
        Step::new("test", &["test", "--workspace", "--all-features"]),
        Step::new(
            "doc",
            &["doc", "--workspace", "--no-deps", "--all-features"],
        )
        .env("RUSTDOCFLAGS", "-D warnings"),
        // Each backend alone, with warnings denied: code used by one
        // feature only must not leave dead code in the others.
        Step::new(
            "check (no default features)",
            &[
                "clippy",
                "-p",
                "autumn-web",
                "--no-default-features",
                "--",
                "-D",
                "warnings",
            ],
        ),
    ];
    for feature in FEATURES {
        steps.push(Step::new(
            format!("check (feature {feature})"),
            &[
                "clippy",
                "-p",
                "autumn-web",
                "--no-default-features",
                "--features",
                feature,
                "--",
                "-D",
                "warnings",
            ],
        ));
    }
    steps
}

fn ci(root: &Path) -> Result<(), String> {
    let started = Instant::now();
    // Before anything builds: it reads source files only, in milliseconds.
    println!("==> module cycles");
    cycles::check(root).map_err(|why| format!("module cycles:\n{why}"))?;
    println!("==> no module cycles but the known ones");
    let found = services::ensure(root)?;
    let mut steps = ci_steps();
    // A login made for the tests (say, a generated TEST_DATABASE_URL)
    // reaches every step that may run them.
    for step in &mut steps {
        step.env.extend(found.env.iter().cloned());
    }
    let total = steps.len();
    for (index, step) in steps.iter().enumerate() {
        println!(
            "\n==> [{}/{total}] {}: cargo {}",
            index + 1,
            step.name,
            step.args.join(" ")
        );
        let step_started = Instant::now();
        let outcome = cargo(root, &step.args, &step.env);
        let secs = step_started.elapsed().as_secs_f64();
        match outcome {
            Ok(()) => println!("==> {} ok in {secs:.1}s", step.name),
            Err(why) => {
                return Err(format!(
                    "step `{}` failed after {secs:.1}s: {why}",
                    step.name
                ));
            }
        }
    }
    println!(
        "\n==> ci passed: {total} steps in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs the `cargo` that runs us (falling back to the one on `PATH`) in the
/// repository root, with inherited stdio.
pub(crate) fn cargo(root: &Path, args: &[String], envs: &[(String, String)]) -> Result<(), String> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    command.args(args).current_dir(root);
    for (key, value) in envs {
        command.env(key, value);
    }
    let status = command.status().map_err(|e| {
        format!(
            "could not run `{} {}`: {e}",
            Path::new(&cargo).display(),
            args.join(" ")
        )
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` exited with {status}", args.join(" ")))
    }
}

/// Whether `program` can be found on `PATH`.
fn on_path(program: impl AsRef<OsStr>) -> bool {
    let program = program.as_ref();
    env::var_os("PATH")
        .is_some_and(|paths| env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}
