//! The dead jobs on the actuator, for a request with the bearer token of
//! `[jobs.admin] token`: `GET /actuator/jobs/dead` lists them,
//! `POST /actuator/jobs/dead/{id}/retry` runs one again and
//! `DELETE /actuator/jobs/dead/{id}` discards it. The same statements as
//! the `jobs dead|retry|discard` command (`admin.rs`), and the same JSON.

use std::borrow::Cow;
use std::sync::Arc;

use autumn_base::database::{DbError, DbPool};
use autumn_base::problem::{ProblemCode, ProblemDetails};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::routing::{delete, get, post};
use axum::{Json, Router};

use super::admin::settled;
use super::queue::{self, DeadJob};
use crate::admin_token::AdminToken;

/// How many dead jobs a list shows unless `?limit=` says, and at most.
const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;

/// What every endpoint needs.
struct Admin {
    pool: DbPool,
    token: AdminToken,
    allow_payloads: bool,
}

impl Admin {
    fn admit(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        if self.token.admits(headers) {
            Ok(())
        } else {
            Err(Refusal::Unauthorized)
        }
    }
}

/// The three endpoints, on the jobs of `pool`, for a request carrying
/// `token` as a bearer token; payloads shown on request only when
/// `allow_payloads`.
pub(crate) fn routes(pool: DbPool, token: &str, allow_payloads: bool) -> Router {
    let admin = Arc::new(Admin {
        pool,
        token: AdminToken::new(token),
        allow_payloads,
    });
    Router::new()
        .route("/actuator/jobs/dead", get(list))
        .route("/actuator/jobs/dead/{id}", delete(discard))
        .route("/actuator/jobs/dead/{id}/retry", post(retry))
        .with_state(admin)
}

#[derive(serde::Deserialize)]
struct ListQuery {
    limit: Option<i64>,
    #[serde(default)]
    payloads: bool,
}

/// `GET /actuator/jobs/dead[?limit=N][&payloads=true]`: the oldest dead
/// jobs first.
async fn list(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Vec<DeadJob>>, Refusal> {
    // The token first: a caller without it learns nothing, not even
    // which queries are wrong.
    admin.admit(&headers)?;
    let Query(query) = query.map_err(|rejection| Refusal::BadQuery(rejection.body_text()))?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(Refusal::BadQuery(format!(
            "limit takes a number from 1 to {MAX_LIMIT}, got {limit}"
        )));
    }
    if query.payloads && !admin.allow_payloads {
        return Err(Refusal::PayloadsNotAllowed);
    }
    let dead = queue::dead(&admin.pool, limit, query.payloads)
        .await
        .map_err(Refusal::DatabaseUnavailable)?;
    Ok(Json(dead))
}

/// `POST /actuator/jobs/dead/{id}/retry`: due again at once, with all its
/// attempts.
async fn retry(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<serde_json::Value>, Refusal> {
    settle(&admin, &headers, id, true).await
}

/// `DELETE /actuator/jobs/dead/{id}`: deleted.
async fn discard(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<serde_json::Value>, Refusal> {
    settle(&admin, &headers, id, false).await
}

async fn settle(
    admin: &Admin,
    headers: &HeaderMap,
    id: Result<Path<String>, PathRejection>,
    retry: bool,
) -> Result<Json<serde_json::Value>, Refusal> {
    admin.admit(headers)?;
    let Path(id) = id.map_err(|rejection| Refusal::BadId(rejection.body_text()))?;
    let id: i64 = id.parse().map_err(|_| Refusal::BadId(id))?;
    let changed = queue::settle_dead(&admin.pool, id, retry)
        .await
        .map_err(Refusal::DatabaseUnavailable)?;
    if !changed {
        return Err(Refusal::NotDead(id));
    }
    Ok(Json(settled(id, retry)))
}

/// Why a dead-job endpoint answered with a problem document.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// 401 `jobs_admin_unauthorized`.
    #[error(
        "the dead-job endpoints need `Authorization: Bearer` with the token set in jobs.admin.token"
    )]
    Unauthorized,
    /// 400 `job_id_invalid`.
    #[error("`{0}` is not a job id: ids are whole numbers, as GET /actuator/jobs/dead lists them")]
    BadId(String),
    /// 400 `bad_query`.
    #[error("{0}")]
    BadQuery(String),
    /// 403 `jobs_admin_payloads_disabled`.
    #[error(
        "payloads are not shown: they may hold personal data; set jobs.admin.allow_payloads = true to allow ?payloads=true"
    )]
    PayloadsNotAllowed,
    /// 404 `dead_job_not_found`: there is no such job, or it is not dead
    /// (pending again after a retry, or done).
    #[error("no dead job has the id {0}")]
    NotDead(i64),
    /// 503 `jobs_database_unavailable`: the operator asking is sent the
    /// database's error, to act on it.
    #[error("the job queue could not be reached")]
    DatabaseUnavailable(#[source] DbError),
}

impl ProblemDetails for Refusal {
    fn problem_status(&self) -> StatusCode {
        match self {
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::BadId(_) | Self::BadQuery(_) => StatusCode::BAD_REQUEST,
            Self::PayloadsNotAllowed => StatusCode::FORBIDDEN,
            Self::NotDead(_) => StatusCode::NOT_FOUND,
            Self::DatabaseUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(match self {
            Self::Unauthorized => crate::codes::JOBS_ADMIN_UNAUTHORIZED,
            Self::BadId(_) => crate::codes::JOB_ID_INVALID,
            Self::BadQuery(_) => crate::codes::BAD_QUERY,
            Self::PayloadsNotAllowed => crate::codes::JOBS_ADMIN_PAYLOADS_DISABLED,
            Self::NotDead(_) => crate::codes::DEAD_JOB_NOT_FOUND,
            Self::DatabaseUnavailable(_) => crate::codes::JOBS_DATABASE_UNAVAILABLE,
        })
    }

    fn problem_detail(&self) -> Cow<'_, str> {
        match self {
            Self::DatabaseUnavailable(error) => Cow::Owned(format!(
                "{self}: {}",
                crate::config::redact(&error.to_string())
            )),
            _ => Cow::Owned(self.to_string()),
        }
    }

    fn problem_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        match self {
            Self::Unauthorized => {
                vec![(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))]
            }
            _ => Vec::new(),
        }
    }

    /// A database outage: the operators must see it, whoever asked.
    fn log_for_operators(&self) {
        if let Self::DatabaseUnavailable(error) = self {
            tracing::warn!(%error, "the dead-job endpoints could not reach the job queue");
        }
    }
}

autumn_base::problem_into_response!(Refusal);
