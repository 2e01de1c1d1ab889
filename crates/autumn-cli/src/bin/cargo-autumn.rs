//! `cargo autumn COMMAND ...`: cargo runs this with `autumn` as the first
//! argument.

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|arg| arg == "autumn") {
        args.remove(0);
    }
    if let Err(message) = autumn_cli::run(&args) {
        eprintln!("cargo autumn: {message}");
        std::process::exit(2);
    }
}
