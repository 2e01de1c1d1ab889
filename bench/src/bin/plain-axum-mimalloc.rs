//! The baseline of `cargo xtask bench` on mimalloc, the allocator
//! `#[autumn_web::main]` gives Autumn apps; see `autumn_bench::plain`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::io::Result<()> {
    autumn_bench::plain::main()
}
