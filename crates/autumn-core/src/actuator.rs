//! `/actuator/*`: the app's health and counters, as JSON.

use std::sync::Arc;

use autumn_idempotency::{IdempotencyMetrics, IdempotencyStore, MetricsSnapshot};
use axum::routing::get;
use axum::{Json, Router};

/// Counters shared by the app's layers and reported by `/actuator/metrics`,
/// with the stores whose size is reported next to them.
#[derive(Clone, Default)]
pub(crate) struct AppMetrics {
    pub(crate) idempotency: Arc<IdempotencyMetrics>,
    pub(crate) submit_token: Arc<IdempotencyMetrics>,
    pub(crate) idempotency_store: Option<Arc<dyn IdempotencyStore>>,
    pub(crate) submit_token_store: Option<Arc<dyn IdempotencyStore>>,
}

impl std::fmt::Debug for AppMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppMetrics")
            .field("idempotency", &self.idempotency)
            .field("submit_token", &self.submit_token)
            .finish_non_exhaustive()
    }
}

/// The counters, and under `store` the store's size when it reports one
/// (the memory store does; Redis and databases keep their own accounts).
fn report(
    counters: MetricsSnapshot,
    store: Option<&Arc<dyn IdempotencyStore>>,
) -> serde_json::Value {
    let mut report = serde_json::json!(counters);
    if let (Some(size), Some(fields)) = (store.and_then(|s| s.size()), report.as_object_mut()) {
        fields.insert("store".to_owned(), serde_json::json!(size));
    }
    report
}

pub(crate) fn routes(metrics: AppMetrics) -> Router {
    Router::new()
        .route(
            "/actuator/metrics",
            get(move || {
                let idempotency = report(
                    metrics.idempotency.snapshot(),
                    metrics.idempotency_store.as_ref(),
                );
                let submit_token = report(
                    metrics.submit_token.snapshot(),
                    metrics.submit_token_store.as_ref(),
                );
                async move {
                    Json(serde_json::json!({
                        "idempotency": idempotency,
                        "submit_token": submit_token,
                    }))
                }
            }),
        )
        .route(
            "/actuator/health",
            get(|| async { Json(serde_json::json!({ "status": "UP" })) }),
        )
}
