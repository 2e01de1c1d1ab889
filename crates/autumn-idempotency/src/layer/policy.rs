//! [`IdempotencyPolicy`]: how one route (or the whole app) treats keys.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;

use crate::fingerprint::{JsonRule, Pointer, PointerError};

/// The shortest record or lock TTL a layer accepts.
///
/// A zero TTL disables the guarantee: a record that expires at once replays
/// nothing, and a lock that lapses at once lets an overlapping duplicate run
/// the handler a second time. Stores count TTLs in whole seconds or
/// milliseconds; one second is the smallest that still means something
/// across replicas.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// Whether a mutating request must carry an `Idempotency-Key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyRequirement {
    /// A request without a key runs as if there were no layer (the default).
    #[default]
    Optional,
    /// A `POST`, `PUT`, `PATCH` or `DELETE` without a key gets 400
    /// `idempotency_key_missing`, telling the client to send one.
    Required,
}

/// What the fingerprint of a request covers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FingerprintPolicy {
    /// Method, path, content type and the body's bytes (the default): a
    /// retry must send the very same bytes.
    #[default]
    Bytes,
    /// A JSON body by its content: key order and whitespace do not count,
    /// nor do the fields under `ignore`; with `only`, nothing but those
    /// fields counts. A body that is not JSON is compared by its bytes.
    Json {
        /// JSON Pointers (RFC 6901) to leave out, such as `/client_ts`.
        ignore: Vec<String>,
        /// When not empty, the only JSON Pointers compared.
        only: Vec<String>,
    },
}

/// Which error responses are recorded and replayed like a success.
///
/// ```
/// use autumn_idempotency::layer::{IdempotencyPolicy, RecordErrors};
///
/// let policy = IdempotencyPolicy::new().with_record_errors(RecordErrors::Server);
/// assert_eq!(policy.record_errors, Some(RecordErrors::Server));
/// assert_eq!(RecordErrors::default(), RecordErrors::None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RecordErrors {
    /// No error is recorded (the default): a 4xx or 5xx releases the key, so
    /// a retry runs the handler again.
    #[default]
    None,
    /// A 5xx the handler answered is recorded and replayed like a success,
    /// so a retry never runs it again: for handlers whose side effects
    /// happen before a failure late in the request. A 4xx is still never
    /// recorded, and a panic still releases the key.
    Server,
}

/// Whether a keyed request from a caller with no identity is served.
///
/// A caller is identified by its [scope](crate::IdempotencyScope): a
/// session, a tenant, a principal or an `Authorization` header. A request
/// with none of them is anonymous, and its `Idempotency-Key` is then the
/// only thing that keeps its recorded response (its `Set-Cookie` included)
/// from another anonymous client that sends the same key and body.
///
/// ```
/// use autumn_idempotency::layer::{AnonymousKeys, IdempotencyPolicy};
///
/// let policy = IdempotencyPolicy::new().with_anonymous_keys(AnonymousKeys::Refuse);
/// assert_eq!(policy.anonymous_keys, Some(AnonymousKeys::Refuse));
/// assert_eq!(AnonymousKeys::default(), AnonymousKeys::Allow);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AnonymousKeys {
    /// An anonymous caller's key is honoured like any other (the default).
    #[default]
    Allow,
    /// A mutating request that carries a key but no caller identity gets
    /// 403 `idempotency_key_needs_caller`, and the handler does not run. A
    /// request without a key is untouched.
    Refuse,
}

/// How the idempotency layer treats one route, or every route of an app.
///
/// Every field left `None` keeps what the level above says: a route's policy
/// falls back to the app's (`[idempotency]` in `autumn.toml`), and the app's
/// to the layer's defaults, which are today's behaviour: keys optional,
/// records kept 24 hours, locks 60 seconds, fingerprints over the body's
/// bytes, a retry of an in-flight key answered 409 at once.
///
/// ```
/// use std::time::Duration;
/// use autumn_idempotency::layer::IdempotencyPolicy;
///
/// let policy = IdempotencyPolicy::new()
///     .required()
///     .with_ttl(Duration::from_secs(48 * 3600))
///     .ignoring(["/client_ts", "/trace_id"]);
/// assert!(policy.validate().is_ok());
///
/// let app = IdempotencyPolicy::new().with_ttl(Duration::from_secs(3600));
/// let effective = IdempotencyPolicy::new().required().over(&app);
/// assert_eq!(effective.ttl, Some(Duration::from_secs(3600)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct IdempotencyPolicy {
    /// Whether a key is required.
    pub key: Option<KeyRequirement>,
    /// How long a recorded response is replayed.
    pub ttl: Option<Duration>,
    /// How long a lock lasts when its run stops renewing it.
    pub in_flight_ttl: Option<Duration>,
    /// How long a retry that finds its key in flight may wait for the first
    /// run's response before it gets 409. Stored for the layer; `None` and
    /// zero answer 409 at once.
    pub in_flight_wait: Option<Duration>,
    /// What the fingerprint covers.
    pub fingerprint: Option<FingerprintPolicy>,
    /// A page explaining the app's keys: sent as
    /// `Link: <url>; rel="describedby"` and as the problem `type` of the 400
    /// a request without a required key gets.
    pub docs_url: Option<String>,
    /// Whether a first run's response says until when it is replayed
    /// (`X-Idempotent-Expires`).
    pub expiry_header: Option<bool>,
    /// Which error responses are recorded like a success.
    pub record_errors: Option<RecordErrors>,
    /// Whether a keyed request with no caller identity is served.
    pub anonymous_keys: Option<AnonymousKeys>,
}

/// Why an [`IdempotencyPolicy`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A TTL below [`MIN_TTL`].
    #[error(
        "{field} must be at least 1s, got {ttl:?}: a shorter TTL turns off the at-most-once guarantee"
    )]
    TtlTooShort {
        /// `ttl` or `in_flight_ttl`.
        field: &'static str,
        /// The TTL given.
        ttl: Duration,
    },
    /// A field to ignore or keep is not a JSON Pointer.
    #[error(transparent)]
    Pointer(#[from] PointerError),
    /// Both `ignore` and `only` were given.
    #[error("give fingerprint fields to ignore or fields to keep (only), not both")]
    IgnoreAndOnly,
    /// The docs URL cannot be sent in a header.
    #[error("the docs URL {0:?} must be an absolute http(s) URL of visible ASCII characters")]
    DocsUrl(String),
}

impl IdempotencyPolicy {
    /// A policy that keeps everything as the level above says.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires an `Idempotency-Key` on mutating requests.
    #[must_use]
    pub fn required(mut self) -> Self {
        self.key = Some(KeyRequirement::Required);
        self
    }

    /// Sets whether a key is required.
    #[must_use]
    pub fn with_key(mut self, key: KeyRequirement) -> Self {
        self.key = Some(key);
        self
    }

    /// How long a recorded response is replayed.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long a lock lasts when its run stops renewing it.
    #[must_use]
    pub fn with_in_flight_ttl(mut self, ttl: Duration) -> Self {
        self.in_flight_ttl = Some(ttl);
        self
    }

    /// How long a retry may wait for an in-flight first run.
    #[must_use]
    pub fn with_in_flight_wait(mut self, wait: Duration) -> Self {
        self.in_flight_wait = Some(wait);
        self
    }

    /// Compares JSON bodies by content (see [`FingerprintPolicy::Json`]).
    #[must_use]
    pub fn json_fingerprint(self) -> Self {
        self.with_fingerprint(FingerprintPolicy::Json {
            ignore: Vec::new(),
            only: Vec::new(),
        })
    }

    /// Compares JSON bodies by content, leaving out these JSON Pointers.
    #[must_use]
    pub fn ignoring<I, S>(self, pointers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.with_fingerprint(FingerprintPolicy::Json {
            ignore: pointers.into_iter().map(Into::into).collect(),
            only: Vec::new(),
        })
    }

    /// Compares JSON bodies by these JSON Pointers alone.
    #[must_use]
    pub fn only<I, S>(self, pointers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.with_fingerprint(FingerprintPolicy::Json {
            ignore: Vec::new(),
            only: pointers.into_iter().map(Into::into).collect(),
        })
    }

    /// Sets what the fingerprint covers.
    #[must_use]
    pub fn with_fingerprint(mut self, fingerprint: FingerprintPolicy) -> Self {
        self.fingerprint = Some(fingerprint);
        self
    }

    /// A page explaining the app's keys.
    #[must_use]
    pub fn with_docs_url(mut self, url: impl Into<String>) -> Self {
        self.docs_url = Some(url.into());
        self
    }

    /// Whether a first run's response carries `X-Idempotent-Expires`.
    #[must_use]
    pub fn with_expiry_header(mut self, send: bool) -> Self {
        self.expiry_header = Some(send);
        self
    }

    /// Which error responses are recorded and replayed like a success: with
    /// [`RecordErrors::Server`], a 5xx the handler answered is replayed to
    /// every retry instead of running the handler again.
    ///
    /// ```
    /// use autumn_idempotency::layer::{IdempotencyPolicy, RecordErrors};
    ///
    /// let route = IdempotencyPolicy::new().with_record_errors(RecordErrors::Server);
    /// let app = IdempotencyPolicy::new().with_record_errors(RecordErrors::None);
    /// assert_eq!(route.over(&app).record_errors, Some(RecordErrors::Server));
    /// ```
    #[must_use]
    pub fn with_record_errors(mut self, record_errors: RecordErrors) -> Self {
        self.record_errors = Some(record_errors);
        self
    }

    /// Whether a keyed request with no caller identity is served: with
    /// [`AnonymousKeys::Refuse`], it gets 403 `idempotency_key_needs_caller`
    /// instead of running the handler.
    ///
    /// ```
    /// use autumn_idempotency::layer::{AnonymousKeys, IdempotencyPolicy};
    ///
    /// let app = IdempotencyPolicy::new().with_anonymous_keys(AnonymousKeys::Refuse);
    /// let route = IdempotencyPolicy::new().with_anonymous_keys(AnonymousKeys::Allow);
    /// assert_eq!(route.over(&app).anonymous_keys, Some(AnonymousKeys::Allow));
    /// assert_eq!(IdempotencyPolicy::new().over(&app).anonymous_keys, Some(AnonymousKeys::Refuse));
    /// ```
    #[must_use]
    pub fn with_anonymous_keys(mut self, anonymous_keys: AnonymousKeys) -> Self {
        self.anonymous_keys = Some(anonymous_keys);
        self
    }

    /// This policy, with what it leaves unset taken from `base`.
    #[must_use]
    pub fn over(self, base: &Self) -> Self {
        Self {
            key: self.key.or(base.key),
            ttl: self.ttl.or(base.ttl),
            in_flight_ttl: self.in_flight_ttl.or(base.in_flight_ttl),
            in_flight_wait: self.in_flight_wait.or(base.in_flight_wait),
            fingerprint: self.fingerprint.or_else(|| base.fingerprint.clone()),
            docs_url: self.docs_url.or_else(|| base.docs_url.clone()),
            expiry_header: self.expiry_header.or(base.expiry_header),
            record_errors: self.record_errors.or(base.record_errors),
            anonymous_keys: self.anonymous_keys.or(base.anonymous_keys),
        }
    }

    /// Whether the policy sets nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the TTLs, the JSON Pointers and the docs URL.
    ///
    /// # Errors
    ///
    /// [`PolicyError`] naming the first thing wrong.
    pub fn validate(&self) -> Result<(), PolicyError> {
        for (field, ttl) in [("ttl", self.ttl), ("in_flight_ttl", self.in_flight_ttl)] {
            if let Some(ttl) = ttl.filter(|ttl| *ttl < MIN_TTL) {
                return Err(PolicyError::TtlTooShort { field, ttl });
            }
        }
        self.json_rule(false)?;
        self.docs_link()?;
        Ok(())
    }

    /// The JSON rule the fingerprint follows, if any.
    pub(crate) fn json_rule(&self, explain: bool) -> Result<Option<JsonRule>, PolicyError> {
        let Some(FingerprintPolicy::Json { ignore, only }) = &self.fingerprint else {
            return Ok(None);
        };
        if !ignore.is_empty() && !only.is_empty() {
            return Err(PolicyError::IgnoreAndOnly);
        }
        let parse = |list: &[String]| {
            list.iter()
                .map(|p| Pointer::parse(p))
                .collect::<Result<Vec<_>, _>>()
        };
        let mut only = parse(only)?;
        // Sorted, so the order a route lists them in does not change the
        // fingerprint.
        only.sort_by(|a, b| a.text().cmp(b.text()));
        only.dedup();
        Ok(Some(JsonRule {
            ignore: parse(ignore)?,
            only,
            explain,
        }))
    }

    /// The docs URL as a `Link` header value and as itself.
    pub(crate) fn docs_link(&self) -> Result<Option<DocsLink>, PolicyError> {
        let Some(url) = &self.docs_url else {
            return Ok(None);
        };
        let absolute = url.starts_with("https://") || url.starts_with("http://");
        let link = HeaderValue::try_from(format!("<{url}>; rel=\"describedby\""));
        match link {
            Ok(link) if absolute && url.bytes().all(|b| (0x21..=0x7e).contains(&b)) => {
                Ok(Some(DocsLink {
                    url: url.as_str().into(),
                    link,
                }))
            }
            _ => Err(PolicyError::DocsUrl(url.clone())),
        }
    }
}

/// A checked docs URL, ready to send.
#[derive(Debug, Clone)]
pub(crate) struct DocsLink {
    pub(crate) url: Arc<str>,
    pub(crate) link: HeaderValue,
}

/// What the layer reads per request, resolved once when it is built.
#[derive(Debug, Clone, Default)]
pub(crate) struct Resolved {
    pub(crate) require_key: bool,
    pub(crate) json: Option<Arc<JsonRule>>,
    pub(crate) docs: Option<DocsLink>,
    pub(crate) expiry_header: bool,
    /// Name the first differing field in a 422 (the dev profile).
    pub(crate) explain_mismatch: bool,
    /// Record a 5xx the handler answered, as a success is.
    pub(crate) record_server_errors: bool,
    /// Refuse a keyed request with no caller identity.
    pub(crate) refuse_anonymous_keys: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_policy_falls_back_to_the_app_policy_field_by_field() {
        let app = IdempotencyPolicy::new()
            .with_ttl(Duration::from_secs(60))
            .with_docs_url("https://example.com/keys")
            .ignoring(["/trace_id"]);
        let route = IdempotencyPolicy::new()
            .required()
            .with_in_flight_wait(Duration::from_secs(2))
            .over(&app);
        assert_eq!(route.record_errors, None);
        let recording =
            IdempotencyPolicy::new().over(&app.clone().with_record_errors(RecordErrors::Server));
        assert_eq!(recording.record_errors, Some(RecordErrors::Server));
        let opted_out = IdempotencyPolicy::new()
            .with_record_errors(RecordErrors::None)
            .over(&recording);
        assert_eq!(opted_out.record_errors, Some(RecordErrors::None));
        assert_eq!(route.anonymous_keys, None);
        let refusing =
            IdempotencyPolicy::new().over(&app.clone().with_anonymous_keys(AnonymousKeys::Refuse));
        assert_eq!(refusing.anonymous_keys, Some(AnonymousKeys::Refuse));
        let allowing = IdempotencyPolicy::new()
            .with_anonymous_keys(AnonymousKeys::Allow)
            .over(&refusing);
        assert_eq!(allowing.anonymous_keys, Some(AnonymousKeys::Allow));
        assert_eq!(route.key, Some(KeyRequirement::Required));
        assert_eq!(route.ttl, Some(Duration::from_secs(60)));
        assert_eq!(route.in_flight_wait, Some(Duration::from_secs(2)));
        assert_eq!(route.docs_url.as_deref(), Some("https://example.com/keys"));
        assert_eq!(route.fingerprint, app.fingerprint);
        assert!(IdempotencyPolicy::new().is_empty());
        assert!(!route.is_empty());
    }

    #[test]
    fn bad_policies_say_what_is_wrong() {
        let short = IdempotencyPolicy::new().with_in_flight_ttl(Duration::from_millis(500));
        assert_eq!(
            short.validate().map_err(|e| e.to_string()),
            Err("in_flight_ttl must be at least 1s, got 500ms: a shorter TTL turns off the at-most-once guarantee".into())
        );
        let pointer = IdempotencyPolicy::new().ignoring(["client_ts"]);
        assert!(matches!(pointer.validate(), Err(PolicyError::Pointer(_))));
        let both = IdempotencyPolicy::new().with_fingerprint(FingerprintPolicy::Json {
            ignore: vec!["/a".into()],
            only: vec!["/b".into()],
        });
        assert_eq!(both.validate(), Err(PolicyError::IgnoreAndOnly));
        for url in ["/docs", "https://exa mple.com", "ftp://x"] {
            let docs = IdempotencyPolicy::new().with_docs_url(url);
            assert_eq!(docs.validate(), Err(PolicyError::DocsUrl(url.into())));
        }
    }
}
