//! `autumn COMMAND ...`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(message) = autumn_cli::run(&args) {
        eprintln!("autumn: {message}");
        std::process::exit(2);
    }
}
