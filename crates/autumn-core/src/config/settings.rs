//! [`AutumnConfig::effective_settings`] and password redaction.

use std::borrow::Cow;
use std::fmt::Display;

use toml::Value;

use super::{
    ActuatorConfig, AutumnConfig, Backend, CompressionConfig, CorsConfig, CrossOriginConfig,
    DatabaseConfig, FileMailConfig, HeadersConfig, Http2Config, IdempotencyAdminConfig,
    IdempotencyConfig, JobScheduleConfig, JobsAdminConfig, JobsConfig, LogConfig, MailConfig,
    MailTransportKind, MemoryConfig, OnStoreError, OpenApiConfig, OtlpConfig, QuotaConfig,
    RateLimitConfig, RateLimitRule, RedisConfig, SecurityConfig, ServerConfig, ServerTlsConfig,
    SessionConfig, Setting, SmtpConfig, Source, StaticConfig, SubmitTokenConfig, TelemetryConfig,
    TenancyConfig, TimeoutsConfig,
};

/// How an unset optional key is shown.
const UNSET: &str = "<unset>";

impl AutumnConfig {
    /// Every configuration key with its final value and the source that set it, in the order of
    /// `autumn.toml.example`, for logging at launch.
    ///
    /// Values are rendered as TOML literals (`"127.0.0.1"`, `3000`, `["/a"]`), unset optional
    /// keys as `<unset>`, and passwords in URLs are replaced by `***`.
    #[must_use]
    pub fn effective_settings(&self) -> Vec<Setting> {
        // Exhaustive destructuring: adding a field breaks the build here until it is listed.
        let Self {
            server,
            log,
            actuator,
            database,
            idempotency,
            security,
            session,
            tenancy,
            static_files,
            compression,
            cors,
            rate_limit,
            openapi,
            jobs,
            mail,
            telemetry,
            profile: _,
            provenance,
            files: _,
        } = self;
        let mut out = Leaves::default();

        let ServerConfig {
            host,
            port,
            max_connections,
            max_connections_per_client,
            trusted_proxies,
            proxy_protocol,
            max_header_bytes,
            shutdown_grace_ms,
            shutdown_delay_ms,
            timeouts,
            tls,
            http2,
        } = server;
        out.string("server.host", host);
        out.plain("server.port", port);
        out.plain("server.max_connections", max_connections);
        out.plain(
            "server.max_connections_per_client",
            max_connections_per_client,
        );
        out.strings("server.trusted_proxies", trusted_proxies);
        out.plain("server.proxy_protocol", proxy_protocol);
        out.plain("server.max_header_bytes", max_header_bytes);
        out.plain("server.shutdown_grace_ms", shutdown_grace_ms);
        out.plain("server.shutdown_delay_ms", shutdown_delay_ms);
        let TimeoutsConfig {
            request_timeout_ms,
            header_read_timeout_ms,
            keep_alive_timeout_ms,
            min_body_rate,
        } = timeouts;
        out.optional(
            "server.timeouts.request_timeout_ms",
            request_timeout_ms.as_ref(),
        );
        out.plain(
            "server.timeouts.header_read_timeout_ms",
            header_read_timeout_ms,
        );
        out.plain(
            "server.timeouts.keep_alive_timeout_ms",
            keep_alive_timeout_ms,
        );
        out.plain("server.timeouts.min_body_rate", min_body_rate);
        let ServerTlsConfig {
            cert_file,
            key_file,
            reload_interval_ms,
            redirect_port,
        } = tls;
        out.optional_string("server.tls.cert_file", cert_file.as_deref());
        out.optional_string("server.tls.key_file", key_file.as_deref());
        out.plain("server.tls.reload_interval_ms", reload_interval_ms);
        out.optional("server.tls.redirect_port", redirect_port.as_ref());
        let Http2Config {
            enabled,
            h2c,
            max_concurrent_streams,
            keep_alive_interval_ms,
        } = http2;
        out.plain("server.http2.enabled", enabled);
        out.plain("server.http2.h2c", h2c);
        out.plain(
            "server.http2.max_concurrent_streams",
            max_concurrent_streams,
        );
        out.plain(
            "server.http2.keep_alive_interval_ms",
            keep_alive_interval_ms,
        );

        let LogConfig {
            level,
            format,
            access_log,
        } = log;
        out.string("log.level", level);
        out.string("log.format", format.as_str());
        out.plain("log.access_log", access_log);

        let ActuatorConfig {
            enabled,
            port,
            host,
            metrics_on_app_port,
            health_timeout_ms,
            health_cache_ms,
            optional,
        } = actuator;
        out.plain("actuator.enabled", enabled);
        out.optional("actuator.port", port.as_ref());
        out.string("actuator.host", host);
        out.plain("actuator.metrics_on_app_port", metrics_on_app_port);
        out.plain("actuator.health_timeout_ms", health_timeout_ms);
        out.plain("actuator.health_cache_ms", health_cache_ms);
        out.strings("actuator.optional", optional);

        let DatabaseConfig {
            url,
            pool_size,
            connect_timeout_ms,
            statement_cache,
            migrate_on_start,
        } = database;
        out.optional_string("database.url", url.as_deref());
        out.plain("database.pool_size", pool_size);
        out.plain("database.connect_timeout_ms", connect_timeout_ms);
        out.plain("database.statement_cache", statement_cache);
        out.optional("database.migrate_on_start", *migrate_on_start);

        let IdempotencyConfig {
            enabled,
            backend,
            ttl_secs,
            in_flight_ttl_secs,
            in_flight_wait_ms,
            allow_memory_in_production,
            max_body_bytes,
            max_record_bytes,
            record_errors,
            anonymous_keys,
            require_key,
            fingerprint,
            fingerprint_ignore,
            fingerprint_only,
            docs_url,
            expiry_header,
            memory,
            redis,
            admin,
            quota,
        } = idempotency;
        out.plain("idempotency.enabled", enabled);
        out.string("idempotency.backend", backend.as_str());
        out.plain("idempotency.ttl_secs", ttl_secs);
        out.plain("idempotency.in_flight_ttl_secs", in_flight_ttl_secs);
        out.plain("idempotency.in_flight_wait_ms", in_flight_wait_ms);
        out.plain(
            "idempotency.allow_memory_in_production",
            allow_memory_in_production,
        );
        out.plain("idempotency.max_body_bytes", max_body_bytes);
        out.plain("idempotency.max_record_bytes", max_record_bytes);
        out.string("idempotency.record_errors", record_errors.as_str());
        out.string("idempotency.anonymous_keys", anonymous_keys.as_str());
        out.plain("idempotency.require_key", require_key);
        out.string("idempotency.fingerprint", fingerprint.as_str());
        out.strings("idempotency.fingerprint_ignore", fingerprint_ignore);
        out.strings("idempotency.fingerprint_only", fingerprint_only);
        out.optional_string("idempotency.docs_url", docs_url.as_deref());
        out.plain("idempotency.expiry_header", expiry_header);
        let MemoryConfig {
            max_entries,
            max_bytes,
        } = memory;
        out.plain("idempotency.memory.max_entries", max_entries);
        out.plain("idempotency.memory.max_bytes", max_bytes);
        let RedisConfig {
            url,
            key_prefix,
            tls_ca_file,
            tls_cert_file,
            tls_key_file,
        } = redis;
        out.optional_string("idempotency.redis.url", url.as_deref());
        out.string("idempotency.redis.key_prefix", key_prefix);
        out.optional_string("idempotency.redis.tls_ca_file", tls_ca_file.as_deref());
        out.optional_string("idempotency.redis.tls_cert_file", tls_cert_file.as_deref());
        out.optional_string("idempotency.redis.tls_key_file", tls_key_file.as_deref());
        let IdempotencyAdminConfig {
            enabled,
            token,
            allow_bodies,
        } = admin;
        out.optional_string(
            "idempotency.admin.enabled",
            enabled.map(|on| if on { "true" } else { "false" }),
        );
        // The token is a credential: only whether it is set is shown.
        out.optional_string("idempotency.admin.token", token.as_ref().map(|_| "(set)"));
        out.plain("idempotency.admin.allow_bodies", allow_bodies);
        let QuotaConfig {
            enabled,
            max_records,
            max_bytes,
            backend,
            max_callers,
        } = quota;
        out.plain("idempotency.quota.enabled", enabled);
        out.plain("idempotency.quota.max_records", max_records);
        out.plain("idempotency.quota.max_bytes", max_bytes);
        out.optional_string("idempotency.quota.backend", backend.map(Backend::as_str));
        out.plain("idempotency.quota.max_callers", max_callers);

        let SecurityConfig {
            secret_key,
            old_secret_keys,
            encrypt_recorded_bodies,
            cross_origin,
            submit_token,
            headers,
        } = security;
        // Secrets: only whether they are set, and how many.
        out.optional_string("security.secret_key", secret_key.as_ref().map(|_| "(set)"));
        out.strings(
            "security.old_secret_keys",
            &vec!["(set)".to_owned(); old_secret_keys.len()],
        );
        out.plain("security.encrypt_recorded_bodies", encrypt_recorded_bodies);
        let CrossOriginConfig {
            enabled,
            trusted_origins,
            exempt_paths,
        } = cross_origin;
        out.plain("security.cross_origin.enabled", enabled);
        out.strings("security.cross_origin.trusted_origins", trusted_origins);
        out.strings("security.cross_origin.exempt_paths", exempt_paths);
        let SubmitTokenConfig {
            enabled,
            field_name,
            ttl_secs,
            in_flight_ttl_secs,
            backend,
            exempt_paths,
            max_form_bytes,
            max_record_bytes,
            in_flight_wait_ms,
        } = submit_token;
        out.plain("security.submit_token.enabled", enabled);
        out.string("security.submit_token.field_name", field_name);
        out.plain("security.submit_token.ttl_secs", ttl_secs);
        out.plain(
            "security.submit_token.in_flight_ttl_secs",
            in_flight_ttl_secs,
        );
        out.optional_string(
            "security.submit_token.backend",
            backend.map(|backend| backend.as_str()),
        );
        out.strings("security.submit_token.exempt_paths", exempt_paths);
        out.plain("security.submit_token.max_form_bytes", max_form_bytes);
        out.plain("security.submit_token.max_record_bytes", max_record_bytes);
        out.plain("security.submit_token.in_flight_wait_ms", in_flight_wait_ms);
        let HeadersConfig {
            enabled,
            hsts,
            content_security_policy,
            referrer_policy,
        } = headers;
        out.plain("security.headers.enabled", enabled);
        out.optional("security.headers.hsts", *hsts);
        out.string(
            "security.headers.content_security_policy",
            content_security_policy,
        );
        out.string("security.headers.referrer_policy", referrer_policy);

        let SessionConfig {
            enabled,
            cookie_name,
            backend,
            ttl_secs,
            absolute_ttl_secs,
            same_site,
            secure,
            allow_memory_in_production,
        } = session;
        out.plain("session.enabled", enabled);
        out.string("session.cookie_name", cookie_name);
        out.optional_string("session.backend", backend.map(|backend| backend.as_str()));
        out.plain("session.ttl_secs", ttl_secs);
        out.plain("session.absolute_ttl_secs", absolute_ttl_secs);
        out.string("session.same_site", same_site.as_str());
        out.optional("session.secure", *secure);
        out.plain(
            "session.allow_memory_in_production",
            allow_memory_in_production,
        );

        let TenancyConfig {
            enabled,
            strategy,
            header,
            base_domain,
            exempt_paths,
        } = tenancy;
        out.plain("tenancy.enabled", enabled);
        out.string("tenancy.strategy", strategy.as_str());
        out.string("tenancy.header", header);
        out.optional_string("tenancy.base_domain", base_domain.as_deref());
        out.strings("tenancy.exempt_paths", exempt_paths);

        let StaticConfig { dir, mount } = static_files;
        out.optional_string("static.dir", dir.as_deref());
        out.string("static.mount", mount);

        let CompressionConfig { enabled } = compression;
        out.plain("compression.enabled", enabled);

        let CorsConfig {
            allowed_origins,
            allowed_methods,
            allowed_headers,
            max_age_secs,
        } = cors;
        out.strings("cors.allowed_origins", allowed_origins);
        out.strings("cors.allowed_methods", allowed_methods);
        out.strings("cors.allowed_headers", allowed_headers);
        out.plain("cors.max_age_secs", max_age_secs);

        let RateLimitConfig {
            enabled,
            backend,
            max_clients,
            rules,
        } = rate_limit;
        out.plain("rate_limit.enabled", enabled);
        out.optional_string("rate_limit.backend", backend.map(Backend::as_str));
        out.plain("rate_limit.max_clients", max_clients);
        for (name, rule) in rules {
            let RateLimitRule {
                limit,
                window_secs,
                burst,
                by,
                routes,
                on_store_error,
            } = rule;
            let key = |leaf: &str| format!("rate_limit.rules.{name}.{leaf}");
            out.plain(key("limit"), limit);
            out.plain(key("window_secs"), window_secs);
            out.optional(key("burst"), *burst);
            out.string(key("by"), &by.as_config());
            out.strings(key("routes"), routes);
            out.optional_string(
                key("on_store_error"),
                on_store_error.map(OnStoreError::as_str),
            );
        }

        let OpenApiConfig {
            enabled,
            path,
            title,
            version,
            ui,
            ui_path,
        } = openapi;
        out.optional("openapi.enabled", *enabled);
        out.string("openapi.path", path);
        out.string("openapi.title", title);
        out.string("openapi.version", version);
        out.plain("openapi.ui", ui);
        out.string("openapi.ui_path", ui_path);

        let JobsConfig { schedule, admin } = jobs;
        let JobsAdminConfig {
            enabled,
            token,
            allow_payloads,
        } = admin;
        out.plain("jobs.admin.enabled", enabled);
        out.optional_string("jobs.admin.token", token.as_ref().map(|_| "(set)"));
        out.plain("jobs.admin.allow_payloads", allow_payloads);
        for (name, entry) in schedule {
            let JobScheduleConfig {
                cron,
                job,
                payload: _,
                priority,
                enabled,
            } = entry;
            let key = |leaf: &str| format!("jobs.schedule.{name}.{leaf}");
            out.optional_string(key("cron"), cron.as_deref());
            out.optional_string(key("job"), job.as_deref());
            // As the JSON the job is given.
            out.optional_string(key("payload"), entry.payload_json().as_deref());
            out.optional(key("priority"), *priority);
            out.plain(key("enabled"), enabled);
        }
        let MailConfig {
            transport,
            from,
            smtp,
            file,
        } = mail;
        out.optional_string("mail.transport", transport.map(MailTransportKind::as_str));
        out.optional_string("mail.from", from.as_deref());
        let SmtpConfig {
            host,
            port,
            tls,
            username,
            password,
            tls_ca_file,
            timeout_secs,
        } = smtp;
        out.optional_string("mail.smtp.host", host.as_deref());
        out.optional("mail.smtp.port", *port);
        out.string("mail.smtp.tls", tls.as_str());
        out.optional_string("mail.smtp.username", username.as_deref());
        // A credential: only whether it is set is shown.
        out.optional_string("mail.smtp.password", password.as_ref().map(|_| "(set)"));
        out.optional_string("mail.smtp.tls_ca_file", tls_ca_file.as_deref());
        out.plain("mail.smtp.timeout_secs", timeout_secs);
        let FileMailConfig { dir } = file;
        out.string("mail.file.dir", dir);

        let TelemetryConfig { otlp } = telemetry;
        let OtlpConfig {
            enabled,
            endpoint,
            service_name,
            timeout_ms,
            headers,
        } = otlp;
        out.plain("telemetry.otlp.enabled", enabled);
        out.optional_string("telemetry.otlp.endpoint", endpoint.as_deref());
        out.optional_string("telemetry.otlp.service_name", service_name.as_deref());
        out.plain("telemetry.otlp.timeout_ms", timeout_ms);
        // Credentials: the names are shown, each value only as set.
        let shown: Vec<String> = headers
            .keys()
            .map(|name| format!("{} = \"(set)\"", Value::String(name.clone())))
            .collect();
        out.plain(
            "telemetry.otlp.headers",
            format_args!("{{{}}}", shown.join(", ")),
        );

        out.0
            .into_iter()
            .map(|(key, value)| Setting {
                // A table shown as one value (a schedule's payload) was
                // set leaf by leaf: the first leaf's source.
                source: provenance.0.get(key.as_ref()).cloned().unwrap_or_else(|| {
                    match self.source_below(&key) {
                        Source::Code => Source::Default,
                        source => source,
                    }
                }),
                key: key.into_owned(),
                value,
            })
            .collect()
    }
}

/// `(key, rendered value)` pairs in order.
#[derive(Default)]
struct Leaves(Vec<(Cow<'static, str>, String)>);

impl Leaves {
    fn plain(&mut self, key: impl Into<Cow<'static, str>>, value: impl Display) {
        self.0.push((key.into(), value.to_string()));
    }

    fn string(&mut self, key: impl Into<Cow<'static, str>>, value: &str) {
        self.0.push((key.into(), literal(value)));
    }

    fn optional(&mut self, key: impl Into<Cow<'static, str>>, value: Option<impl Display>) {
        self.0.push((
            key.into(),
            value.map_or_else(|| UNSET.to_owned(), |value| value.to_string()),
        ));
    }

    fn optional_string(&mut self, key: impl Into<Cow<'static, str>>, value: Option<&str>) {
        self.0
            .push((key.into(), value.map_or_else(|| UNSET.to_owned(), literal)));
    }

    fn strings(&mut self, key: impl Into<Cow<'static, str>>, values: &[String]) {
        let array = values
            .iter()
            .map(|value| Value::String(redact(value)))
            .collect();
        self.0.push((key.into(), Value::Array(array).to_string()));
    }
}

/// `value`, redacted, as a TOML string literal.
fn literal(value: &str) -> String {
    Value::String(redact(value)).to_string()
}

pub(crate) use autumn_base::redact_passwords as redact;
