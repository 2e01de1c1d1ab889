//! The tools from the Python registry the tests run as other programs: the
//! `openapi-spec-validator`, Schemathesis, the `openapi-python-client`
//! generator, the `h2` HTTP/2 library and the `aiosmtpd` SMTP server, installed by
//! `cargo xtask services` in a virtual environment of their own
//! (`/usr/local/lib/autumn-api-tools`, or where `AUTUMN_API_TOOLS` says).

use std::path::{Path, PathBuf};
use std::process::Command;

const HOW_TO_INSTALL: &str = "run `cargo xtask services` (as root), or make a virtual environment \
    with `python3 -m venv DIR && DIR/bin/pip install openapi-spec-validator==0.9.0 \
    schemathesis==4.32.5 openapi-python-client==0.29.1 h2==4.4.1 aiosmtpd==1.4.6` and point AUTUMN_API_TOOLS at DIR";

/// The program `name` of the tools' environment, ready to be given
/// arguments. Panics with how to install the tools when it is not there: a
/// test that needs them never passes without them.
#[track_caller]
pub fn command(name: &str) -> Command {
    let bin = tools_dir().join("bin");
    let program = bin.join(name);
    assert!(
        program.is_file(),
        "{} is not installed; {HOW_TO_INSTALL}",
        program.display()
    );
    let mut command = Command::new(program);
    // Plain output, whatever the terminal: the test quotes it on failure.
    command.env("NO_COLOR", "1");
    // The environment's own programs first (the generator runs `ruff`).
    let path = std::env::var_os("PATH").unwrap_or_default();
    let paths = std::iter::once(bin).chain(std::env::split_paths(&path));
    if let Ok(path) = std::env::join_paths(paths) {
        command.env("PATH", path);
    }
    command
}

fn tools_dir() -> PathBuf {
    std::env::var_os("AUTUMN_API_TOOLS").map_or_else(
        || PathBuf::from("/usr/local/lib/autumn-api-tools"),
        PathBuf::from,
    )
}

/// Generates a Python client package for `document` (an OpenAPI
/// document's bytes) with `openapi-python-client`, as `dir/package`; put
/// `dir` on `PYTHONPATH` to import it. Panics with what the generator
/// printed when it fails.
#[track_caller]
pub fn python_client(document: &[u8], dir: &Path, package: &str) {
    let file = dir.join("openapi.json");
    std::fs::write(&file, document).expect("the document written");
    let mut generate = command("openapi-python-client");
    generate
        .current_dir(dir)
        .args(["generate", "--meta", "none", "--path"])
        .arg(&file)
        .arg("--output-path")
        .arg(dir.join(package));
    let report = must_pass(generate, "openapi-python-client");
    assert!(
        dir.join(package).join("__init__.py").is_file(),
        "openapi-python-client made no package {package}:\n{report}"
    );
}

/// Runs the Python `script` with `args` in the tools' environment, with
/// `python_path` on `PYTHONPATH`; returns what it printed on standard
/// output, or panics with everything it printed when it fails.
#[track_caller]
pub fn python(script: &Path, python_path: &Path, args: &[&str]) -> String {
    let mut run = command("python");
    run.env("PYTHONPATH", python_path).arg(script).args(args);
    must_pass(run, &format!("python {}", script.display()))
}

/// Runs `command` to its end and returns what it printed on standard
/// output; panics with everything it printed when it fails, naming `what`
/// it checked.
#[track_caller]
pub fn must_pass(mut command: Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("could not run {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Checks `document`, an OpenAPI document's bytes, with
/// `openapi-spec-validator`; panics with what it found.
#[track_caller]
pub fn validate(document: &[u8]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, document).expect("the document written");
    let mut validator = command("openapi-spec-validator");
    validator.arg(&file);
    must_pass(validator, "openapi-spec-validator");
}

/// Runs Schemathesis against the app whose document is at `url`: positive
/// and negative data, every check but one, then `extra` arguments. Panics
/// with its report when it finds anything.
///
/// The check left out, `positive_data_acceptance`, wants every request the
/// schema allows to succeed; an app refuses some for reasons a schema does
/// not say (a duplicate, a rule across fields), and serde refuses `5.0`
/// where the schema says integer. The ones that are about the document
/// stay: no server error, every status documented, every response as
/// documented.
///
/// Valid requests get a fresh `Idempotency-Key` each, as a client
/// following the protocol sends (`examples/schemathesis/hooks.py`).
///
/// Returns Schemathesis's report, for a test that checks a phase ran (see
/// [`stateful_links_covered`]).
#[track_caller]
pub fn schemathesis(url: &str, extra: &[&str]) -> String {
    let hooks = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/schemathesis");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut run = command("schemathesis");
    run.current_dir(dir.path())
        .env("SCHEMATHESIS_HOOKS", "hooks")
        .env("PYTHONPATH", hooks)
        .args(["run", url, "--checks", "all"])
        .args(["--exclude-checks", "positive_data_acceptance"])
        .args(["--mode", "all", "--seed", "7", "--request-timeout", "30"])
        .args(extra);
    must_pass(run, &format!("schemathesis against {url}"))
}

/// How many links between operations Schemathesis's stateful phase
/// followed, read from its `report` (`API Links: 2 covered / ...`): 0 when
/// the phase found none to follow and was skipped.
#[must_use]
pub fn stateful_links_covered(report: &str) -> u32 {
    report
        .lines()
        .find_map(|line| line.trim().strip_prefix("API Links:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}
