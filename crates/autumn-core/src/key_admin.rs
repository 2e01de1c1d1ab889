//! Key administration for operators: `/actuator/idempotency/keys/{storage_key}`
//! and the `idempotency inspect|evict` command every app binary
//! understands. Both work on the app's own idempotency store, whatever its
//! backend, through `autumn_idempotency::admin`; both are off in production
//! unless `[idempotency.admin] enabled = true`.

use std::sync::Arc;

use autumn_base::problem_response;
use autumn_idempotency::IdempotencyStore;
use autumn_idempotency::admin::{self, KeyLookup};
use axum::Json;
use axum::Router;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest as _, Sha256};

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

/// `GET` (`?body=true` adds the recorded body) and `DELETE` on
/// `/actuator/idempotency/keys/{storage_key}`, asking for `token` as a
/// bearer token when one is configured.
pub(crate) fn routes(store: Arc<dyn IdempotencyStore>, token: Option<&str>) -> Router {
    // Compared as digests: the time a comparison takes says nothing of the
    // token.
    let token: Option<Arc<[u8]>> = token.map(|t| Sha256::digest(t.as_bytes()).to_vec().into());
    let (inspect_store, inspect_token) = (store.clone(), token.clone());
    Router::new().route(
        "/actuator/idempotency/keys/{storage_key}",
        get(
            move |headers: HeaderMap, Path(key): Path<String>, Query(query): Query<BodyQuery>| {
                let (store, token) = (inspect_store.clone(), inspect_token.clone());
                async move {
                    if let Some(refused) = refuse(token.as_deref(), &headers) {
                        return refused;
                    }
                    match admin::inspect(&*store, &key, query.body).await {
                        Ok(report) => Json(report).into_response(),
                        Err(error) => unavailable(&error),
                    }
                }
            },
        )
        .delete(move |headers: HeaderMap, Path(key): Path<String>| {
            let (store, token) = (store.clone(), token.clone());
            async move {
                if let Some(refused) = refuse(token.as_deref(), &headers) {
                    return refused;
                }
                match admin::evict(&*store, &key, "actuator").await {
                    Ok(evicted) => Json(serde_json::json!({
                        "storage_key": key,
                        "evicted": evicted,
                    }))
                    .into_response(),
                    Err(error) => unavailable(&error),
                }
            }
        }),
    )
}

/// 401 unless the request carries the configured bearer token.
fn refuse(token: Option<&[u8]>, headers: &HeaderMap) -> Option<Response> {
    let expected = token?;
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| Sha256::digest(t.as_bytes()));
    if sent.is_some_and(|sent| sent.as_slice() == expected) {
        return None;
    }
    let mut response = problem_response(
        StatusCode::UNAUTHORIZED,
        Some("idempotency_admin_unauthorized"),
        "key administration needs `Authorization: Bearer` with the token set in idempotency.admin.token",
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Some(response)
}

fn unavailable(error: &autumn_idempotency::StoreError) -> Response {
    tracing::warn!(%error, "key administration could not reach the idempotency store");
    problem_response(
        StatusCode::SERVICE_UNAVAILABLE,
        Some("idempotency_store_unavailable"),
        &format!("the idempotency store could not be asked: {error}"),
    )
}

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
