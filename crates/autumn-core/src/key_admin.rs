//! Key administration for operators: `/actuator/idempotency/keys/{storage_key}`
//! and the `idempotency inspect|evict` command every app binary
//! understands. Both work on the app's own idempotency store, whatever its
//! backend, through `autumn_idempotency::admin`; both are off in production
//! unless `[idempotency.admin] enabled = true`.

use std::sync::Arc;

use std::borrow::Cow;

use autumn_base::problem::{ProblemCode, ProblemDetails};
use autumn_idempotency::admin::{self, KeyLookup};
use autumn_idempotency::{IdempotencyStore, StoreError};
use axum::Json;
use axum::Router;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::admin_token::AdminToken;

/// The word that, first on an app binary's command line, runs a key
/// administration command instead of the server.
pub(crate) const COMMAND: &str = "idempotency";

/// Whether this process was started for the command: its first argument
/// is [`COMMAND`].
pub(crate) fn invoked() -> bool {
    std::env::args_os()
        .nth(1)
        .is_some_and(|first| first == COMMAND)
}

const USAGE: &str = "usage: idempotency inspect|evict KEY --path /orders [--method POST] [--scope part=value]... [--body] [--by NAME], or idempotency inspect|evict --storage-key STORAGE_KEY";

/// One parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Command {
    evict: bool,
    storage_key: String,
    with_body: bool,
    by: String,
}

impl Command {
    /// Reads the arguments after [`COMMAND`].
    pub(crate) fn parse(args: &[String]) -> Result<Self, String> {
        let mut args = args.iter();
        let evict = match args.next().map(String::as_str) {
            Some("inspect") => false,
            Some("evict") => true,
            _ => return Err(USAGE.to_owned()),
        };
        let (mut key, mut storage_key, mut path) = (None, None, None);
        let mut method = "POST".to_owned();
        let mut scope = Vec::new();
        let mut with_body = false;
        let mut by = std::env::var("USER").unwrap_or_else(|_| "cli".to_owned());
        while let Some(arg) = args.next() {
            let mut value = |name: &str| {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value; {USAGE}"))
            };
            match arg.as_str() {
                "--storage-key" => storage_key = Some(value("--storage-key")?),
                "--path" => path = Some(value("--path")?),
                "--method" => method = value("--method")?,
                "--by" => by = value("--by")?,
                "--body" => with_body = true,
                "--scope" => {
                    let part = value("--scope")?;
                    let (name, value) = part
                        .split_once('=')
                        .ok_or_else(|| format!("--scope takes part=value, got `{part}`"))?;
                    scope.push((name.to_owned(), value.to_owned()));
                }
                flag if flag.starts_with("--") => {
                    return Err(format!("unknown option `{flag}`; {USAGE}"));
                }
                _ if key.is_none() => key = Some(arg.clone()),
                _ => return Err(format!("unexpected argument `{arg}`; {USAGE}")),
            }
        }
        let storage_key = match (storage_key, key, path) {
            (Some(storage_key), None, None) => storage_key,
            (None, Some(key), Some(path)) => scope
                .iter()
                .fold(KeyLookup::new(&method, &path, &key), |lookup, (n, v)| {
                    lookup.with_scope(n, v)
                })
                .storage_key(),
            _ => return Err(USAGE.to_owned()),
        };
        Ok(Self {
            evict,
            storage_key,
            with_body,
            by,
        })
    }

    /// Whether the command asks for the recorded body (`--body`).
    pub(crate) fn wants_body(&self) -> bool {
        self.with_body
    }

    /// Runs the command on `store`: the report (or the eviction's outcome)
    /// as one line of JSON.
    pub(crate) async fn run(&self, store: &dyn IdempotencyStore) -> Result<String, String> {
        let failed = |error: autumn_idempotency::StoreError| error.to_string();
        if self.evict {
            let by = format!("cli:{}", self.by);
            let evicted = admin::evict(store, &self.storage_key, &by)
                .await
                .map_err(failed)?;
            return Ok(serde_json::json!({
                "storage_key": self.storage_key,
                "evicted": evicted,
            })
            .to_string());
        }
        let report = admin::inspect(store, &self.storage_key, self.with_body)
            .await
            .map_err(failed)?;
        serde_json::to_string(&report).map_err(|e| e.to_string())
    }
}

#[derive(serde::Deserialize)]
struct BodyQuery {
    #[serde(default)]
    body: bool,
}

/// `GET` (`?body=true` adds the recorded body, when `allow_bodies`) and
/// `DELETE` on `/actuator/idempotency/keys/{storage_key}`, for a request
/// carrying `token` as a bearer token.
pub(crate) fn routes(store: Arc<dyn IdempotencyStore>, token: &str, allow_bodies: bool) -> Router {
    let token = AdminToken::new(token);
    let (inspect_store, inspect_token) = (store.clone(), token.clone());
    Router::new().route(
        "/actuator/idempotency/keys/{storage_key}",
        get(
            move |headers: HeaderMap, Path(key): Path<String>, Query(query): Query<BodyQuery>| {
                let (store, token) = (inspect_store.clone(), inspect_token.clone());
                async move {
                    if !token.admits(&headers) {
                        return Refusal::Unauthorized.into_response();
                    }
                    if query.body && !allow_bodies {
                        return Refusal::BodiesNotAllowed.into_response();
                    }
                    match admin::inspect(&*store, &key, query.body).await {
                        Ok(report) => Json(report).into_response(),
                        Err(error) => Refusal::StoreUnavailable(error).into_response(),
                    }
                }
            },
        )
        .delete(move |headers: HeaderMap, Path(key): Path<String>| {
            let (store, token) = (store.clone(), token.clone());
            async move {
                if !token.admits(&headers) {
                    return Refusal::Unauthorized.into_response();
                }
                match admin::evict(&*store, &key, "actuator").await {
                    Ok(evicted) => Json(serde_json::json!({
                        "storage_key": key,
                        "evicted": evicted,
                    }))
                    .into_response(),
                    Err(error) => Refusal::StoreUnavailable(error).into_response(),
                }
            }
        }),
    )
}

/// Why the key administration endpoint answered with a problem document.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// 401 `idempotency_admin_unauthorized`.
    #[error(
        "key administration needs `Authorization: Bearer` with the token set in idempotency.admin.token"
    )]
    Unauthorized,
    /// 403 `idempotency_admin_bodies_disabled`: a recorded body was asked
    /// for, and `idempotency.admin.allow_bodies` is off.
    #[error(
        "recorded bodies are not shown: they may hold personal data; set idempotency.admin.allow_bodies = true to allow ?body=true"
    )]
    BodiesNotAllowed,
    /// 503 `idempotency_store_unavailable`: the operator asking is sent the
    /// store's error (its URLs redacted), to act on it.
    #[error("the idempotency store could not be asked")]
    StoreUnavailable(#[source] StoreError),
}

impl ProblemDetails for Refusal {
    fn problem_status(&self) -> StatusCode {
        match self {
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::BodiesNotAllowed => StatusCode::FORBIDDEN,
            Self::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(match self {
            Self::Unauthorized => crate::codes::IDEMPOTENCY_ADMIN_UNAUTHORIZED,
            Self::BodiesNotAllowed => crate::codes::IDEMPOTENCY_ADMIN_BODIES_DISABLED,
            Self::StoreUnavailable(_) => crate::codes::IDEMPOTENCY_STORE_UNAVAILABLE,
        })
    }

    fn problem_detail(&self) -> Cow<'_, str> {
        match self {
            Self::Unauthorized | Self::BodiesNotAllowed => Cow::Owned(self.to_string()),
            Self::StoreUnavailable(error) => Cow::Owned(format!("{self}: {error}")),
        }
    }

    fn problem_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        match self {
            Self::Unauthorized => {
                vec![(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))]
            }
            Self::BodiesNotAllowed | Self::StoreUnavailable(_) => Vec::new(),
        }
    }

    /// A store outage: the operators must see it, whoever asked.
    fn log_for_operators(&self) {
        if let Self::StoreUnavailable(error) = self {
            tracing::warn!(%error, "key administration could not reach the idempotency store");
        }
    }
}

autumn_base::problem_into_response!(Refusal);

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Command, String> {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        Command::parse(&args)
    }

    #[test]
    fn a_key_is_found_by_its_request_or_its_storage_key() {
        let command =
            parse("inspect order-1 --path /orders --scope tenant=acme --body").expect("parses");
        assert!(!command.evict);
        assert!(command.with_body);
        assert_eq!(
            command.storage_key,
            KeyLookup::new("POST", "/orders", "order-1")
                .with_scope("tenant", "acme")
                .storage_key()
        );
        let command = parse("evict --storage-key idem:v1:abc --by ops").expect("parses");
        assert!(command.evict);
        assert_eq!(command.storage_key, "idem:v1:abc");
        assert_eq!(command.by, "ops");
    }

    #[test]
    fn a_bad_command_line_says_how_to_write_it() {
        for line in [
            "",
            "drop k --path /x",
            "inspect k",
            "inspect --path /x",
            "inspect k --path /x --storage-key s",
            "inspect k --path /x extra",
            "inspect k --path /x --scope tenant",
            "inspect k --path",
            "inspect k --path /x --force",
        ] {
            let error = parse(line).expect_err(line);
            assert!(
                error.contains("idempotency inspect|evict") || error.contains("--scope"),
                "{line}: {error}"
            );
        }
    }
}
