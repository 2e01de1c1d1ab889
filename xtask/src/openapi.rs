//! `cargo xtask openapi`: writes the OpenAPI documents of the examples
//! that publish one (`examples/<name>/openapi.json`), each with its binary's
//! own `openapi FILE` command, so the committed files are what a user of
//! the example gets. Each example's tests fail when its file is not
//! current.

use std::path::Path;
use std::process::Command;

/// The examples whose documents are committed.
const EXAMPLES: [&str; 2] = ["orders", "payments"];

pub(crate) fn run(root: &Path) -> Result<(), String> {
    for example in EXAMPLES {
        let file = root.join("examples").join(example).join("openapi.json");
        let mut command = Command::new(env!("CARGO"));
        command
            .current_dir(root)
            .args(["run", "--quiet", "--package", example, "--", "openapi"])
            .arg(&file);
        // The document under the defaults, as the tests build it: no
        // `AUTUMN_*` setting of this shell changes it.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("AUTUMN_") {
                command.env_remove(name);
            }
        }
        let status = command
            .status()
            .map_err(|error| format!("cannot run cargo: {error}"))?;
        if !status.success() {
            return Err(format!("`{example} openapi` failed ({status})"));
        }
        println!("wrote {}", file.display());
    }
    Ok(())
}
