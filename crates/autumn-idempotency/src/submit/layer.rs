//! [`SubmitTokenLayer`] and its defaults.

use std::sync::Arc;
use std::time::Duration;

use tower::Layer;

use super::DEFAULT_FIELD_NAME;
use super::service::{Settings, SubmitTokenService};
use crate::layer::DEFAULT_MAX_RECORD_BYTES;
use crate::metrics::IdempotencyMetrics;
use crate::sealing::RecordSealing;
use crate::store::IdempotencyStore;
use autumn_base::ExemptPaths;
use autumn_base::clock::{SharedClock, SystemClock};

/// Mints submit tokens and guards the form posts that carry one. See the
/// [module docs](crate::submit).
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use autumn_idempotency::MemoryIdempotencyStore;
/// use autumn_idempotency::submit::SubmitTokenLayer;
/// use axum::{Router, routing::post};
///
/// let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)));
/// let app: Router = Router::new()
///     .route("/signup", post(|| async { "welcome" }))
///     .layer(SubmitTokenLayer::new(store));
/// ```
#[derive(Clone)]
pub struct SubmitTokenLayer {
    pub(crate) settings: Arc<Settings>,
}

/// A consumed token's first response is replayed for 10 minutes unless told
/// otherwise: long enough for a double click or a Back-and-resubmit.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10 * 60);
/// A token's lock lapses 24 hours after a crash unless told otherwise: a form
/// must not run twice because its first run stopped renewing.
pub const DEFAULT_IN_FLIGHT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Form bodies are scanned for the token up to 1 MiB.
pub const DEFAULT_MAX_FORM_BYTES: usize = 1024 * 1024;
/// A duplicate that arrives while the first submission runs gets 409 at
/// once unless told to wait.
pub const DEFAULT_IN_FLIGHT_WAIT: Duration = Duration::ZERO;

impl std::fmt::Debug for SubmitTokenLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubmitTokenLayer")
            .field("field_name", &self.settings.field_name)
            .field("ttl", &self.settings.ttl)
            .field("in_flight_ttl", &self.settings.in_flight_ttl)
            .field("exempt_paths", &self.settings.exempt_paths.prefixes())
            .finish_non_exhaustive()
    }
}

impl SubmitTokenLayer {
    /// A layer over `store` with the defaults: field
    /// [`_submit_token`](super::DEFAULT_FIELD_NAME), a consumed token's
    /// response replayed for [10 minutes](DEFAULT_TTL), in-flight locks
    /// lasting [24 hours](DEFAULT_IN_FLIGHT_TTL), form bodies scanned up to
    /// [1 MiB](DEFAULT_MAX_FORM_BYTES), responses recorded up to
    /// [1 MiB](crate::layer::DEFAULT_MAX_RECORD_BYTES), duplicates answered
    /// 409 [at once](DEFAULT_IN_FLIGHT_WAIT).
    pub fn new(store: Arc<dyn IdempotencyStore>) -> Self {
        Self {
            settings: Arc::new(Settings {
                store,
                field_name: DEFAULT_FIELD_NAME.into(),
                ttl: DEFAULT_TTL,
                in_flight_ttl: DEFAULT_IN_FLIGHT_TTL,
                exempt_paths: ExemptPaths::default(),
                max_form_bytes: DEFAULT_MAX_FORM_BYTES,
                max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
                in_flight_wait: DEFAULT_IN_FLIGHT_WAIT,
                metrics: Arc::new(IdempotencyMetrics::new()),
                sealing: RecordSealing::default(),
                clock: Arc::new(SystemClock),
                quota: None,
            }),
        }
    }

    fn map(mut self, f: impl FnOnce(&mut Settings)) -> Self {
        f(Arc::make_mut(&mut self.settings));
        self
    }

    /// The hidden field's name.
    #[must_use]
    pub fn with_field_name(self, name: impl Into<Arc<str>>) -> Self {
        let name = name.into();
        self.map(|s| s.field_name = name)
    }

    /// How long a consumed token's first response is replayed.
    ///
    /// # Panics
    ///
    /// When `ttl` is below [`MIN_TTL`](crate::layer::MIN_TTL) (one second):
    /// a double submit would find nothing to replay and get 409.
    ///
    /// ```should_panic
    /// # use std::{sync::Arc, time::Duration};
    /// # use autumn_idempotency::MemoryIdempotencyStore;
    /// # use autumn_idempotency::submit::SubmitTokenLayer;
    /// let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)));
    /// let _ = SubmitTokenLayer::new(store).with_ttl(Duration::ZERO);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn with_ttl(self, ttl: Duration) -> Self {
        crate::layer::check_ttl("SubmitTokenLayer::with_ttl", ttl);
        self.map(|s| s.ttl = ttl)
    }

    /// How long a lock lasts when its run stops renewing it (a crash); it is
    /// renewed every third of this while the handler runs.
    ///
    /// # Panics
    ///
    /// When `ttl` is below [`MIN_TTL`](crate::layer::MIN_TTL) (one second):
    /// a lock that lapses at once lets a double submit run twice.
    ///
    /// ```should_panic
    /// # use std::{sync::Arc, time::Duration};
    /// # use autumn_idempotency::MemoryIdempotencyStore;
    /// # use autumn_idempotency::submit::SubmitTokenLayer;
    /// let store = Arc::new(MemoryIdempotencyStore::new(Duration::from_secs(600)));
    /// let _ = SubmitTokenLayer::new(store).with_in_flight_ttl(Duration::ZERO);
    /// ```
    #[must_use]
    #[track_caller]
    pub fn with_in_flight_ttl(self, ttl: Duration) -> Self {
        crate::layer::check_ttl("SubmitTokenLayer::with_in_flight_ttl", ttl);
        self.map(|s| s.in_flight_ttl = ttl)
    }

    /// Path prefixes the guard skips (tokens are still minted there),
    /// matched by whole segments: `/api` covers `/api` and `/api/x`, not
    /// `/apiary`.
    #[must_use]
    pub fn with_exempt_paths(self, prefixes: Vec<String>) -> Self {
        self.map(|s| s.exempt_paths = ExemptPaths::from(prefixes))
    }

    /// The largest form body scanned for the field; larger urlencoded forms
    /// get 413, and a larger multipart form is scanned this far and watched
    /// beyond.
    #[must_use]
    pub fn with_max_form_bytes(self, limit: usize) -> Self {
        self.map(|s| s.max_form_bytes = limit)
    }

    /// The largest response body recorded. A larger 2xx/3xx response is
    /// still sent whole (streamed past this limit) but not recorded, and the
    /// token is released: submitting the form again runs the handler again.
    /// A warning is logged once per route.
    #[must_use]
    pub fn with_max_record_bytes(self, limit: usize) -> Self {
        self.map(|s| s.max_record_bytes = limit)
    }

    /// How long a duplicate that arrives while the first submission runs
    /// waits for it to finish (then gets its response) before 409. Zero:
    /// 409 at once.
    #[must_use]
    pub fn with_in_flight_wait(self, wait: Duration) -> Self {
        self.map(|s| s.in_flight_wait = wait)
    }

    /// Counters to count hits, misses and conflicts into.
    #[must_use]
    pub fn with_metrics(self, metrics: Arc<IdempotencyMetrics>) -> Self {
        self.map(|s| s.metrics = metrics)
    }

    /// Holds each caller to `quota`, counted together with its
    /// `Idempotency-Key` records when the idempotency layer has the same
    /// one: a caller holding as many as it allows gets 429
    /// `submit_token_quota_exceeded` for a new token, while a resubmission
    /// of a recorded one is still replayed. A request without a
    /// [`QuotaSubject`](crate::quota::QuotaSubject) is not counted.
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

    /// The clock a duplicate's [in-flight wait](Self::with_in_flight_wait)
    /// is measured on, so a test can end the wait by moving a
    /// [`ManualClock`](autumn_base::clock::ManualClock) instead of sleeping.
    #[must_use]
    pub fn with_clock(self, clock: SharedClock) -> Self {
        self.map(|s| s.clock = clock)
    }

    /// The counters this layer counts into.
    pub fn metrics(&self) -> &Arc<IdempotencyMetrics> {
        &self.settings.metrics
    }
}

impl<S> Layer<S> for SubmitTokenLayer {
    type Service = SubmitTokenService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SubmitTokenService::new(inner, self.settings.clone())
    }
}
