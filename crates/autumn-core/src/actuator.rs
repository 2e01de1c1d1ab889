//! `/actuator/*`: the app's health and counters, as JSON.

use std::sync::Arc;

use autumn_idempotency::IdempotencyMetrics;
use axum::routing::get;
use axum::{Json, Router};

/// Counters shared by the app's layers and reported by `/actuator/metrics`.
#[derive(Debug, Clone, Default)]
pub(crate) struct AppMetrics {
    pub(crate) idempotency: Arc<IdempotencyMetrics>,
    pub(crate) submit_token: Arc<IdempotencyMetrics>,
}

pub(crate) fn routes(metrics: AppMetrics) -> Router {
    Router::new()
        .route(
            "/actuator/metrics",
            get(move || {
                let idempotency = metrics.idempotency.snapshot();
                let submit_token = metrics.submit_token.snapshot();
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
