//! autumn-core's integration tests (the stores of sessions, API tokens and
//! commit jobs on real backends) in one binary. Shared fixtures are in
//! `support`.

#[macro_use]
mod support;

mod api_token_stores;
mod commit_jobs;
mod db_pgbouncer;
mod session_sign_in;
mod session_stores;
