//! The baseline of `cargo xtask bench` on the system allocator; see
//! `autumn_bench::plain`.

fn main() -> std::io::Result<()> {
    autumn_bench::plain::main()
}
