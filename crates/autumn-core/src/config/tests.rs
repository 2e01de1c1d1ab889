//! Tests of configuration loading. Each test writes its files into a temporary directory and
//! passes an explicit environment map; none reads or changes the process environment.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use super::settings::redact;
use super::*;

/// A temporary directory holding `files` (name, contents).
fn dir_with(files: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().expect("create temp dir");
    for (name, contents) in files {
        std::fs::write(dir.path().join(name), contents).expect("write config file");
    }
    dir
}

fn env(vars: &[(&str, &str)]) -> HashMap<String, String> {
    vars.iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

fn load(dir: &TempDir, vars: &[(&str, &str)]) -> Result<AutumnConfig, ConfigError> {
    AutumnConfig::load_from(dir.path(), &env(vars))
}

fn load_ok(dir: &TempDir, vars: &[(&str, &str)]) -> AutumnConfig {
    match load(dir, vars) {
        Ok(config) => config,
        Err(error) => panic!("configuration should load: {error}"),
    }
}

fn load_err(dir: &TempDir, vars: &[(&str, &str)]) -> ConfigError {
    match load(dir, vars) {
        Ok(config) => panic!("configuration should not load: {config:?}"),
        Err(error) => error,
    }
}

/// The error's message, checked to be a single line.
fn one_line(error: &ConfigError) -> String {
    let message = error.to_string();
    assert!(
        !message.contains('\n') && !message.contains('\r'),
        "error message spans lines: {message:?}"
    );
    message
}

fn file(dir: &TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

fn setting<'a>(settings: &'a [Setting], key: &str) -> &'a Setting {
    settings
        .iter()
        .find(|setting| setting.key == key)
        .unwrap_or_else(|| panic!("no setting {key}"))
}

// ---- defaults -------------------------------------------------------------------------------

#[test]
fn defaults_without_files_or_env() {
    let dir = dir_with(&[]);
    let config = load_ok(&dir, &[]);

    let expected = AutumnConfig {
        server: ServerConfig {
            host: "127.0.0.1".to_owned(),
            port: 3000,
            max_connections: 512,
            max_connections_per_client: 100,
            trusted_proxies: Vec::new(),
            proxy_protocol: false,
            max_header_bytes: 32 * 1024,
            shutdown_grace_ms: 10_000,
            shutdown_delay_ms: 0,
            timeouts: TimeoutsConfig {
                request_timeout_ms: Some(30_000),
                header_read_timeout_ms: 10_000,
                keep_alive_timeout_ms: 15_000,
                min_body_rate: 500,
            },
            tls: ServerTlsConfig {
                cert_file: None,
                key_file: None,
                reload_interval_ms: 10_000,
                redirect_port: None,
            },
            http2: Http2Config {
                enabled: true,
                h2c: false,
                max_concurrent_streams: 100,
                keep_alive_interval_ms: 20_000,
            },
        },
        log: LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
            access_log: true,
        },
        actuator: ActuatorConfig {
            enabled: true,
            port: None,
            host: "127.0.0.1".to_owned(),
            metrics_on_app_port: false,
            health_timeout_ms: 2_000,
            health_cache_ms: 1_000,
            optional: Vec::new(),
        },
        database: DatabaseConfig {
            url: None,
            pool_size: 10,
            connect_timeout_ms: 5000,
            statement_cache: true,
            migrate_on_start: None,
        },
        idempotency: IdempotencyConfig {
            enabled: true,
            backend: Backend::Memory,
            ttl_secs: 86_400,
            in_flight_ttl_secs: 60,
            in_flight_wait_ms: 0,
            allow_memory_in_production: false,
            max_body_bytes: 2_097_152,
            max_record_bytes: 1_048_576,
            record_errors: super::RecordErrorsMode::None,
            anonymous_keys: super::AnonymousKeysMode::Allow,
            require_key: false,
            fingerprint: super::FingerprintMode::Bytes,
            fingerprint_ignore: Vec::new(),
            fingerprint_only: Vec::new(),
            docs_url: None,
            expiry_header: false,
            memory: MemoryConfig {
                max_entries: 500_000,
                max_bytes: 134_217_728,
            },
            redis: RedisConfig {
                url: None,
                key_prefix: "autumn:idempotency".to_owned(),
                tls_ca_file: None,
                tls_cert_file: None,
                tls_key_file: None,
            },
            admin: IdempotencyAdminConfig::default(),
            quota: super::QuotaConfig {
                enabled: true,
                max_records: 10_000,
                max_bytes: 67_108_864,
                backend: None,
                max_callers: 100_000,
            },
        },
        security: SecurityConfig {
            secret_key: None,
            old_secret_keys: Vec::new(),
            encrypt_recorded_bodies: false,
            cross_origin: CrossOriginConfig {
                enabled: true,
                trusted_origins: Vec::new(),
                exempt_paths: Vec::new(),
            },
            submit_token: SubmitTokenConfig {
                enabled: true,
                field_name: "_submit_token".to_owned(),
                ttl_secs: 600,
                in_flight_ttl_secs: 86_400,
                backend: None,
                exempt_paths: Vec::new(),
                max_form_bytes: 1_048_576,
                max_record_bytes: 1_048_576,
                in_flight_wait_ms: 0,
            },
            headers: HeadersConfig {
                enabled: true,
                hsts: None,
                content_security_policy: super::DEFAULT_CONTENT_SECURITY_POLICY.to_owned(),
                referrer_policy: "strict-origin-when-cross-origin".to_owned(),
            },
        },
        session: SessionConfig {
            enabled: true,
            cookie_name: "autumn_session".to_owned(),
            backend: None,
            ttl_secs: 1_209_600,
            absolute_ttl_secs: 2_592_000,
            same_site: super::SameSite::Lax,
            secure: None,
            allow_memory_in_production: false,
        },
        tenancy: TenancyConfig {
            enabled: false,
            strategy: super::TenantStrategy::Header,
            header: "X-Tenant-Id".to_owned(),
            base_domain: None,
            exempt_paths: Vec::new(),
        },
        static_files: StaticConfig {
            dir: None,
            mount: "/static".to_owned(),
        },
        compression: CompressionConfig { enabled: true },
        cors: CorsConfig {
            allowed_origins: Vec::new(),
            allowed_methods: ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
                .map(str::to_owned)
                .to_vec(),
            allowed_headers: ["authorization", "content-type", "idempotency-key"]
                .map(str::to_owned)
                .to_vec(),
            max_age_secs: 600,
        },
        profile: Profile::new("dev"),
        ..AutumnConfig::default()
    };
    assert_eq!(config, expected);
    assert_eq!(config, AutumnConfig::default());
    assert_eq!(config.profile.name(), "dev");
}

#[test]
fn empty_files_leave_defaults() {
    let dir = dir_with(&[("autumn.toml", ""), ("autumn-dev.toml", "[server]\n")]);
    assert_eq!(load_ok(&dir, &[]), AutumnConfig::default());
}

// ---- precedence -----------------------------------------------------------------------------

#[test]
fn file_overrides_defaults() {
    let dir = dir_with(&[(
        "autumn.toml",
        "[server]\nport = 8080\n[idempotency]\nbackend = \"redis\"\n",
    )]);
    let config = load_ok(&dir, &[]);
    assert_eq!(config.server.port, 8080);
    assert_eq!(config.idempotency.backend, Backend::Redis);
    // Keys the file does not mention keep their defaults, even in the same section.
    assert_eq!(config.server.host, "127.0.0.1");
    assert_eq!(config.idempotency.ttl_secs, 86_400);
}

#[test]
fn profile_file_overrides_file() {
    let dir = dir_with(&[
        (
            "autumn.toml",
            "[server]\nhost = \"0.0.0.0\"\nport = 8080\n[log]\nlevel = \"debug\"\n",
        ),
        ("autumn-prod.toml", "[server]\nport = 80\n"),
    ]);
    let config = load_ok(&dir, &[("AUTUMN_PROFILE", "prod")]);
    assert_eq!(config.profile, Profile::new("prod"));
    assert!(config.profile.is_production());
    assert_eq!(config.server.port, 80);
    // Merged key by key: the profile file's [server] does not erase autumn.toml's host.
    assert_eq!(config.server.host, "0.0.0.0");
    assert_eq!(config.log.level, "debug");
}

#[test]
fn profile_file_of_another_profile_is_not_read() {
    let dir = dir_with(&[
        ("autumn.toml", "[server]\nport = 8080\n"),
        ("autumn-prod.toml", "[server]\nport = 80\n"),
    ]);
    let config = load_ok(&dir, &[("AUTUMN_PROFILE", "staging")]);
    assert_eq!(config.profile.name(), "staging");
    assert_eq!(config.server.port, 8080);

    let config = load_ok(&dir, &[]);
    assert_eq!(config.profile.name(), "dev");
    assert_eq!(config.server.port, 8080);
}

#[test]
fn default_profile_reads_dev_file() {
    let dir = dir_with(&[("autumn-dev.toml", "[log]\nlevel = \"trace\"\n")]);
    assert_eq!(load_ok(&dir, &[]).log.level, "trace");
    assert_eq!(load_ok(&dir, &[("AUTUMN_PROFILE", "")]).log.level, "trace");
    assert_eq!(
        load_ok(&dir, &[("AUTUMN_PROFILE", "test")]).log.level,
        "info"
    );
}

#[test]
fn env_overrides_profile_file() {
    let dir = dir_with(&[
        ("autumn.toml", "[server]\nport = 8080\n"),
        (
            "autumn-prod.toml",
            "[server]\nport = 80\nhost = \"0.0.0.0\"\n",
        ),
    ]);
    let config = load_ok(
        &dir,
        &[("AUTUMN_PROFILE", "prod"), ("AUTUMN_SERVER__PORT", "9090")],
    );
    assert_eq!(config.server.port, 9090);
    assert_eq!(config.server.host, "0.0.0.0");
}

#[test]
fn nested_keys_via_env() {
    let dir = dir_with(&[("autumn.toml", "[idempotency.redis]\nkey_prefix = \"app\"\n")]);
    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_IDEMPOTENCY__REDIS__URL", "redis://localhost:6379/0"),
            ("AUTUMN_SERVER__TIMEOUTS__REQUEST_TIMEOUT_MS", "2500"),
            ("AUTUMN_SECURITY__SUBMIT_TOKEN__ENABLED", "false"),
            ("AUTUMN_SECURITY__SUBMIT_TOKEN__BACKEND", "database"),
        ],
    );
    assert_eq!(
        config.idempotency.redis.url.as_deref(),
        Some("redis://localhost:6379/0")
    );
    assert_eq!(config.idempotency.redis.key_prefix, "app");
    assert_eq!(config.server.timeouts.request_timeout_ms, Some(2500));
    assert_eq!(
        config.server.request_timeout(),
        Some(Duration::from_millis(2500))
    );
    assert!(!config.security.submit_token.enabled);
    assert_eq!(
        config.security.submit_token.backend,
        Some(Backend::Database)
    );
}

#[test]
fn env_names_are_case_insensitive_after_the_prefix() {
    let dir = dir_with(&[]);
    let config = load_ok(&dir, &[("AUTUMN_Server__Port", "4000")]);
    assert_eq!(config.server.port, 4000);
}

#[test]
fn env_without_double_underscore_or_prefix_is_ignored() {
    let dir = dir_with(&[]);
    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_FOO", "bar"),
            ("AUTUMN_SERVER_PORT", "not a port"),
            ("SERVER__PORT", "1"),
            ("autumn_server__port", "1"),
            ("AUTUMN_DATABASE__URL", ""),
        ],
    );
    assert_eq!(config, AutumnConfig::default());
    assert_eq!(config.database.url, None);
}

#[test]
fn env_inline_table_merges_and_more_specific_variable_wins() {
    let dir = dir_with(&[("autumn.toml", "[server]\nport = 8080\n")]);
    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_SERVER", "ignored"),
            ("AUTUMN_SERVER__TIMEOUTS", "{ request_timeout_ms = 1 }"),
        ],
    );
    assert_eq!(config.server.timeouts.request_timeout_ms, Some(1));
    assert_eq!(config.server.port, 8080);

    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_SERVER__TIMEOUTS", "{ request_timeout_ms = 1 }"),
            ("AUTUMN_SERVER__TIMEOUTS__REQUEST_TIMEOUT_MS", "2"),
        ],
    );
    assert_eq!(config.server.timeouts.request_timeout_ms, Some(2));
}

// ---- env value typing -----------------------------------------------------------------------

#[test]
fn env_quoted_value_is_a_string() {
    let dir = dir_with(&[]);
    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_SESSION__COOKIE_NAME", "\"123\""),
            ("AUTUMN_LOG__LEVEL", "'debug'"),
        ],
    );
    assert_eq!(config.session.cookie_name, "123");
    assert_eq!(config.log.level, "debug");
}

#[test]
fn env_array_value() {
    let dir = dir_with(&[]);
    let config = load_ok(
        &dir,
        &[(
            "AUTUMN_SECURITY__SUBMIT_TOKEN__EXEMPT_PATHS",
            r#"["/a", "/b"]"#,
        )],
    );
    assert_eq!(config.security.submit_token.exempt_paths, ["/a", "/b"]);
}

#[test]
fn env_sets_the_session_keys() {
    let dir = dir_with(&[]);
    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_SESSION__BACKEND", "redis"),
            ("AUTUMN_SESSION__TTL_SECS", "3600"),
            ("AUTUMN_SESSION__SAME_SITE", "strict"),
            ("AUTUMN_SESSION__SECURE", "true"),
            ("AUTUMN_SESSION__COOKIE_NAME", "sid"),
            ("AUTUMN_SESSION__ALLOW_MEMORY_IN_PRODUCTION", "true"),
        ],
    );
    let session = &config.session;
    assert_eq!(session.backend, Some(Backend::Redis));
    assert_eq!(session.ttl_secs, 3600);
    assert_eq!(session.same_site, super::SameSite::Strict);
    assert_eq!(session.secure, Some(true));
    assert_eq!(session.cookie_name, "sid");
    assert!(session.allow_memory_in_production);
}

#[test]
fn session_settings_that_cannot_work_are_refused_naming_the_key() {
    let dir = dir_with(&[]);
    for (vars, key) in [
        (vec![("AUTUMN_SESSION__TTL_SECS", "0")], "session.ttl_secs"),
        (
            vec![("AUTUMN_SESSION__COOKIE_NAME", "a b")],
            "session.cookie_name",
        ),
        (
            vec![
                ("AUTUMN_SESSION__SAME_SITE", "none"),
                ("AUTUMN_SESSION__SECURE", "false"),
            ],
            "session.same_site",
        ),
        (
            vec![("AUTUMN_SESSION__SAME_SITE", "sideways")],
            "session.same_site",
        ),
        (
            vec![
                ("AUTUMN_SESSION__COOKIE_NAME", "__Host-sid"),
                ("AUTUMN_SESSION__SECURE", "false"),
            ],
            "session.cookie_name",
        ),
        (
            vec![
                ("AUTUMN_SESSION__COOKIE_NAME", "__Secure-sid"),
                ("AUTUMN_SESSION__SECURE", "false"),
            ],
            "session.cookie_name",
        ),
    ] {
        let error = load_err(&dir, &vars);
        let message = one_line(&error);
        assert!(message.contains(key), "{key}: {message}");
    }
    // SameSite=None is fine while the cookie is Secure, as it is by default.
    for vars in [
        vec![("AUTUMN_SESSION__SAME_SITE", "none")],
        vec![
            ("AUTUMN_SESSION__SAME_SITE", "none"),
            ("AUTUMN_SESSION__SECURE", "true"),
        ],
    ] {
        load_ok(&dir, &vars);
    }
    // A prefixed name is fine while the cookie is Secure.
    load_ok(&dir, &[("AUTUMN_SESSION__COOKIE_NAME", "__Host-sid")]);
}

#[test]
fn the_session_cookie_is_secure_under_the_host_prefix_in_every_profile() {
    let dir = dir_with(&[]);
    for profile in ["dev", "test", "staging", "prod"] {
        let config = load_ok(&dir, &[("AUTUMN_PROFILE", profile)]);
        assert!(config.session.is_secure(), "{profile}");
        assert_eq!(
            config.session.effective_cookie_name(),
            "__Host-autumn_session",
            "{profile}"
        );
    }
    let plain = load_ok(&dir, &[("AUTUMN_SESSION__SECURE", "false")]);
    assert!(!plain.session.is_secure());
    assert_eq!(plain.session.effective_cookie_name(), "autumn_session");
    for (name, effective) in [
        ("sid", "__Host-sid"),
        ("__Host-sid", "__Host-sid"),
        ("__Secure-sid", "__Secure-sid"),
        ("__host-sid", "__host-sid"),
        ("__Hostsid", "__Host-__Hostsid"),
    ] {
        let config = load_ok(&dir, &[("AUTUMN_SESSION__COOKIE_NAME", name)]);
        assert_eq!(config.session.effective_cookie_name(), effective, "{name}");
    }
}

#[test]
fn env_sets_the_cross_origin_keys() {
    let dir = dir_with(&[]);
    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_SECURITY__CROSS_ORIGIN__ENABLED", "false"),
            (
                "AUTUMN_SECURITY__CROSS_ORIGIN__TRUSTED_ORIGINS",
                r#"["https://admin.example.com", "http://localhost:5173"]"#,
            ),
            (
                "AUTUMN_SECURITY__CROSS_ORIGIN__EXEMPT_PATHS",
                r#"["/hooks"]"#,
            ),
        ],
    );
    let cross_origin = &config.security.cross_origin;
    assert!(!cross_origin.enabled);
    assert_eq!(
        cross_origin.trusted_origins,
        ["https://admin.example.com", "http://localhost:5173"]
    );
    assert_eq!(cross_origin.exempt_paths, ["/hooks"]);
}

#[test]
fn a_trusted_origin_that_is_not_one_is_refused_naming_the_key_and_its_source() {
    let key = "security.cross_origin.trusted_origins";
    let variable = "AUTUMN_SECURITY__CROSS_ORIGIN__TRUSTED_ORIGINS";
    let error = load_err(
        &dir_with(&[]),
        &[(variable, r#"["https://ok.example", "ok.example"]"#)],
    );
    assert_eq!(error.key(), Some(key));
    assert_eq!(error.origin(), Some(Source::Env(variable.to_owned())));
    let message = one_line(&error);
    assert!(
        message.contains("`ok.example` is not an origin"),
        "{message}"
    );

    let dir = dir_with(&[(
        "autumn.toml",
        "[security.cross_origin]\ntrusted_origins = [\"https://Admin.example.com:443/\"]\n",
    )]);
    let error = load_err(&dir, &[]);
    assert_eq!(error.key(), Some(key));
    assert_eq!(
        error.origin(),
        Some(Source::File(file(&dir, "autumn.toml")))
    );
    assert!(
        one_line(&error).contains("write `https://admin.example.com`"),
        "{error}"
    );

    let mut config = AutumnConfig::default();
    config.security.cross_origin.trusted_origins = vec!["https://ok.example/path".to_owned()];
    let error = config.validate().expect_err("a path is no origin");
    assert_eq!(error.key(), Some(key));
    assert_eq!(error.origin(), Some(Source::Code));
}

#[test]
fn env_value_that_is_not_toml_is_a_plain_string() {
    let dir = dir_with(&[]);
    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_IDEMPOTENCY__REDIS__URL", "redis://localhost:6379/0"),
            ("AUTUMN_DATABASE__URL", "sqlite://data/app.db"),
            ("AUTUMN_LOG__LEVEL", "debug,hyper=warn"),
            ("AUTUMN_SERVER__HOST", "0.0.0.0"),
        ],
    );
    assert_eq!(
        config.idempotency.redis.url.as_deref(),
        Some("redis://localhost:6379/0")
    );
    assert_eq!(config.database.url.as_deref(), Some("sqlite://data/app.db"));
    assert_eq!(config.log.level, "debug,hyper=warn");
    assert_eq!(config.server.host, "0.0.0.0");
}

#[test]
fn env_typed_value_for_string_key_falls_back_to_string() {
    let dir = dir_with(&[]);
    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_IDEMPOTENCY__REDIS__KEY_PREFIX", "123"),
            ("AUTUMN_TENANCY__HEADER", "true"),
            ("AUTUMN_SESSION__COOKIE_NAME", "1.5"),
        ],
    );
    assert_eq!(config.idempotency.redis.key_prefix, "123");
    assert_eq!(config.tenancy.header, "true");
    assert_eq!(config.session.cookie_name, "1.5");
}

#[test]
fn env_string_fallback_does_not_hide_another_error() {
    let dir = dir_with(&[]);
    let error = load_err(
        &dir,
        &[
            ("AUTUMN_IDEMPOTENCY__REDIS__KEY_PREFIX", "123"),
            ("AUTUMN_SERVER__PORT", "abc"),
        ],
    );
    assert_eq!(
        one_line(&error),
        "invalid value for `server.port` in environment variable AUTUMN_SERVER__PORT: \
         invalid type: string \"abc\", expected u16"
    );
}

#[test]
fn env_typed_value_that_fails_as_string_too_reports_the_typed_error() {
    let dir = dir_with(&[]);
    let error = load_err(&dir, &[("AUTUMN_SERVER__PORT", "70000")]);
    assert_eq!(
        one_line(&error),
        "invalid value for `server.port` in environment variable AUTUMN_SERVER__PORT: \
         invalid value: integer `70000`, expected u16"
    );
}

// ---- error messages -------------------------------------------------------------------------

#[test]
fn bad_value_in_file_names_key_file_and_expectation() {
    let dir = dir_with(&[
        ("autumn.toml", "[server]\nport = 8080\n"),
        ("autumn-prod.toml", "[server]\nport = \"abc\"\n"),
    ]);
    let error = load_err(&dir, &[("AUTUMN_PROFILE", "prod")]);
    let path = file(&dir, "autumn-prod.toml");
    assert_eq!(
        one_line(&error),
        format!(
            "invalid value for `server.port` in {}: invalid type: string \"abc\", expected u16",
            path.display()
        )
    );
    match error {
        ConfigError::InvalidValue {
            key,
            origin,
            message,
        } => {
            assert_eq!(key, "server.port");
            assert_eq!(origin, Source::File(path));
            assert_eq!(message, "invalid type: string \"abc\", expected u16");
        }
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn bad_array_element_names_its_index() {
    let dir = dir_with(&[(
        "autumn.toml",
        "[security.submit_token]\nexempt_paths = [\"/a\", 2]\n",
    )]);
    let error = load_err(&dir, &[]);
    assert_eq!(
        one_line(&error),
        format!(
            "invalid value for `security.submit_token.exempt_paths[1]` in {}: \
             invalid type: integer `2`, expected a string",
            file(&dir, "autumn.toml").display()
        )
    );
}

#[test]
fn unknown_key_in_file_section() {
    let dir = dir_with(&[("autumn.toml", "[server]\nprot = 8080\n")]);
    let error = load_err(&dir, &[]);
    let path = file(&dir, "autumn.toml");
    assert_eq!(
        one_line(&error),
        format!(
            "unknown key `server.prot` in {} (expected one of: host, port, max_connections, \
             max_connections_per_client, trusted_proxies, proxy_protocol, max_header_bytes, \
             shutdown_grace_ms, shutdown_delay_ms, timeouts, tls, http2)",
            path.display()
        )
    );
    match error {
        ConfigError::UnknownKey {
            key,
            origin,
            expected,
        } => {
            assert_eq!(key, "server.prot");
            assert_eq!(origin, Source::File(path));
            assert_eq!(
                expected,
                [
                    "host",
                    "port",
                    "max_connections",
                    "max_connections_per_client",
                    "trusted_proxies",
                    "proxy_protocol",
                    "max_header_bytes",
                    "shutdown_grace_ms",
                    "shutdown_delay_ms",
                    "timeouts",
                    "tls",
                    "http2"
                ]
            );
        }
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn unknown_key_in_nested_file_section() {
    let dir = dir_with(&[(
        "autumn-dev.toml",
        "[idempotency.redis]\nuri = \"redis://h\"\n",
    )]);
    assert_eq!(
        one_line(&load_err(&dir, &[])),
        format!(
            "unknown key `idempotency.redis.uri` in {} (expected one of: url, key_prefix, tls_ca_file, tls_cert_file, tls_key_file)",
            file(&dir, "autumn-dev.toml").display()
        )
    );

    // The unknown key's name equals its parent's: the key must still be the full path.
    let dir = dir_with(&[("autumn.toml", "[server.timeouts]\ntimeouts = 1\n")]);
    assert_eq!(load_err(&dir, &[]).key(), Some("server.timeouts.timeouts"));
}

#[test]
fn unknown_top_level_section() {
    let dir = dir_with(&[("autumn.toml", "[servr]\nport = 1\n")]);
    assert_eq!(
        one_line(&load_err(&dir, &[])),
        format!(
            "unknown key `servr` in {} (expected one of: server, log, actuator, database, \
             idempotency, security, session, tenancy, static, compression, cors, rate_limit, \
             openapi, jobs, mail, telemetry)",
            file(&dir, "autumn.toml").display()
        )
    );
}

#[test]
fn unknown_env_key() {
    let dir = dir_with(&[]);
    let error = load_err(&dir, &[("AUTUMN_SERVER__BOGUS", "1")]);
    assert_eq!(
        one_line(&error),
        "unknown key `server.bogus` in environment variable AUTUMN_SERVER__BOGUS \
         (expected one of: host, port, max_connections, max_connections_per_client, \
         trusted_proxies, proxy_protocol, max_header_bytes, shutdown_grace_ms, shutdown_delay_ms, \
         timeouts, tls, http2)"
    );
    assert_eq!(
        error.origin(),
        Some(Source::Env("AUTUMN_SERVER__BOGUS".to_owned()))
    );
}

#[test]
fn bad_enum_value_via_env() {
    let dir = dir_with(&[("autumn.toml", "[idempotency]\nbackend = \"redis\"\n")]);
    let error = load_err(&dir, &[("AUTUMN_IDEMPOTENCY__BACKEND", "mongo")]);
    assert_eq!(
        one_line(&error),
        "invalid value for `idempotency.backend` in environment variable \
         AUTUMN_IDEMPOTENCY__BACKEND: unknown variant `mongo`, expected one of `memory`, \
         `redis`, `database`"
    );
}

#[test]
fn bad_enum_type_in_file() {
    let dir = dir_with(&[("autumn.toml", "[idempotency]\nbackend = 5\n")]);
    assert_eq!(
        one_line(&load_err(&dir, &[])),
        format!(
            "invalid value for `idempotency.backend` in {}: invalid type: integer `5`, \
             expected one of `memory`, `redis`, `database`",
            file(&dir, "autumn.toml").display()
        )
    );
}

#[test]
fn toml_syntax_error() {
    let dir = dir_with(&[("autumn.toml", "[server]\nport = 80\n[log\nlevel = \"x\"\n")]);
    let error = load_err(&dir, &[]);
    let path = file(&dir, "autumn.toml");
    let message = one_line(&error);
    assert!(
        message.starts_with(&format!("cannot parse {}: line 3, column ", path.display())),
        "{message}"
    );
    assert!(message.contains("expected `]`"), "{message}");
    assert!(matches!(
        error,
        ConfigError::Parse { origin: Source::File(p), .. } if p == path
    ));
}

#[test]
fn toml_duplicate_key_is_a_syntax_error() {
    let dir = dir_with(&[("autumn.toml", "[server]\nport = 1\nport = 2\n")]);
    let message = one_line(&load_err(&dir, &[]));
    assert!(message.contains("duplicate key"), "{message}");
}

#[test]
fn unreadable_file() {
    let dir = dir_with(&[]);
    std::fs::create_dir(dir.path().join("autumn.toml")).expect("create dir");
    let error = load_err(&dir, &[]);
    let message = one_line(&error);
    assert!(
        message.starts_with(&format!(
            "cannot read {}: ",
            file(&dir, "autumn.toml").display()
        )),
        "{message}"
    );
    assert!(matches!(error, ConfigError::Read { .. }));
}

#[test]
fn invalid_profile_name() {
    let dir = dir_with(&[]);
    let error = load_err(&dir, &[("AUTUMN_PROFILE", "../etc/passwd")]);
    assert!(matches!(&error, ConfigError::InvalidProfile { name } if name == "../etc/passwd"));
    assert!(one_line(&error).contains("AUTUMN_PROFILE"));
}

#[test]
fn error_messages_redact_passwords() {
    let dir = dir_with(&[(
        "autumn.toml",
        "[server]\nport = \"postgres://app:hunter2@db/app\"\n",
    )]);
    let message = one_line(&load_err(&dir, &[]));
    assert!(message.contains("postgres://app:***@db/app"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
}

#[test]
fn from_toml_str_names_inline_source() {
    let config = AutumnConfig::from_toml_str("[tenancy]\nenabled = true\n")
        .expect("inline TOML should load");
    assert!(config.tenancy.enabled);
    assert_eq!(config.profile, Profile::default());

    let error = AutumnConfig::from_toml_str("[tenancy]\nheadr = \"X\"\n").expect_err("unknown key");
    assert_eq!(
        one_line(&error),
        "unknown key `tenancy.headr` in inline TOML (expected one of: enabled, strategy, header, base_domain, exempt_paths)"
    );
    let error = AutumnConfig::from_toml_str("[tenancy").expect_err("syntax error");
    assert!(
        one_line(&error).starts_with("cannot parse inline TOML: line 1, column "),
        "{error}"
    );
}

// ---- profile and convenience methods --------------------------------------------------------

#[test]
fn profile_is_production() {
    assert!(Profile::new("prod").is_production());
    assert!(Profile::new("production").is_production());
    assert!(Profile::new("PROD").is_production());
    assert!(!Profile::new("dev").is_production());
    assert!(!Profile::new("test").is_production());
    assert!(!Profile::new("preprod").is_production());
    assert!(!Profile::default().is_production());
    assert_eq!(Profile::default().name(), "dev");
    assert_eq!(Profile::new("staging").to_string(), "staging");
}

#[test]
fn convenience_methods() {
    let config = AutumnConfig::from_toml_str(
        "[idempotency]\nbackend = \"redis\"\nttl_secs = 30\nin_flight_ttl_secs = 5\nin_flight_wait_ms = 1500\n",
    )
    .expect("inline TOML should load");
    assert_eq!(config.idempotency.ttl(), Duration::from_secs(30));
    assert_eq!(
        config.idempotency.in_flight_wait(),
        Duration::from_millis(1500)
    );
    assert_eq!(config.idempotency.in_flight_ttl(), Duration::from_secs(5));
    assert_eq!(
        config.server.request_timeout(),
        Some(Duration::from_secs(30))
    );

    let token = &config.security.submit_token;
    assert_eq!(token.effective_backend(&config.idempotency), Backend::Redis);
    let token = SubmitTokenConfig {
        backend: Some(Backend::Memory),
        ..SubmitTokenConfig::default()
    };
    assert_eq!(
        token.effective_backend(&config.idempotency),
        Backend::Memory
    );
    assert_eq!(Backend::Database.to_string(), "database");
}

#[test]
fn equality_ignores_where_values_came_from() {
    let config = AutumnConfig::from_toml_str("[server]\nport = 3000\n").expect("loads");
    assert_eq!(config, AutumnConfig::default());
}

// ---- effective settings ---------------------------------------------------------------------

#[test]
fn effective_settings_report_sources() {
    let dir = dir_with(&[
        (
            "autumn.toml",
            "[server]\nhost = \"0.0.0.0\"\nport = 8080\n[security.submit_token]\nexempt_paths = [\"/hooks\"]\n",
        ),
        ("autumn-prod.toml", "[server]\nport = 80\n"),
    ]);
    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_PROFILE", "prod"),
            ("AUTUMN_LOG__LEVEL", "warn"),
            ("AUTUMN_IDEMPOTENCY__REDIS__KEY_PREFIX", "42"),
        ],
    );
    let settings = config.effective_settings();
    let base = Source::File(file(&dir, "autumn.toml"));
    let prod = Source::File(file(&dir, "autumn-prod.toml"));

    let host = setting(&settings, "server.host");
    assert_eq!((host.value.as_str(), &host.source), ("\"0.0.0.0\"", &base));
    let port = setting(&settings, "server.port");
    assert_eq!((port.value.as_str(), &port.source), ("80", &prod));
    let level = setting(&settings, "log.level");
    assert_eq!(level.value, "\"warn\"");
    assert_eq!(level.source, Source::Env("AUTUMN_LOG__LEVEL".to_owned()));
    let prefix = setting(&settings, "idempotency.redis.key_prefix");
    assert_eq!(prefix.value, "\"42\"");
    assert_eq!(
        prefix.source,
        Source::Env("AUTUMN_IDEMPOTENCY__REDIS__KEY_PREFIX".to_owned())
    );
    let paths = setting(&settings, "security.submit_token.exempt_paths");
    assert_eq!(
        (paths.value.as_str(), &paths.source),
        ("[\"/hooks\"]", &base)
    );

    let timeout = setting(&settings, "server.timeouts.request_timeout_ms");
    assert_eq!(
        (timeout.value.as_str(), &timeout.source),
        ("30000", &Source::Default)
    );
    let backend = setting(&settings, "idempotency.backend");
    assert_eq!(
        (backend.value.as_str(), &backend.source),
        ("\"memory\"", &Source::Default)
    );

    assert_eq!(
        port.to_string(),
        format!(
            "server.port = 80 ({})",
            file(&dir, "autumn-prod.toml").display()
        )
    );
}

#[test]
fn effective_settings_redact_passwords() {
    let dir = dir_with(&[("autumn.toml", "[database]\nurl = \"postgres://u:p@h/db\"\n")]);
    let config = load_ok(
        &dir,
        &[(
            "AUTUMN_IDEMPOTENCY__REDIS__URL",
            "redis://user:secret@host/0",
        )],
    );
    let settings = config.effective_settings();
    assert_eq!(
        setting(&settings, "database.url").value,
        "\"postgres://u:***@h/db\""
    );
    assert_eq!(
        setting(&settings, "idempotency.redis.url").value,
        "\"redis://user:***@host/0\""
    );
    // The configuration itself keeps the real values.
    assert_eq!(
        config.idempotency.redis.url.as_deref(),
        Some("redis://user:secret@host/0")
    );
}

/// Every key `effective_settings` lists can be set in a file, and is then reported as coming
/// from that file: the listing and the deserializable keys agree.
#[test]
fn effective_settings_cover_every_key() {
    let full = r#"
        [server]
        host = "h"
        port = 1
        max_connections = 12
        max_connections_per_client = 21
        trusted_proxies = ["10.0.0.0/8"]
        proxy_protocol = true
        max_header_bytes = 2048
        shutdown_grace_ms = 13
        shutdown_delay_ms = 20
        [server.timeouts]
        request_timeout_ms = 2
        header_read_timeout_ms = 14
        keep_alive_timeout_ms = 15
        min_body_rate = 22
        [server.tls]
        cert_file = "c.pem"
        key_file = "k.pem"
        reload_interval_ms = 16
        redirect_port = 17
        [server.http2]
        enabled = false
        h2c = true
        max_concurrent_streams = 18
        keep_alive_interval_ms = 19
        [log]
        level = "l"
        format = "json"
        access_log = false
        [actuator]
        enabled = false
        port = 9
        host = "10.0.0.9"
        metrics_on_app_port = true
        health_timeout_ms = 16
        health_cache_ms = 17
        optional = ["db"]
        [database]
        url = "sqlite://x"
        pool_size = 3
        connect_timeout_ms = 4
        statement_cache = false
        migrate_on_start = false
        [idempotency]
        enabled = false
        backend = "database"
        ttl_secs = 5
        in_flight_ttl_secs = 6
        in_flight_wait_ms = 15
        allow_memory_in_production = true
        max_body_bytes = 7
        max_record_bytes = 12
        record_errors = "server"
        anonymous_keys = "refuse"
        require_key = true
        fingerprint = "json"
        fingerprint_ignore = ["/ts"]
        fingerprint_only = []
        docs_url = "https://example.com/keys"
        expiry_header = true
        [idempotency.memory]
        max_entries = 12
        max_bytes = 13
        [idempotency.redis]
        url = "rediss://r"
        key_prefix = "p"
        tls_ca_file = "/ca.pem"
        tls_cert_file = "/client.pem"
        tls_key_file = "/client.key"
        [idempotency.admin]
        enabled = true
        token = "0123456789abcdef"
        allow_bodies = true
        [openapi]
        enabled = true
        path = "/api.json"
        title = "Orders"
        version = "2.1.0"
        ui = false
        ui_path = "/api"
        [idempotency.quota]
        enabled = true
        max_records = 14
        max_bytes = 15
        backend = "redis"
        max_callers = 16
        [security]
        secret_key = "0123456789abcdef0123456789abcdef-new"
        old_secret_keys = ["0123456789abcdef0123456789abcdef-old"]
        encrypt_recorded_bodies = true
        [security.cross_origin]
        enabled = false
        trusted_origins = ["https://a.example"]
        exempt_paths = ["/y"]
        [security.submit_token]
        enabled = false
        field_name = "f"
        ttl_secs = 8
        in_flight_ttl_secs = 9
        backend = "redis"
        exempt_paths = ["/x"]
        max_form_bytes = 10
        max_record_bytes = 13
        in_flight_wait_ms = 11
        [session]
        enabled = false
        cookie_name = "c"
        backend = "redis"
        ttl_secs = 14
        absolute_ttl_secs = 23
        same_site = "strict"
        secure = true
        allow_memory_in_production = true
        [tenancy]
        enabled = true
        strategy = "header"
        header = "t"
        base_domain = "example.com"
        exempt_paths = ["/signup"]
        [security.headers]
        enabled = false
        hsts = true
        content_security_policy = "default-src 'none'"
        referrer_policy = "no-referrer"
        [static]
        dir = "public"
        mount = "/assets"
        [compression]
        enabled = false
        [cors]
        allowed_origins = ["https://app.example"]
        allowed_methods = ["GET"]
        allowed_headers = ["x-a"]
        max_age_secs = 5
        [rate_limit]
        enabled = false
        backend = "redis"
        max_clients = 7
        [rate_limit.rules.login]
        limit = 5
        window_secs = 30
        burst = 2
        by = "session"
        routes = ["POST /login"]
        on_store_error = "open"
        [jobs.admin]
        enabled = false
        token = "0123456789abcdef-jobs"
        allow_payloads = true
        [jobs.schedule.nightly]
        cron = "30 3 * * *"
        job = "reports.nightly"
        payload = { format = "pdf" }
        priority = 4
        enabled = false
        [mail]
        transport = "smtp"
        from = "Shop <shop@example.com>"
        [mail.smtp]
        host = "smtp.example.com"
        port = 2525
        tls = "tls"
        username = "mailer"
        password = "secret"
        tls_ca_file = "ca.pem"
        timeout_secs = 9
        [mail.file]
        dir = "mail"
        [telemetry.otlp]
        enabled = true
        endpoint = "http://127.0.0.1:4318/v1/traces"
        service_name = "shop"
        timeout_ms = 5000
        headers = { "x-api-key" = "secret-otlp-key" }
    "#;
    let dir = dir_with(&[("autumn.toml", full)]);
    let config = load_ok(&dir, &[]);
    let settings = config.effective_settings();
    let source = Source::File(file(&dir, "autumn.toml"));
    // Every key, each of the rule's six and each of the schedule's five.
    assert_eq!(settings.len(), 112 + 3 + 3 + 6 + 5 + 10 + 5);
    for setting in &settings {
        assert_eq!(setting.source, source, "{setting}");
        assert_ne!(setting.value, "<unset>", "{setting}");
        assert!(
            !setting.value.contains("0123456789abcdef") && !setting.value.contains("secret"),
            "a credential is shown: {setting}"
        );
    }
    assert_eq!(
        config
            .security
            .submit_token
            .effective_backend(&config.idempotency),
        Backend::Redis
    );
}

#[test]
fn otlp_headers_are_shown_by_name_only_and_export_needs_an_endpoint() {
    let config =
        AutumnConfig::from_toml_str("[telemetry.otlp]\nheaders = { \"x-api-key\" = \"k3y\" }\n")
            .expect("headers alone, export off");
    let headers = config
        .effective_settings()
        .into_iter()
        .find(|setting| setting.key == "telemetry.otlp.headers")
        .expect("listed");
    assert_eq!(headers.value, r#"{"x-api-key" = "(set)"}"#);
    assert!(!format!("{:?}", config.telemetry.otlp).contains("k3y"));

    let error =
        AutumnConfig::from_toml_str("[telemetry.otlp]\nenabled = true\n").expect_err("no endpoint");
    assert_eq!(error.key(), Some("telemetry.otlp.endpoint"));
    assert!(one_line(&error).contains("is missing"), "{error}");
    let variable = "AUTUMN_TELEMETRY__OTLP__ENDPOINT";
    let error = load_err(
        &dir_with(&[]),
        &[
            ("AUTUMN_TELEMETRY__OTLP__ENABLED", "true"),
            (variable, "collector:4318"),
        ],
    );
    assert_eq!(error.key(), Some("telemetry.otlp.endpoint"));
    assert_eq!(error.origin(), Some(Source::Env(variable.to_owned())));
    let error = AutumnConfig::from_toml_str(
        "[telemetry.otlp]\nenabled = true\nendpoint = \"http://c/v1/traces\"\nheaders = { \"bad name\" = \"v\" }\n",
    )
    .expect_err("a header name with a space");
    assert_eq!(error.key(), Some("telemetry.otlp.headers"));
}

#[test]
fn redaction() {
    assert_eq!(
        redact("redis://user:secret@host/0"),
        "redis://user:***@host/0"
    );
    assert_eq!(redact("postgres://u:p@h/db"), "postgres://u:***@h/db");
    assert_eq!(redact("redis://:pw@host:6379"), "redis://:***@host:6379");
    assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    assert_eq!(
        redact("redis://localhost:6379/0"),
        "redis://localhost:6379/0"
    );
    assert_eq!(redact("sqlite://data/app.db"), "sqlite://data/app.db");
    assert_eq!(
        redact("postgres://h/db?user=u&password=x&sslmode=require#f"),
        "postgres://h/db?user=u&password=***&sslmode=require#f"
    );
    assert_eq!(
        redact("postgres://u:a@b@h/db"),
        "postgres://u:***@h/db",
        "the host follows the last `@`"
    );
    assert_eq!(
        redact("string \"redis://u:pw@h/0\", expected u16"),
        "string \"redis://u:***@h/0\", expected u16"
    );
    assert_eq!(redact("no url here"), "no url here");
}

// ---- autumn.toml.example --------------------------------------------------------------------

/// `autumn.toml.example`, found in the crate directory or one of its ancestors (the workspace
/// root).
fn example_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("autumn.toml.example"))
        .find(|path| path.is_file())
        .expect("autumn.toml.example should be in the workspace root")
}

/// The example loads to the defaults and lists every key, commented out or not, in the order
/// `effective_settings` reports them.
#[test]
fn example_file_matches_defaults_and_lists_every_key() {
    let path = example_file();
    let text = std::fs::read_to_string(&path).expect("read autumn.toml.example");
    let config = AutumnConfig::from_toml_str(&text).expect("autumn.toml.example should load");
    assert_eq!(config, AutumnConfig::default());

    let mut section = String::new();
    let mut keys = Vec::new();
    for line in text.lines().map(str::trim) {
        // A commented-out table is an example entry of a map with none by
        // default (`# [rate_limit.rules.login]`): its keys are no defaults.
        if let Some(name) = line
            .trim_start_matches(['#', ' '])
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
        {
            section = name.to_owned();
        } else if section.starts_with("rate_limit.rules.") || section.starts_with("jobs.schedule.")
        {
            continue;
        } else if let Some((key, _)) = line.trim_start_matches(['#', ' ']).split_once(" = ")
            && !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            keys.push(format!("{section}.{key}"));
        }
    }
    let listed: Vec<String> = AutumnConfig::default()
        .effective_settings()
        .into_iter()
        .map(|setting| setting.key)
        .collect();
    assert_eq!(keys, listed);
}

// ---- values that would switch a guarantee off ------------------------------------------------

#[test]
fn a_zero_ttl_is_refused_naming_the_key_and_its_source() {
    for key in [
        "idempotency.ttl_secs",
        "idempotency.in_flight_ttl_secs",
        "security.submit_token.ttl_secs",
        "security.submit_token.in_flight_ttl_secs",
    ] {
        let (table, name) = key.rsplit_once('.').expect("a dotted key");
        let dir = dir_with(&[("autumn.toml", &format!("[{table}]\n{name} = 0\n"))]);
        let error = load_err(&dir, &[]);
        let message = one_line(&error);
        assert_eq!(error.key(), Some(key), "{message}");
        assert_eq!(
            error.origin(),
            Some(Source::File(file(&dir, "autumn.toml"))),
            "{message}"
        );
        assert!(message.contains("must be at least 1"), "{message}");
    }

    let variable = "AUTUMN_IDEMPOTENCY__IN_FLIGHT_TTL_SECS";
    let error = load_err(&dir_with(&[]), &[(variable, "0")]);
    assert_eq!(
        one_line(&error),
        format!(
            "invalid value for `idempotency.in_flight_ttl_secs` in environment variable {variable}: \
             must be at least 1: a lock that lapses at once lets two overlapping duplicates both \
             run the handler"
        )
    );
}

#[test]
fn server_limits_that_serve_nobody_are_refused() {
    for (toml, key) in [
        ("[server]\nmax_connections = 0\n", "server.max_connections"),
        (
            "[server]\nmax_header_bytes = 100\n",
            "server.max_header_bytes",
        ),
        (
            "[server.timeouts]\nheader_read_timeout_ms = 0\n",
            "server.timeouts.header_read_timeout_ms",
        ),
    ] {
        let error = AutumnConfig::from_toml_str(toml).expect_err(toml);
        assert_eq!(error.key(), Some(key), "{error}");
        assert_eq!(error.origin(), Some(Source::Inline), "{error}");
    }
}

#[test]
fn proxy_protocol_without_trusted_proxies_is_refused_saying_why() {
    let error = AutumnConfig::from_toml_str("[server]\nproxy_protocol = true\n")
        .expect_err("no proxy to read a header from");
    assert_eq!(error.key(), Some("server.proxy_protocol"), "{error}");
    assert!(
        one_line(&error).contains("needs server.trusted_proxies"),
        "{error}"
    );
    let config = AutumnConfig::from_toml_str(
        "[server]\nproxy_protocol = true\ntrusted_proxies = [\"10.0.0.0/8\"]\n",
    )
    .expect("with a trusted proxy");
    assert!(config.server.proxy_protocol);
    assert!(
        !AutumnConfig::default().server.proxy_protocol,
        "off by default"
    );
}

#[test]
fn a_config_changed_in_code_is_checked_too() {
    let mut config = AutumnConfig::default();
    assert!(config.validate().is_ok(), "every default is valid");
    config.idempotency.in_flight_ttl_secs = 0;
    let error = config.validate().expect_err("a zero lock TTL");
    assert_eq!(error.key(), Some("idempotency.in_flight_ttl_secs"));
    assert_eq!(error.origin(), Some(Source::Code));
    assert!(
        one_line(&error).starts_with("invalid value for `idempotency.in_flight_ttl_secs` in code:"),
        "{error}"
    );
}

#[test]
fn server_defaults_are_safe_and_zero_turns_optional_limits_off() {
    let config = AutumnConfig::default();
    assert_eq!(
        config.server.request_timeout(),
        Some(Duration::from_secs(30))
    );
    assert!(config.server.request_timeout() < Some(config.idempotency.in_flight_ttl()));
    assert_eq!(config.server.header_read_timeout(), Duration::from_secs(10));
    assert_eq!(
        config.server.keep_alive_timeout(),
        Some(Duration::from_secs(15))
    );
    assert_eq!(config.server.shutdown_grace(), Duration::from_secs(10));

    let off = AutumnConfig::from_toml_str(
        "[server.timeouts]\nrequest_timeout_ms = 0\nkeep_alive_timeout_ms = 0\n",
    )
    .expect("zero turns these off");
    assert_eq!(off.server.request_timeout(), None);
    assert_eq!(off.server.keep_alive_timeout(), None);
}

#[test]
fn tenancy_strategies_parse_and_bad_combinations_name_their_key() {
    let config = AutumnConfig::from_toml_str(
        "[tenancy]\nenabled = true\nstrategy = \"subdomain\"\nbase_domain = \"example.com\"\n",
    )
    .expect("subdomain with a base domain");
    assert_eq!(config.tenancy.strategy, super::TenantStrategy::Subdomain);
    for (toml, key) in [
        ("strategy = \"subdomain\"\n", "tenancy.base_domain"),
        (
            "strategy = \"subdomain\"\nbase_domain = \".example.com\"\n",
            "tenancy.base_domain",
        ),
        ("header = \"bad header\"\n", "tenancy.header"),
        ("exempt_paths = [\"signup\"]\n", "tenancy.exempt_paths"),
        (
            "strategy = \"session\"\n[session]\nenabled = false\n",
            "tenancy.strategy",
        ),
    ] {
        let error = AutumnConfig::from_toml_str(&format!("[tenancy]\nenabled = true\n{toml}"))
            .expect_err(toml);
        assert_eq!(error.key(), Some(key), "{toml}: {error}");
    }
    // Off, nothing is checked: the defaults of a disabled section never stop an app.
    AutumnConfig::from_toml_str("[tenancy]\nstrategy = \"subdomain\"\n").expect("tenancy off");
    let error = AutumnConfig::from_toml_str("[tenancy]\nstrategy = \"cookie\"\n")
        .expect_err("an unknown strategy");
    assert!(one_line(&error).contains("tenancy.strategy"), "{error}");
}

// ---- finding the configuration file ----------------------------------------------------------

/// A project root (it has a `Cargo.lock`) holding `files`, with an empty `src/bin` below it.
fn project_with(files: &[(&str, &str)]) -> (TempDir, PathBuf) {
    let project = dir_with(files);
    std::fs::write(project.path().join("Cargo.lock"), "").expect("write Cargo.lock");
    let nested = project.path().join("src").join("bin");
    std::fs::create_dir_all(&nested).expect("create src/bin");
    (project, nested)
}

#[test]
fn autumn_toml_is_found_from_a_directory_below_it() {
    let (project, nested) = project_with(&[
        ("autumn.toml", "[server]\nport = 8080\n"),
        ("autumn-dev.toml", "[server]\nhost = \"0.0.0.0\"\n"),
    ]);
    let config = AutumnConfig::discover(&nested, &env(&[])).expect("config");
    assert_eq!(config.server.port, 8080);
    assert_eq!(config.server.host, "0.0.0.0", "the profile file next to it");
    assert_eq!(
        config.files(),
        [
            ConfigFile {
                path: file(&project, "autumn.toml"),
                found: true
            },
            ConfigFile {
                path: file(&project, "autumn-dev.toml"),
                found: true
            },
        ]
    );
    assert_eq!(
        setting(&config.effective_settings(), "server.port").source,
        Source::File(file(&project, "autumn.toml"))
    );
}

#[test]
fn the_nearest_autumn_toml_wins_and_the_search_stops_at_the_workspace_root() {
    let (project, nested) = project_with(&[("autumn.toml", "[server]\nport = 1\n")]);
    std::fs::write(nested.join("autumn.toml"), "[server]\nport = 2\n").expect("write");
    let config = AutumnConfig::discover(&nested, &env(&[])).expect("config");
    assert_eq!(config.server.port, 2);

    // Above the workspace root is another project's business.
    let outer = dir_with(&[("autumn.toml", "[server]\nport = 3\n")]);
    let inner = outer.path().join("app");
    std::fs::create_dir_all(inner.join(".git")).expect("create app/.git");
    let config = AutumnConfig::discover(&inner, &env(&[])).expect("config");
    assert_eq!(config.server.port, ServerConfig::default().port);
    assert_eq!(
        config.files()[0],
        ConfigFile {
            path: inner.join("autumn.toml"),
            found: false
        },
        "looked for where it started"
    );
    drop(project);
}

#[test]
fn autumn_config_names_the_file_to_read() {
    let (project, nested) = project_with(&[
        ("autumn.toml", "[server]\nport = 1\n"),
        ("deploy.toml", "[server]\nport = 4\n"),
    ]);
    let config = AutumnConfig::discover(&nested, &env(&[("AUTUMN_CONFIG", "../../deploy.toml")]))
        .expect("config");
    assert_eq!(config.server.port, 4);
    assert!(config.files()[0].found);
    assert!(config.files()[0].path.ends_with("deploy.toml"));

    let absolute = file(&project, "deploy.toml");
    let config = AutumnConfig::discover(
        Path::new("/"),
        &env(&[("AUTUMN_CONFIG", absolute.to_str().expect("a UTF-8 path"))]),
    )
    .expect("config");
    assert_eq!(config.server.port, 4);

    // Asked for by name, a missing file is an error rather than the defaults.
    let error = AutumnConfig::discover(&nested, &env(&[("AUTUMN_CONFIG", "missing.toml")]))
        .expect_err("a missing AUTUMN_CONFIG file");
    assert!(matches!(error, ConfigError::Read { .. }), "{error}");
    assert!(one_line(&error).contains("missing.toml"), "{error}");
}

#[test]
fn redis_tls_files_come_from_env_and_are_listed_in_the_effective_settings() {
    let dir = dir_with(&[(
        "autumn.toml",
        "[idempotency.redis]\nurl = \"rediss://cache:6380\"\n",
    )]);
    let config = load_ok(
        &dir,
        &[
            (
                "AUTUMN_IDEMPOTENCY__REDIS__TLS_CA_FILE",
                "/etc/redis/ca.pem",
            ),
            (
                "AUTUMN_IDEMPOTENCY__REDIS__TLS_CERT_FILE",
                "/etc/redis/client.pem",
            ),
            (
                "AUTUMN_IDEMPOTENCY__REDIS__TLS_KEY_FILE",
                "/etc/redis/client.key",
            ),
        ],
    );
    let redis = &config.idempotency.redis;
    assert_eq!(redis.tls_ca_file.as_deref(), Some("/etc/redis/ca.pem"));
    assert_eq!(
        redis.tls_cert_file.as_deref(),
        Some("/etc/redis/client.pem")
    );
    assert_eq!(redis.tls_key_file.as_deref(), Some("/etc/redis/client.key"));
    let settings = config.effective_settings();
    for key in [
        "idempotency.redis.tls_ca_file",
        "idempotency.redis.tls_cert_file",
        "idempotency.redis.tls_key_file",
    ] {
        assert!(
            settings.iter().any(|setting| setting.key == key),
            "{key} missing from the effective settings"
        );
    }
}

#[test]
fn redis_tls_files_that_would_be_ignored_are_refused_naming_the_key() {
    let dir = dir_with(&[(
        "autumn.toml",
        "[idempotency.redis]\nurl = \"rediss://cache:6380\"\ntls_cert_file = \"/c.pem\"\n",
    )]);
    let error = load_err(&dir, &[]);
    assert_eq!(error.key(), Some("idempotency.redis.tls_key_file"));
    assert!(one_line(&error).contains("must be set with idempotency.redis.tls_cert_file"));

    let dir = dir_with(&[(
        "autumn.toml",
        "[idempotency.redis]\nurl = \"redis://cache:6379\"\ntls_ca_file = \"/ca.pem\"\n",
    )]);
    let error = load_err(&dir, &[]);
    assert_eq!(error.key(), Some("idempotency.redis.tls_ca_file"));
    assert!(one_line(&error).contains("does not use TLS"));

    let dir = dir_with(&[(
        "autumn.toml",
        "[idempotency.redis]\nurl = \"rediss+cluster://h:7000\"\ntls_ca_file = \"/ca.pem\"\n",
    )]);
    load_ok(&dir, &[]);
}

#[test]
fn a_short_secret_key_is_refused_naming_the_key() {
    for (key, toml) in [
        (
            "security.secret_key",
            "[security]\nsecret_key = \"too-short\"\n",
        ),
        (
            "security.old_secret_keys",
            "[security]\nold_secret_keys = [\"too-short\"]\n",
        ),
    ] {
        let dir = dir_with(&[("autumn.toml", toml)]);
        let error = load(&dir, &[])
            .expect_err("a short secret is refused")
            .to_string();
        assert!(error.contains(key), "{error}");
        assert!(error.contains("at least 32"), "{error}");
        assert!(
            !error.contains("too-short"),
            "the secret is not shown: {error}"
        );
    }
}

#[test]
fn the_secret_key_is_not_shown_by_debug() {
    let dir = dir_with(&[(
        "autumn.toml",
        "[security]\nsecret_key = \"0123456789abcdef0123456789abcdef-new\"\n",
    )]);
    let config = load_ok(&dir, &[]);
    let shown = format!("{config:?}");
    assert!(!shown.contains("0123456789abcdef"), "{shown}");
}

// ---- [jobs] ---------------------------------------------------------------------------------

const WITH_DATABASE: &str = "[database]\nurl = \"postgres://postgres@127.0.0.1/app\"\n";

#[test]
fn a_schedule_table_is_read_with_its_payload_as_json() {
    let config = AutumnConfig::from_toml_str(&format!(
        r#"{WITH_DATABASE}
        [jobs.schedule.nightly-report]
        cron = "30 3 * * *"
        job = "reports.nightly"
        payload = {{ format = "pdf", copies = 2, since = 2026-01-01, to = ["ops"] }}
        priority = 5

        [jobs.schedule.cleanup]
        enabled = false
        "#
    ))
    .expect("config");
    let nightly = &config.jobs.schedule["nightly-report"];
    assert_eq!(nightly.cron.as_deref(), Some("30 3 * * *"));
    assert_eq!(nightly.job.as_deref(), Some("reports.nightly"));
    assert_eq!((nightly.priority, nightly.enabled), (Some(5), true));
    let payload: serde_json::Value =
        serde_json::from_str(&nightly.payload_json().expect("a payload")).expect("JSON");
    assert_eq!(
        payload,
        serde_json::json!({"format": "pdf", "copies": 2, "since": "2026-01-01", "to": ["ops"]})
    );
    let cleanup = &config.jobs.schedule["cleanup"];
    assert!(!cleanup.enabled);
    assert_eq!(
        (cleanup.cron.as_ref(), cleanup.payload_json()),
        (None, None)
    );
    let settings = config.effective_settings();
    assert_eq!(
        setting(&settings, "jobs.schedule.nightly-report.cron").value,
        "\"30 3 * * *\""
    );
    assert_eq!(
        setting(&settings, "jobs.schedule.cleanup.enabled").value,
        "false"
    );
}

#[test]
fn an_invalid_cron_is_refused_naming_its_key_and_why() {
    let dir = dir_with(&[(
        "autumn.toml",
        &format!("{WITH_DATABASE}[jobs.schedule.nightly]\ncron = \"61 3 * * *\"\njob = \"x\"\n"),
    )]);
    let error = load_err(&dir, &[]);
    let message = one_line(&error);
    assert_eq!(error.key(), Some("jobs.schedule.nightly.cron"), "{message}");
    assert_eq!(
        error.origin(),
        Some(Source::File(file(&dir, "autumn.toml")))
    );
    assert!(message.contains("61 is outside 0-59"), "{message}");
    assert!(message.contains("\"30 3 * * *\""), "{message}");
    // Set from the environment, the variable is named.
    let dir = dir_with(&[(
        "autumn.toml",
        &format!("{WITH_DATABASE}[jobs.schedule.nightly]\ncron = \"30 3 * * *\"\n"),
    )]);
    let error = load_err(
        &dir,
        &[("AUTUMN_JOBS__SCHEDULE__NIGHTLY__CRON", "every day")],
    );
    assert_eq!(error.key(), Some("jobs.schedule.nightly.cron"));
    assert_eq!(
        error.origin(),
        Some(Source::Env(
            "AUTUMN_JOBS__SCHEDULE__NIGHTLY__CRON".to_owned()
        ))
    );
}

#[test]
fn variables_change_a_schedule_key_by_key() {
    let dir = dir_with(&[(
        "autumn.toml",
        &format!(
            "{WITH_DATABASE}[jobs.schedule.nightly]\ncron = \"30 3 * * *\"\njob = \"reports.nightly\"\n"
        ),
    )]);
    let config = load_ok(
        &dir,
        &[
            ("AUTUMN_JOBS__SCHEDULE__NIGHTLY__CRON", "0 4 * * *"),
            ("AUTUMN_JOBS__SCHEDULE__NIGHTLY__ENABLED", "false"),
            ("AUTUMN_JOBS__SCHEDULE__NIGHTLY__PAYLOAD__COPIES", "2"),
        ],
    );
    let nightly = &config.jobs.schedule["nightly"];
    assert_eq!(nightly.cron.as_deref(), Some("0 4 * * *"));
    assert_eq!(nightly.job.as_deref(), Some("reports.nightly"));
    assert!(!nightly.enabled);
    assert_eq!(nightly.payload_json().as_deref(), Some("{\"copies\":2}"));
    assert_eq!(
        config.source("jobs.schedule.nightly.cron"),
        Source::Env("AUTUMN_JOBS__SCHEDULE__NIGHTLY__CRON".to_owned())
    );
}

#[test]
fn a_schedule_or_the_admin_endpoints_without_a_database_are_refused_naming_database_url() {
    let dir = dir_with(&[(
        "autumn.toml",
        "[jobs.schedule.nightly]\ncron = \"30 3 * * *\"\njob = \"reports.nightly\"\n",
    )]);
    let error = load_err(&dir, &[]);
    let message = one_line(&error);
    assert_eq!(error.key(), Some("database.url"), "{message}");
    assert_eq!(
        error.origin(),
        Some(Source::File(file(&dir, "autumn.toml")))
    );
    assert!(message.contains("jobs.schedule.nightly"), "{message}");
    // Switched off, it needs nothing.
    AutumnConfig::from_toml_str("[jobs.schedule.nightly]\nenabled = false\n")
        .expect("a disabled schedule");
    let error = AutumnConfig::from_toml_str("[jobs.admin]\ntoken = \"0123456789abcdef\"\n")
        .expect_err("endpoints without a database");
    assert_eq!(error.key(), Some("database.url"));
    assert!(error.to_string().contains("jobs.admin.token"), "{error}");
    AutumnConfig::from_toml_str("[jobs.admin]\ntoken = \"0123456789abcdef\"\nenabled = false\n")
        .expect("endpoints switched off");
}

#[test]
fn a_short_admin_token_is_refused_and_none_serves_nothing() {
    let error =
        AutumnConfig::from_toml_str(&format!("{WITH_DATABASE}[jobs.admin]\ntoken = \"short\"\n"))
            .expect_err("a short token");
    assert_eq!(error.key(), Some("jobs.admin.token"));
    assert!(
        error.to_string().contains("at least 16 characters"),
        "{error}"
    );
    let config = AutumnConfig::from_toml_str(&format!(
        "{WITH_DATABASE}[jobs.admin]\ntoken = \"0123456789abcdef\"\n"
    ))
    .expect("config");
    assert!(config.jobs.admin.serves_endpoints());
    assert!(!config.jobs.admin.allow_payloads);
    let settings = config.effective_settings();
    assert_eq!(setting(&settings, "jobs.admin.token").value, "\"(set)\"");
    assert!(!AutumnConfig::default().jobs.admin.serves_endpoints());
}

#[test]
fn an_unknown_schedule_key_is_named() {
    let error = AutumnConfig::from_toml_str(&format!(
        "{WITH_DATABASE}[jobs.schedule.nightly]\ncorn = \"30 3 * * *\"\n"
    ))
    .expect_err("a typo");
    assert_eq!(error.key(), Some("jobs.schedule.nightly.corn"));
    assert!(error.to_string().contains("cron"), "{error}");
}
