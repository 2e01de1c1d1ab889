//! axum with the middleware that gives it Autumn's defaults, on mimalloc
//! like the Autumn app it is measured beside; see `autumn_bench::featured`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::io::Result<()> {
    autumn_bench::featured::main()
}
