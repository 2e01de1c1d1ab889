use std::sync::Arc;
use std::time::Duration;

use tower::Layer;

use super::policy::{
    AnonymousKeys, IdempotencyPolicy, KeyRequirement, MIN_TTL, PolicyError, RecordErrors, Resolved,
};
use super::service::{Idempotency, ReplayMode, Settings};
use crate::metrics::IdempotencyMetrics;
use crate::sealing::RecordSealing;
use crate::store::IdempotencyStore;
use autumn_base::clock::{SharedClock, SystemClock};

/// Applies [`Idempotency`] to a service. See the [module docs](crate::layer).
#[derive(Clone)]
pub struct IdempotencyLayer {
    pub(crate) settings: Arc<Settings>,
}

impl std::fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("ttl", &self.settings.ttl)
            .field("in_flight_ttl", &self.settings.in_flight_ttl)
            .field("in_flight_wait", &self.settings.in_flight_wait)
            .field("max_body_bytes", &self.settings.max_body_bytes)
            .field("max_record_bytes", &self.settings.max_record_bytes)
            .field("mode", &self.settings.mode)
            .field("policy", &self.settings.policy)
            .finish_non_exhaustive()
    }
}

/// Records are kept 24 hours unless told otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// A lock lapses 60 seconds after a crash unless told otherwise.
pub const DEFAULT_IN_FLIGHT_TTL: Duration = Duration::from_secs(60);
/// Panics naming `method` when `ttl` is below [`MIN_TTL`].
#[track_caller]
pub(crate) fn check_ttl(method: &str, ttl: Duration) {
    assert!(
        ttl >= MIN_TTL,
        "{method} needs at least {MIN_TTL:?}, got {ttl:?}: a shorter TTL turns off the at-most-once guarantee"
    );
}

/// Bodies up to 2 MiB are buffered to fingerprint them, as axum's default
/// body limit.
pub const DEFAULT_MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Response bodies up to 1 MiB are recorded: every record is held whole in
/// memory while it is written and again on each replay, and sits in the
/// store (in memory, for the memory store) for the record TTL.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1024 * 1024;

impl IdempotencyLayer {
    /// A layer over `store` with the defaults: records kept 24 h, locks 60 s,
    /// request bodies up to 2 MiB, response bodies recorded up to 1 MiB,
    /// replays answered directly.
    pub fn new(store: Arc<dyn IdempotencyStore>) -> Self {
        Self {
            settings: Arc::new(Settings {
                store,
                ttl: DEFAULT_TTL,
                in_flight_ttl: DEFAULT_IN_FLIGHT_TTL,
                in_flight_wait: Duration::ZERO,
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
                mode: ReplayMode::Direct,
                metrics: Arc::new(IdempotencyMetrics::new()),
                sealing: RecordSealing::default(),
                clock: Arc::new(SystemClock),
                quota: None,
                policy: Resolved::default(),
            }),
        }
    }

    fn map(mut self, f: impl FnOnce(&mut Settings)) -> Self {
        f(Arc::make_mut(&mut self.settings));
        self
    }

    /// How long a recorded response is replayed.
    ///
    /// # Panics
    ///
    /// When `ttl` is below [`MIN_TTL`] (one second): a record that expires
    /// at once replays nothing. Configuration read from `autumn.toml` is
    /// checked at startup instead, with an error naming the key.
    ///
    /// ```should_panic
    /// # use std::{sync::Arc, time::Duration};
    /// # use autumn_idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
    /// let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(60)));
    /// let _ = IdempotencyLayer::new(store).with_ttl(Duration::ZERO);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn with_ttl(self, ttl: Duration) -> Self {
        check_ttl("IdempotencyLayer::with_ttl", ttl);
        self.map(|s| s.ttl = ttl)
    }

    /// How long a lock lasts when its run stops renewing it (a crash, a
    /// failed record write). While the handler runs, the lock is renewed
    /// every third of this, so a handler may run longer; a shorter TTL frees
    /// a crashed run's key sooner, at the cost of more renewals.
    ///
    /// # Panics
    ///
    /// When `ttl` is below [`MIN_TTL`] (one second): a lock that lapses at
    /// once lets an overlapping duplicate run the handler again.
    ///
    /// ```should_panic
    /// # use std::{sync::Arc, time::Duration};
    /// # use autumn_idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
    /// let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(60)));
    /// let _ = IdempotencyLayer::new(store).with_in_flight_ttl(Duration::from_millis(500));
    /// ```
    #[must_use]
    #[track_caller]
    pub fn with_in_flight_ttl(self, ttl: Duration) -> Self {
        check_ttl("IdempotencyLayer::with_in_flight_ttl", ttl);
        self.map(|s| s.in_flight_ttl = ttl)
    }

    /// How long a duplicate that arrives while the first request with its
    /// key still runs waits for it: it then gets the first one's response as
    /// a replay (or runs, when the first failed and released the key). Past
    /// the wait, or at once with zero (the default), it gets 409 with
    /// `Retry-After`.
    ///
    /// The waiter claims the key again when the store says the lock went
    /// (the memory store) or after an exponential backoff of 10 ms up to
    /// 250 ms (shared stores): a handful of store calls, not a steady poll.
    /// The wait is measured on the [clock](Self::with_clock).
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use autumn_idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
    ///
    /// let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
    /// let layer = IdempotencyLayer::new(store).with_in_flight_wait(Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn with_in_flight_wait(self, wait: Duration) -> Self {
        self.map(|s| s.in_flight_wait = wait)
    }

    /// The largest request body buffered to fingerprint it; larger bodies get
    /// 413 before the handler runs.
    #[must_use]
    pub fn with_max_body_bytes(self, limit: usize) -> Self {
        self.map(|s| s.max_body_bytes = limit)
    }

    /// The largest response body recorded. A larger 2xx/3xx response is
    /// still sent to the client whole (streamed past this limit) but not
    /// recorded: a marker is recorded in its place, and a retry with the
    /// same request gets 409 `idempotency_response_not_recorded` rather
    /// than a second run. A warning is logged once per route.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use autumn_idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
    ///
    /// let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
    /// let layer = IdempotencyLayer::new(store).with_max_record_bytes(256 * 1024);
    /// ```
    #[must_use]
    pub fn with_max_record_bytes(self, limit: usize) -> Self {
        self.map(|s| s.max_record_bytes = limit)
    }

    /// Counters to count hits, misses and conflicts into (shared with the
    /// app's metrics endpoint).
    #[must_use]
    pub fn with_metrics(self, metrics: Arc<IdempotencyMetrics>) -> Self {
        self.map(|s| s.metrics = metrics)
    }

    /// Holds each caller to `quota`: a caller holding as many live records
    /// (or bytes of them) as it allows gets 429
    /// `idempotency_quota_exceeded` for a new key, while its retries of
    /// recorded keys are still replayed. Callers are told apart by the
    /// [`QuotaSubject`](crate::quota::QuotaSubject) in each request's
    /// extensions (Autumn's app inserts one); a request without one is not
    /// counted. Give the submit-token layer the same quota, so tokens and
    /// records count together.
    #[must_use]
    pub fn with_quota(self, quota: crate::quota::Quota) -> Self {
        self.map(|s| s.quota = Some(quota))
    }

    /// How recorded responses are sealed before the store keeps them: their
    /// `Set-Cookie` values always, their bodies when asked. By default with
    /// a key made for this process ([`RecordSealing::default`]), so a
    /// record made elsewhere is refused with 409 rather than replayed; give
    /// every replica the same [`RecordSealing`] to replay each other's.
    #[must_use]
    pub fn with_sealing(self, sealing: RecordSealing) -> Self {
        self.map(|s| s.sealing = sealing)
    }

    /// The clock used to decide when the lock needs renewing before the
    /// handler starts, and when a duplicate's
    /// [in-flight wait](Self::with_in_flight_wait) is over (a test ends it by
    /// moving a [`ManualClock`](autumn_base::clock::ManualClock)).
    #[must_use]
    pub fn with_clock(self, clock: SharedClock) -> Self {
        self.map(|s| s.clock = clock)
    }

    /// Answer replays from an [`IdempotencyReplayLayer`](crate::IdempotencyReplayLayer)
    /// inside the route instead of from this layer, so the route's own
    /// checks run again on every retry.
    #[must_use]
    pub fn replay_through_inner(self) -> Self {
        self.with_replay_mode(ReplayMode::ThroughInner)
    }

    /// Sets where replays are answered from.
    #[must_use]
    pub fn with_replay_mode(self, mode: ReplayMode) -> Self {
        self.map(|s| s.mode = mode)
    }

    /// The same layer under `policy`: what it sets replaces this layer's
    /// settings (TTLs, whether a key is required, what the fingerprint
    /// covers, the in-flight wait, the docs link, the expiry header, which
    /// errors are recorded, whether anonymous keys are served); what it
    /// leaves unset is kept. Apply the app-wide policy first, then each
    /// route's `over` it.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use autumn_idempotency::IdempotencyLayer;
    /// use autumn_idempotency::layer::IdempotencyPolicy;
    /// use autumn_idempotency::MemoryIdempotencyStore;
    ///
    /// let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
    /// let policy = IdempotencyPolicy::new().required().ignoring(["/client_ts"]);
    /// let layer = IdempotencyLayer::new(store).with_policy(&policy)?;
    /// # Ok::<(), autumn_idempotency::layer::PolicyError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`PolicyError`] when the policy does not [validate](IdempotencyPolicy::validate).
    pub fn with_policy(self, policy: &IdempotencyPolicy) -> Result<Self, PolicyError> {
        policy.validate()?;
        let explain = self.settings.policy.explain_mismatch;
        let json = policy.json_rule(explain)?;
        let docs = policy.docs_link()?;
        Ok(self.map(|s| {
            if let Some(ttl) = policy.ttl {
                s.ttl = ttl;
            }
            if let Some(ttl) = policy.in_flight_ttl {
                s.in_flight_ttl = ttl;
            }
            if let Some(wait) = policy.in_flight_wait {
                s.in_flight_wait = wait;
            }
            let resolved = &mut s.policy;
            if let Some(key) = policy.key {
                resolved.require_key = key == KeyRequirement::Required;
            }
            if policy.fingerprint.is_some() {
                resolved.json = json.map(Arc::new);
            }
            if docs.is_some() {
                resolved.docs = docs;
            }
            if let Some(send) = policy.expiry_header {
                resolved.expiry_header = send;
            }
            if let Some(record_errors) = policy.record_errors {
                resolved.record_server_errors = record_errors == RecordErrors::Server;
            }
            if let Some(anonymous_keys) = policy.anonymous_keys {
                resolved.refuse_anonymous_keys = anonymous_keys == AnonymousKeys::Refuse;
            }
        }))
    }

    /// What a client of a route under this layer needs to know to retry:
    /// whether a key is required, how long a record is replayed, how long
    /// a duplicate waits for the first run, what the fingerprint covers.
    /// What an API description (OpenAPI) publishes.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use autumn_idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
    /// use autumn_idempotency::layer::IdempotencyPolicy;
    ///
    /// let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(3600)));
    /// let layer = IdempotencyLayer::new(store)
    ///     .with_policy(&IdempotencyPolicy::new().required())
    ///     .unwrap();
    /// let described = layer.describe();
    /// assert!(described.require_key);
    /// assert_eq!(described.fingerprint, "bytes");
    /// ```
    pub fn describe(&self) -> GuardDescription {
        let settings = &self.settings;
        GuardDescription {
            require_key: settings.policy.require_key,
            ttl: settings.ttl,
            in_flight_wait: settings.in_flight_wait,
            fingerprint: if settings.policy.json.is_some() {
                "json"
            } else {
                "bytes"
            },
        }
    }

    /// Whether a 422 for a reused key names the first JSON field that
    /// differs (never its value), on routes with a JSON fingerprint. Meant
    /// for development: it keeps a short hash of each field of every
    /// recorded request, and tells a client the shape of the request that
    /// used the key first. Off by default; Autumn turns it on in the `dev`
    /// profile. Set it before [`with_policy`](Self::with_policy).
    #[must_use]
    pub fn explain_mismatches(self, explain: bool) -> Self {
        self.map(|s| {
            s.policy.explain_mismatch = explain;
            if let Some(rule) = &mut s.policy.json {
                Arc::make_mut(rule).explain = explain;
            }
        })
    }

    /// The counters this layer counts into.
    pub fn metrics(&self) -> &Arc<IdempotencyMetrics> {
        &self.settings.metrics
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = Idempotency<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency::new(inner, self.settings.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryIdempotencyStore;
    use crate::submit::SubmitTokenLayer;

    fn store() -> Arc<dyn IdempotencyStore> {
        Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(60)))
    }

    #[test]
    #[should_panic(expected = "IdempotencyLayer::with_in_flight_ttl needs at least 1s")]
    fn a_sub_second_lock_ttl_is_refused() {
        let _ = IdempotencyLayer::new(store()).with_in_flight_ttl(Duration::from_millis(999));
    }

    #[test]
    #[should_panic(expected = "IdempotencyLayer::with_ttl needs at least 1s")]
    fn a_zero_record_ttl_is_refused() {
        let _ = IdempotencyLayer::new(store()).with_ttl(Duration::ZERO);
    }

    #[test]
    #[should_panic(expected = "SubmitTokenLayer::with_in_flight_ttl needs at least 1s")]
    fn a_zero_submit_token_lock_ttl_is_refused() {
        let _ = SubmitTokenLayer::new(store()).with_in_flight_ttl(Duration::ZERO);
    }

    #[test]
    #[should_panic(expected = "SubmitTokenLayer::with_ttl needs at least 1s")]
    fn a_zero_submit_token_record_ttl_is_refused() {
        let _ = SubmitTokenLayer::new(store()).with_ttl(Duration::from_millis(10));
    }

    #[test]
    fn one_second_is_accepted() {
        let layer = IdempotencyLayer::new(store())
            .with_ttl(MIN_TTL)
            .with_in_flight_ttl(MIN_TTL);
        assert_eq!(layer.settings.in_flight_ttl, MIN_TTL);
        let _ = SubmitTokenLayer::new(store())
            .with_ttl(MIN_TTL)
            .with_in_flight_ttl(MIN_TTL);
    }
}

/// What [`IdempotencyLayer::describe`] tells of a route's guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardDescription {
    /// A mutating request without an `Idempotency-Key` gets 400.
    pub require_key: bool,
    /// How long a recorded response is replayed.
    pub ttl: Duration,
    /// How long a duplicate waits for the first run before 409.
    pub in_flight_wait: Duration,
    /// What the fingerprint covers: `"bytes"` or `"json"`.
    pub fingerprint: &'static str,
}
