//! autumn-idempotency's integration tests in one binary (one link instead of one
//! per file). Shared fixtures, the store conformance suite among them, are in
//! `support`.

#[macro_use]
mod support;

mod admin;
mod anonymous_keys;
mod db_pgbouncer;
mod db_replicas;
mod db_store;
mod db_tls;
mod heartbeat;
mod in_flight_wait;
mod layer;
mod memory_store;
mod properties;
mod quota;
mod redis_cluster;
mod redis_replicas;
mod redis_store;
mod redis_tls;
mod store_time;
mod submit_layer;
mod valkey;
