//! Rebuilds the crate when a framework migration is added or changed:
//! `embed_migrations!` reads `migrations/` at compile time, and cargo does
//! not know it depends on that directory.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
