//! Values that parse but would switch off a guarantee: refused at startup with the key and
//! where it was set.

use std::time::Duration;

use super::sections::MIN_HEADER_BYTES;
use super::{AutumnConfig, ConfigError, Source};
use crate::cross_origin::TrustedOrigin;

impl AutumnConfig {
    /// Checks values that parse but cannot work, such as a zero TTL, which would record nothing
    /// or let two overlapping duplicates both run.
    ///
    /// [`load_from`](Self::load_from) and the app's launch call this; call it yourself after
    /// changing a loaded configuration in code.
    ///
    /// It also logs a warning (and carries on) for values that work but not as meant: an
    /// `in_flight_wait_ms` (`[idempotency]` or `[security.submit_token]`) that is not shorter
    /// than `server.timeouts.request_timeout_ms`, so a waiting duplicate would be cut off by the
    /// timeout before its wait ends. Loading checks without logging; launch logs once.
    ///
    /// ```
    /// use autumn_core::config::AutumnConfig;
    ///
    /// let error = AutumnConfig::from_toml_str("[idempotency]\nin_flight_ttl_secs = 0\n")
    ///     .unwrap_err();
    /// assert_eq!(error.key(), Some("idempotency.in_flight_ttl_secs"));
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidValue`] naming the first offending key and its source; among them
    /// an entry of `security.cross_origin.trusted_origins` that is not an origin as a browser
    /// writes it (`scheme://host[:port]`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check()?;
        self.warn_about_waits();
        Ok(())
    }

    /// Logs a warning for each wait the request timeout would cut short (see
    /// [`wait_outlasts_timeout`](Self::wait_outlasts_timeout)).
    fn warn_about_waits(&self) {
        let waits = [
            (
                "idempotency.in_flight_wait_ms",
                self.idempotency.enabled,
                self.idempotency.in_flight_wait_ms,
            ),
            (
                "security.submit_token.in_flight_wait_ms",
                self.security.submit_token.enabled,
                self.security.submit_token.in_flight_wait_ms,
            ),
        ];
        for (key, enabled, wait) in waits {
            if enabled
                && let Some(warning) = self.wait_outlasts_timeout(key, Duration::from_millis(wait))
            {
                tracing::warn!(key, "{warning}");
            }
        }
    }

    /// The warning for a duplicate's wait (`what`: the configuration key, or the route, that
    /// sets it) that the request timeout would end first: a wait at least as long as
    /// `server.timeouts.request_timeout_ms` never gets to run out, because the request spends
    /// some time before it starts waiting. `None` when the wait is shorter, is off (0), or no
    /// request timeout is set.
    ///
    /// ```
    /// use std::time::Duration;
    /// use autumn_core::config::AutumnConfig;
    ///
    /// let config =
    ///     AutumnConfig::from_toml_str("[server.timeouts]\nrequest_timeout_ms = 5000\n").unwrap();
    /// let warning = config
    ///     .wait_outlasts_timeout("idempotency.in_flight_wait_ms", Duration::from_secs(8))
    ///     .unwrap();
    /// assert!(warning.starts_with("idempotency.in_flight_wait_ms (8000 ms)"));
    /// assert!(config.wait_outlasts_timeout("x", Duration::from_secs(2)).is_none());
    /// ```
    #[must_use]
    pub fn wait_outlasts_timeout(&self, what: &str, wait: Duration) -> Option<String> {
        let timeout = self.server.request_timeout()?;
        (!wait.is_zero() && wait >= timeout).then(|| {
            format!(
                "{what} ({} ms) is not shorter than server.timeouts.request_timeout_ms ({} ms): a duplicate waiting for the first run is answered 408 by the request timeout before its wait ends, instead of getting the replay or a 409 with Retry-After; keep the wait well under the timeout",
                wait.as_millis(),
                timeout.as_millis()
            )
        })
    }

    /// [`validate`](Self::validate)'s checks, without its warnings: what loading runs.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        const LOCK: &str = "must be at least 1: a lock that lapses at once lets two overlapping duplicates both run the handler";
        const RECORD: &str = "must be at least 1: a record that expires at once is never replayed";
        let admin = &self.idempotency.admin;
        const SECRET: &str = "must be at least 32 random bytes (for example the output of `openssl rand -base64 48`): a short secret can be guessed, and with it every sealed session cookie opened";
        let long_enough =
            |secret: &String| secret.len() >= autumn_idempotency::seal::MIN_SECRET_LEN;
        let quota = &self.idempotency.quota;
        let checks: [(&'static str, bool, &str); 25] = [
            (
                "openapi.path",
                self.openapi.path.starts_with('/') && !self.openapi.path.contains(['{', '}', '*']),
                "must be a plain path starting with `/`, like \"/openapi.json\"",
            ),
            (
                "openapi.ui_path",
                self.openapi.ui_path.starts_with('/')
                    && self.openapi.ui_path.len() > 1
                    && !self.openapi.ui_path.ends_with('/')
                    && !self.openapi.ui_path.contains(['{', '}', '*'])
                    && (!self.openapi.ui || self.openapi.ui_path != self.openapi.path),
                "must be a plain path starting with `/`, not `/` itself, not ending in `/` and not `openapi.path`, like \"/openapi\"",
            ),
            (
                "idempotency.quota.max_records",
                !quota.enabled || quota.max_records >= 1,
                "must be at least 1 while the quota is enabled: no caller could make a new request; set idempotency.quota.enabled = false to hold callers to no quota",
            ),
            (
                "idempotency.quota.max_bytes",
                !quota.enabled || quota.max_bytes >= 1,
                "must be at least 1 while the quota is enabled: no caller could make a new request",
            ),
            (
                "idempotency.quota.max_callers",
                !quota.enabled || quota.max_callers >= 1,
                "must be at least 1 while the quota is enabled: the memory backend could count no caller",
            ),
            (
                "security.secret_key",
                self.security.secret_key.as_ref().is_none_or(long_enough),
                SECRET,
            ),
            (
                "security.old_secret_keys",
                self.security.old_secret_keys.iter().all(long_enough),
                SECRET,
            ),
            (
                "idempotency.admin.token",
                match &admin.token {
                    Some(token) => token.len() >= 16,
                    None => admin.enabled != Some(true),
                },
                "must be at least 16 characters, and set when idempotency.admin.enabled is true: anyone who reaches the actuator could read recorded responses, evict keys and run handlers twice",
            ),
            (
                "idempotency.ttl_secs",
                self.idempotency.ttl_secs >= 1,
                RECORD,
            ),
            (
                "idempotency.in_flight_ttl_secs",
                self.idempotency.in_flight_ttl_secs >= 1,
                LOCK,
            ),
            (
                "security.submit_token.ttl_secs",
                self.security.submit_token.ttl_secs >= 1,
                RECORD,
            ),
            (
                "security.submit_token.in_flight_ttl_secs",
                self.security.submit_token.in_flight_ttl_secs >= 1,
                LOCK,
            ),
            (
                "session.ttl_secs",
                self.session.ttl_secs >= 1,
                "must be at least 1: a session that expires at once signs nobody in",
            ),
            (
                "session.cookie_name",
                is_cookie_name(&self.session.cookie_name),
                "must be a cookie name: 1 to 64 letters, digits, `-`, `_` or `.`",
            ),
            (
                "session.same_site",
                self.session.same_site != super::SameSite::None || self.session.is_secure(),
                "\"none\" needs a Secure cookie (session.secure unset or true): browsers drop a SameSite=None cookie that is not Secure",
            ),
            (
                "session.cookie_name",
                self.session.is_secure() || !super::has_cookie_prefix(&self.session.cookie_name),
                "a name starting with `__Host-` or `__Secure-` needs a Secure cookie (session.secure unset or true): browsers drop such a cookie when it is not Secure",
            ),
            (
                "server.max_connections",
                self.server.max_connections >= 1,
                "must be at least 1: a server that takes no connection answers nobody",
            ),
            (
                "server.max_header_bytes",
                self.server.max_header_bytes >= MIN_HEADER_BYTES,
                "must be at least 1024: smaller leaves no room for a request line and its headers",
            ),
            (
                "server.timeouts.header_read_timeout_ms",
                self.server.timeouts.header_read_timeout_ms >= 1,
                "must be at least 1: every connection would be closed before its first request",
            ),
            (
                "server.tls.key_file",
                self.server.tls.cert_file.is_none() || self.server.tls.key_file.is_some(),
                "is missing: server.tls.cert_file is set, and HTTPS needs the certificate's private key too",
            ),
            (
                "server.tls.cert_file",
                self.server.tls.key_file.is_none() || self.server.tls.cert_file.is_some(),
                "is missing: server.tls.key_file is set, and HTTPS needs the certificate (chain) too",
            ),
            (
                "server.tls.redirect_port",
                self.server.tls.redirect_port.is_none() || self.server.tls.is_on(),
                "needs server.tls.cert_file and server.tls.key_file: it redirects to HTTPS, which the app serves only with them",
            ),
            (
                "server.tls.redirect_port",
                self.server.tls.redirect_port != Some(self.server.port),
                "is server.port: the redirect needs a port of its own",
            ),
            (
                "server.proxy_protocol",
                !self.server.proxy_protocol || !self.server.trusted_proxies.is_empty(),
                "needs server.trusted_proxies: a PROXY header is read only from the proxies listed there, and none is",
            ),
            (
                "server.http2.max_concurrent_streams",
                self.server.http2.max_concurrent_streams >= 1,
                "must be at least 1: an HTTP/2 connection that may open no stream serves nothing",
            ),
        ];
        if let Some((key, _, message)) = checks.into_iter().find(|(_, ok, _)| !ok) {
            return Err(ConfigError::InvalidValue {
                key: key.to_owned(),
                origin: self.source(key),
                message: message.to_owned(),
            });
        }
        if let Some(entry) = self
            .server
            .trusted_proxies
            .iter()
            .find(|entry| crate::trusted_proxies::Network::parse(entry).is_none())
        {
            let key = "server.trusted_proxies";
            return Err(ConfigError::InvalidValue {
                key: key.to_owned(),
                origin: self.source(key),
                message: format!(
                    "{entry:?} is neither an IP address nor a network such as \"10.0.0.0/8\""
                ),
            });
        }
        self.check_idempotency_policy()?;
        self.check_redis_tls()?;
        self.check_tenancy()?;
        self.check_actuator()?;
        self.check_middleware()?;
        self.check_rate_limit()?;
        self.check_jobs()?;
        self.check_telemetry()?;
        self.cors_origins().map(drop)?;
        self.trusted_origins().map(drop)
    }

    /// `[idempotency]` policy keys that cannot work: a fingerprint field that
    /// is not a JSON Pointer, both ignored and kept fields, a docs URL that
    /// cannot be sent in a `Link` header.
    fn check_idempotency_policy(&self) -> Result<(), ConfigError> {
        use autumn_idempotency::layer::{IdempotencyPolicy, PolicyError};
        let idempotency = &self.idempotency;
        let fail = |key: &'static str, message: String| ConfigError::InvalidValue {
            key: key.to_owned(),
            origin: self.source(key),
            message,
        };
        for (key, list) in [
            (
                "idempotency.fingerprint_ignore",
                &idempotency.fingerprint_ignore,
            ),
            (
                "idempotency.fingerprint_only",
                &idempotency.fingerprint_only,
            ),
        ] {
            for pointer in list {
                autumn_idempotency::fingerprint::check_pointer(pointer)
                    .map_err(|error| fail(key, error.to_string()))?;
            }
        }
        if !idempotency.fingerprint_ignore.is_empty() && !idempotency.fingerprint_only.is_empty() {
            return Err(fail(
                "idempotency.fingerprint_only",
                "cannot be set with idempotency.fingerprint_ignore: give the fields to leave out or the fields to keep, not both".to_owned(),
            ));
        }
        if let Some(url) = &idempotency.docs_url
            && let Err(PolicyError::DocsUrl(_)) = IdempotencyPolicy::new()
                .with_docs_url(url.clone())
                .validate()
        {
            return Err(fail(
                "idempotency.docs_url",
                "must be an absolute http(s) URL of visible ASCII characters, like \"https://example.com/docs/idempotency\"".to_owned(),
            ));
        }
        Ok(())
    }

    /// `[idempotency.redis]` TLS files that would be ignored: a client
    /// certificate without its key (or the reverse), or any file with a
    /// URL that does not use TLS. Whether the files can be read is checked
    /// at startup, where the connection is built.
    fn check_redis_tls(&self) -> Result<(), ConfigError> {
        let redis = &self.idempotency.redis;
        let fail = |key: &'static str, message: &str| ConfigError::InvalidValue {
            key: key.to_owned(),
            origin: self.source(key),
            message: message.to_owned(),
        };
        match (&redis.tls_cert_file, &redis.tls_key_file) {
            (Some(_), None) => {
                return Err(fail(
                    "idempotency.redis.tls_key_file",
                    "must be set with idempotency.redis.tls_cert_file: a client certificate is presented with its private key",
                ));
            }
            (None, Some(_)) => {
                return Err(fail(
                    "idempotency.redis.tls_cert_file",
                    "must be set with idempotency.redis.tls_key_file: a private key is presented with its client certificate",
                ));
            }
            _ => {}
        }
        let uses_tls = |url: &str| {
            let url = url.to_ascii_lowercase();
            url.starts_with("rediss://") || url.starts_with("rediss+cluster://")
        };
        if let Some(url) = &redis.url
            && redis.has_tls_files()
            && !uses_tls(url)
        {
            let key = if redis.tls_ca_file.is_some() {
                "idempotency.redis.tls_ca_file"
            } else {
                "idempotency.redis.tls_cert_file"
            };
            return Err(fail(
                key,
                "is set, but idempotency.redis.url does not use TLS: use a rediss:// (or rediss+cluster://) URL, or remove the TLS files",
            ));
        }
        Ok(())
    }

    /// `[rate_limit]` rules that cannot count: a zero rate, a name a header
    /// cannot carry, a route pattern that matches nothing the app can mount.
    fn check_rate_limit(&self) -> Result<(), ConfigError> {
        let rate_limit = &self.rate_limit;
        let invalid = |key: String, message: String| ConfigError::InvalidValue {
            origin: self.source(&key),
            key,
            message,
        };
        if rate_limit.backend == Some(super::Backend::Database) {
            return Err(invalid(
                "rate_limit.backend".to_owned(),
                "must be \"memory\" or \"redis\": counts change on every request, which a SQL table is no place for".to_owned(),
            ));
        }
        if rate_limit.max_clients == 0 {
            return Err(invalid(
                "rate_limit.max_clients".to_owned(),
                "must be at least 1: with no room, every limited request would count as a store error".to_owned(),
            ));
        }
        for (name, rule) in &rate_limit.rules {
            let key = |leaf: &str| format!("rate_limit.rules.{name}.{leaf}");
            if !super::is_rule_name(name) {
                return Err(invalid(
                    format!("rate_limit.rules.{name}"),
                    "a rule's name is 1 to 64 letters, digits, `_` or `-`: it is sent in the RateLimit-Policy header".to_owned(),
                ));
            }
            let checks = [
                ("limit", rule.limit >= 1, "must be at least 1"),
                ("window_secs", rule.window_secs >= 1, "must be at least 1"),
                (
                    "burst",
                    rule.burst.is_none_or(|burst| burst >= 1),
                    "must be at least 1 when set",
                ),
            ];
            if let Some((leaf, _, message)) = checks.into_iter().find(|(_, ok, _)| !ok) {
                return Err(invalid(key(leaf), message.to_owned()));
            }
            for pattern in &rule.routes {
                super::RoutePattern::parse(pattern)
                    .map_err(|message| invalid(key("routes"), message))?;
            }
        }
        Ok(())
    }

    /// `[jobs]` values that cannot work: a cron expression that does not
    /// parse, a short admin token, and schedules or endpoints without the
    /// database their rows live in. Whether a schedule's job exists is
    /// known only to the app's code, and checked at launch.
    fn check_jobs(&self) -> Result<(), ConfigError> {
        let jobs = &self.jobs;
        let invalid = |key: String, message: String| ConfigError::InvalidValue {
            origin: self.source(&key),
            key,
            message,
        };
        for (name, schedule) in &jobs.schedule {
            if let Some(cron) = &schedule.cron
                && let Err(error) = cron.parse::<crate::cron::Cron>()
            {
                return Err(invalid(
                    format!("jobs.schedule.{name}.cron"),
                    format!(
                        "{}; write five fields read in UTC (minute hour day-of-month month day-of-week), like \"30 3 * * *\"",
                        error.reason
                    ),
                ));
            }
        }
        if let Some(token) = &jobs.admin.token
            && token.len() < 16
        {
            return Err(invalid(
                "jobs.admin.token".to_owned(),
                "must be at least 16 characters: anyone who reaches the actuator could run dead jobs again and delete them".to_owned(),
            ));
        }
        if self.database.url.is_none() {
            // (what needs the database, the table that asks for it)
            let needs = jobs
                .schedule
                .iter()
                .find(|(_, schedule)| schedule.enabled)
                .map(|(name, _)| {
                    (
                        format!("jobs.schedule.{name} queues its job"),
                        format!("jobs.schedule.{name}"),
                    )
                })
                .or_else(|| {
                    jobs.admin.serves_endpoints().then(|| {
                        (
                            "jobs.admin.token serves the dead jobs".to_owned(),
                            "jobs.admin".to_owned(),
                        )
                    })
                });
            if let Some((needs, table)) = needs {
                // The key is unset: the error points at where the table
                // that needs it was set.
                return Err(ConfigError::InvalidValue {
                    key: "database.url".to_owned(),
                    origin: self.source_below(&table),
                    message: format!("must be set: {needs}, and jobs live in the app database"),
                });
            }
        }
        Ok(())
    }

    /// `[tenancy]` combinations that cannot resolve a tenant: refused only when tenancy is on.
    fn check_tenancy(&self) -> Result<(), ConfigError> {
        use super::TenantStrategy;
        let tenancy = &self.tenancy;
        if !tenancy.enabled {
            return Ok(());
        }
        let base_domain = tenancy.base_domain.as_deref().unwrap_or_default();
        let checks: [(&'static str, bool, &str); 4] = [
            (
                "tenancy.header",
                tenancy.strategy != TenantStrategy::Header
                    || http::HeaderName::try_from(tenancy.header.as_str()).is_ok(),
                "must be a valid header name",
            ),
            (
                "tenancy.base_domain",
                tenancy.strategy != TenantStrategy::Subdomain
                    || (!base_domain.is_empty()
                        && !base_domain.starts_with('.')
                        && !base_domain.ends_with('.')
                        && base_domain.bytes().all(|byte| {
                            byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.')
                        })),
                "strategy \"subdomain\" needs the domain tenants are subdomains of, e.g. \"example.com\"",
            ),
            (
                "tenancy.strategy",
                tenancy.strategy != TenantStrategy::Session || self.session.enabled,
                "\"session\" needs session.enabled = true: the tenant is read from the session",
            ),
            (
                "tenancy.exempt_paths",
                tenancy
                    .exempt_paths
                    .iter()
                    .all(|path| path.starts_with('/')),
                "every entry must be a path starting with `/`",
            ),
        ];
        match checks.into_iter().find(|(_, ok, _)| !ok) {
            Some((key, _, message)) => Err(ConfigError::InvalidValue {
                key: key.to_owned(),
                origin: self.source(key),
                message: message.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// `[actuator]` values that cannot work: a health check with no time to
    /// answer, a port the app already listens on, a component that does not exist.
    fn check_actuator(&self) -> Result<(), ConfigError> {
        let actuator = &self.actuator;
        let checks: [(&'static str, bool, &str); 3] = [
            (
                "actuator.health_timeout_ms",
                actuator.health_timeout_ms >= 1,
                "must be at least 1: every health check would time out",
            ),
            (
                "actuator.port",
                actuator
                    .port
                    .is_none_or(|port| port == 0 || port != self.server.port),
                "must differ from server.port; remove it to serve the actuator on the app's port",
            ),
            (
                "actuator.optional",
                actuator
                    .optional
                    .iter()
                    .all(|name| super::HEALTH_COMPONENTS.contains(&name.as_str())),
                "every entry must be one of \"idempotency\", \"submit_token\", \"session\", \"db\"",
            ),
        ];
        match checks.into_iter().find(|(_, ok, _)| !ok) {
            Some((key, _, message)) => Err(ConfigError::InvalidValue {
                key: key.to_owned(),
                origin: self.source(key),
                message: message.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// `[static]`, `[cors]` and `[security.headers]` values that cannot be sent or served.
    fn check_middleware(&self) -> Result<(), ConfigError> {
        let mount = self.static_files.mount.as_str();
        let cors = &self.cors;
        let headers = &self.security.headers;
        let checks: [(&'static str, bool, &str); 6] = [
            (
                "static.mount",
                mount.starts_with('/')
                    && mount.trim_end_matches('/').len() > 1
                    && !mount.contains(['{', '}', '*']),
                "must be a path below `/` such as \"/static\", without `{` or `*`",
            ),
            (
                "static.dir",
                self.static_files.dir.as_deref() != Some(""),
                "must name a directory; remove the key to serve no files",
            ),
            (
                "cors.allowed_methods",
                cors.allowed_methods
                    .iter()
                    .all(|method| http::Method::from_bytes(method.as_bytes()).is_ok()),
                "every entry must be an HTTP method such as \"GET\"",
            ),
            (
                "cors.allowed_headers",
                cors.allowed_headers
                    .iter()
                    .all(|name| http::HeaderName::try_from(name.as_str()).is_ok()),
                "every entry must be a header name such as \"content-type\"",
            ),
            (
                "security.headers.content_security_policy",
                http::HeaderValue::try_from(headers.content_security_policy.as_str()).is_ok(),
                "must be a valid header value: printable ASCII, no line breaks",
            ),
            (
                "security.headers.referrer_policy",
                headers.referrer_policy.is_empty()
                    || super::REFERRER_POLICIES.contains(&headers.referrer_policy.as_str()),
                "must be one of \"no-referrer\", \"no-referrer-when-downgrade\", \"origin\", \"origin-when-cross-origin\", \"same-origin\", \"strict-origin\", \"strict-origin-when-cross-origin\", \"unsafe-url\", or \"\" for none",
            ),
        ];
        match checks.into_iter().find(|(_, ok, _)| !ok) {
            Some((key, _, message)) => Err(ConfigError::InvalidValue {
                key: key.to_owned(),
                origin: self.source(key),
                message: message.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// `cors.allowed_origins`, parsed: `None` for `["*"]` (any origin). An origin a browser
    /// would never send as written would silently never match, so it is refused.
    pub(crate) fn cors_origins(&self) -> Result<Option<Vec<TrustedOrigin>>, ConfigError> {
        const KEY: &str = "cors.allowed_origins";
        let invalid = |message: String| ConfigError::InvalidValue {
            key: KEY.to_owned(),
            origin: self.source(KEY),
            message,
        };
        let origins = &self.cors.allowed_origins;
        if origins.iter().any(|origin| origin == "*") {
            return match origins.len() {
                1 => Ok(None),
                _ => Err(invalid(
                    "\"*\" allows every origin, so it must be the only entry".to_owned(),
                )),
            };
        }
        origins
            .iter()
            .map(|origin| {
                origin
                    .parse::<TrustedOrigin>()
                    .map_err(|error| invalid(error.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// `security.cross_origin.trusted_origins`, parsed: an origin that a browser would never
    /// send as written would silently never match, so it is refused.
    pub(crate) fn trusted_origins(&self) -> Result<Vec<TrustedOrigin>, ConfigError> {
        const KEY: &str = "security.cross_origin.trusted_origins";
        self.security
            .cross_origin
            .trusted_origins
            .iter()
            .map(|origin| {
                origin
                    .parse::<TrustedOrigin>()
                    .map_err(|error| ConfigError::InvalidValue {
                        key: KEY.to_owned(),
                        origin: self.source(KEY),
                        message: error.to_string(),
                    })
            })
            .collect()
    }

    /// Where the first key below `table` was set; [`Source::Code`] when
    /// none was read from a file or variable.
    pub(crate) fn source_below(&self, table: &str) -> Source {
        let prefix = format!("{table}.");
        self.provenance
            .0
            .range(prefix.clone()..)
            .next()
            .filter(|(key, _)| key.starts_with(&prefix))
            .map_or(Source::Code, |(_, source)| source.clone())
    }

    /// Where `key` was set. Every default passes [`validate`](Self::validate), so a refused
    /// value that no file or variable set was set by the program.
    pub(crate) fn source(&self, key: &str) -> Source {
        self.provenance.0.get(key).cloned().unwrap_or(Source::Code)
    }
}

/// Whether `name` is a cookie name Autumn writes as is.
fn is_cookie_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
}
