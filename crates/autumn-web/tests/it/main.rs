//! autumn-web's integration tests, one module per concern, in one binary: one
//! link instead of one per file, and the tests of every module run in
//! parallel with each other. Shared fixtures are in `support`.

#[macro_use]
mod support;

mod actuator;
mod anonymous_keys;
mod api_tokens;
mod app_idempotency;
mod app_migrations;
mod app_state;
mod backends;
mod client_address;
mod cross_origin;
mod db_tls;
mod docs_truth;
mod drain;
mod error_pages;
mod forms;
mod graceful_shutdown;
mod h2_abuse;
mod https;
mod idempotency_policy;
mod idempotency_tx;
mod jobs;
mod key_admin;
mod launch;
mod layers_built_once;
mod live;
mod mail;
mod many_forms;
mod middleware_config;
mod nested_forms;
mod observability;
mod openapi;
mod openapi_export;
mod openapi_page;
mod principals;
mod quotas;
mod rate_limits;
mod recording;
mod redis_tls;
mod repositories;
mod request_metrics;
mod sealed_records;
mod server_limits;
mod sessions;
mod shutdown_grace;
mod spec_examples;
mod submit_tokens;
mod tenancy;
mod token_tenancy;
mod traces;
mod unsafe_settings;
