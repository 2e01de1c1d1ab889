// `#[autumn_web::main]` declares the app's global allocator (mimalloc, with
// the default `mimalloc` feature): an app with an allocator of its own turns
// that feature off instead.
#[global_allocator]
static OWN: std::alloc::System = std::alloc::System;

#[autumn_web::main]
async fn main() {}
