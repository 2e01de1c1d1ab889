//! What the idempotency layer costs a real HTTP client, what the in-memory
//! store holds per recorded response, what the submit-token layer costs a
//! `GET` that renders a form (minting included), and (with the `redis` /
//! `postgres` features) what the Redis and PostgreSQL stores cost:
//! throughput and store round trips per request.
//!
//! Run with `cargo bench -p autumn-web --bench idempotency --features
//! redis,postgres` (or `cargo xtask bench`); without the features only the
//! memory store is measured. Only the ratios printed by one run mean
//! anything: absolute numbers move with whatever else the machine is doing.
//!
//! Knobs (environment): `AUTUMN_BENCH_SECS` (measured seconds per scenario
//! run, default 1), `AUTUMN_BENCH_WARMUP_MS` (per run, default 300),
//! `AUTUMN_BENCH_ROUNDS` (default 15; 0 = memory only), `AUTUMN_BENCH_CONCURRENCY` (default 16),
//! `AUTUMN_BENCH_KEYS` (keys for the memory part, default 100000),
//! `AUTUMN_BENCH_ONLY` (comma-separated short names from the per-round lines,
//! e.g. `first`, to profile some scenarios alone; prints none of the layer's
//! ratios, and a sessions S/N ratio only for a kind whose S and N both run:
//! `session-first,no-session-first,session-replay,no-session-replay` runs the
//! sessions part alone, store-call counts included),
//! `AUTUMN_BENCH_COUNT` (requests per batch when counting store round trips,
//! default 200), `TEST_REDIS_URL` (default `redis://127.0.0.1:6379`),
//! `TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//! A store whose service does not answer is skipped, with a line saying so.
//!
//! The targets printed next to each ratio are DESIGN.md's "Numbers we hold
//! ourselves to" (`harness.rs` names them): the layer off (a request without
//! a key) at least 0.95x plain axum, a first-time key on the memory store at
//! least 0.85x, a replay at least 1.0x, at most ~300 bytes per stored small
//! response, a minting `GET` within 3% of the bare route, and at most 2 Redis
//! commands per first-time request and 1 per replay.
//!
//! One module per subject: `harness` (knobs, the app, the client, the
//! measures, the targets), `memory_bytes`, `layer` (the HTTP throughput
//! rounds and their ratios), `submit_mint`, `redis`, `postgres`, and
//! `policy_costs` (in process: the required-key check and JSON
//! canonicalisation against today's fingerprint), and
//! `sessions` (run after the layer's rounds: what a route that reads the
//! session costs against the same route without the session layer, first
//! time and replayed, and the session-store calls per request, which must be
//! none for a request that does not use its session).
//!
//! Design: one multi-thread tokio runtime (one worker per core) runs both
//! servers and the client. On a 2-core machine separate runtimes would only
//! oversubscribe the cores; the client's share of the work is the same in every
//! scenario, so the ratios still compare the server paths (they understate the
//! layer's server-side cost by the client's share, which is what a real client
//! on the same box would see). The Redis and PostgreSQL servers run outside
//! this process: their CPU is not in req/cpu-s, so compare those stores on
//! req/s.
//!
//! Store round trips are counted, not timed, from what the server receives:
//! Redis through MONITOR (client commands only: `INFO commandstats` and
//! `total_commands_processed` also count the calls Lua scripts make), and
//! PostgreSQL through a loopback proxy that parses the frontend protocol
//! (every Execute is a statement, every Sync or simple Query a round trip),
//! which other sessions on the same database cannot disturb, unlike
//! `pg_stat_database` counters.

mod harness;
mod layer;
mod memory_bytes;
mod policy_costs;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
/// The tests' Redis fixtures, for their MONITOR reader.
#[cfg(feature = "redis")]
use autumn_testkit::redis as redis_support;
mod sessions;
mod submit_mint;

use harness::Config;

// The allocator `#[autumn_web::main]` gives apps, so that the memory and
// speed figures are an app's.
autumn_web::__private::allocator! {}

fn main() {
    let config = Config::from_env();
    // Memory first, on the main thread before any runtime thread exists, so
    // the process heap is as quiet as it gets.
    memory_bytes::memory_per_key(config.keys);
    memory_bytes::expiry_keeps_memory_flat(config.keys);

    if config.rounds == 0 {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        layer::http_bench(&config).await;
        sessions::session_bench(&config).await;
        policy_costs::policy_bench(&config).await;
    });
}
