//! The `autumn` command. Today: `autumn new NAME`, which writes a runnable
//! app (a page, a form guarded by a submit token, a JSON API, tests and an
//! `autumn.toml`), with the database and idempotency store asked for.
//!
//! Install it from a clone with `cargo install --path crates/autumn-cli`;
//! it is then `autumn` and `cargo autumn`.

pub mod new;

/// What `autumn` says without a known command.
pub const USAGE: &str = "\
usage: autumn COMMAND ...

commands:
  new NAME [--db none|sqlite|postgres] [--idempotency memory|redis|database]
           [--path DIR] [--git URL]
      writes a runnable Autumn app (`autumn new --help` for more)";

/// Runs the command `args` (without the program's name).
///
/// # Errors
///
/// The one line to print when the command cannot be done.
pub fn run(args: &[String]) -> Result<(), String> {
    match args.split_first() {
        Some((command, rest)) if command == "new" => new::run(&new::Defaults::installed(), rest),
        Some((help, _)) if help == "-h" || help == "--help" || help == "help" => {
            println!("{USAGE}");
            Ok(())
        }
        Some((other, _)) => Err(format!("unknown command `{other}`\n\n{USAGE}")),
        None => Err(USAGE.to_owned()),
    }
}
