//! The OpenAPI tools the tests run as other programs: the
//! `openapi-spec-validator` and Schemathesis, from the Python registry,
//! installed by `cargo xtask services` in a virtual environment of their
//! own (`/usr/local/lib/autumn-api-tools`, or where `AUTUMN_API_TOOLS`
//! says).

use std::path::PathBuf;
use std::process::Command;

const HOW_TO_INSTALL: &str = "run `cargo xtask services` (as root), or make a virtual environment \
    with `python3 -m venv DIR && DIR/bin/pip install openapi-spec-validator==0.9.0 \
    schemathesis==4.32.5` and point AUTUMN_API_TOOLS at DIR";

/// The program `name` of the tools' environment, ready to be given
/// arguments. Panics with how to install the tools when it is not there: a
/// test that needs them never passes without them.
#[track_caller]
pub fn command(name: &str) -> Command {
    let dir = std::env::var_os("AUTUMN_API_TOOLS").map_or_else(
        || PathBuf::from("/usr/local/lib/autumn-api-tools"),
        PathBuf::from,
    );
    let program = dir.join("bin").join(name);
    assert!(
        program.is_file(),
        "{} is not installed; {HOW_TO_INSTALL}",
        program.display()
    );
    let mut command = Command::new(program);
    // Plain output, whatever the terminal: the test quotes it on failure.
    command.env("NO_COLOR", "1");
    command
}

/// Runs `command` to its end; panics with everything it printed when it
/// fails, naming `what` it checked.
#[track_caller]
pub fn must_pass(mut command: Command, what: &str) {
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
#[track_caller]
pub fn schemathesis(url: &str, extra: &[&str]) {
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
    must_pass(run, &format!("schemathesis against {url}"));
}
