//! The document: one operation per mounted route, described by its handler's
//! types (see `probe.rs`) or by the app, then completed with what only
//! Autumn knows: path parameters the types did not name, the
//! `Idempotency-Key` header and the retry policy of each guarded route, and
//! the problem answers its guards and limits can give.
//!
//! Built once, at launch, into bytes: serving it costs a clone of those
//! bytes, and a request for anything else costs nothing. Every object's
//! keys are sorted, so the same app gives the same bytes on every machine
//! and the file can be committed and diffed.

use std::collections::BTreeMap;

use aide::openapi::Operation;
use autumn_idempotency::codes;
use autumn_idempotency::layer::GuardDescription;
use http::Method;
use serde_json::{Map, Value, json};

/// Describes one route's operation, beyond (or instead of) what its types
/// say: a route macro's is generated from the handler's signature; a
/// hand-built route is given one with [`Route::describe`](crate::Route::describe).
pub type Describe = fn(&mut Operation);

/// What the document says of one mounted route.
pub(crate) struct OperationSource {
    pub(crate) method: Method,
    /// In axum's syntax: `/orders/{id}`, `/files/{*rest}`.
    pub(crate) path: String,
    pub(crate) name: String,
    pub(crate) describe: Option<Describe>,
    /// The route's idempotency guard, when one runs on it.
    pub(crate) guard: Option<GuardDescription>,
    /// A `[rate_limit.rules]` rule covers it.
    pub(crate) rate_limited: bool,
}

/// What the whole app adds to every operation.
pub(crate) struct AppFacts<'a> {
    pub(crate) title: &'a str,
    pub(crate) version: &'a str,
    /// The submit-token field and its record's TTL in seconds, when the
    /// guard is on.
    pub(crate) submit_token: Option<(&'a str, u64)>,
    /// `[idempotency.quota]` is on: a new key may get 429.
    pub(crate) quota: bool,
    /// API tokens are mounted on the whole app: `true` when every request
    /// needs one, `false` when a request without one passes.
    pub(crate) bearer: Option<bool>,
    /// The credential `scope_by`'s resolver reads, as it describes it.
    pub(crate) principal: Option<&'a aide::openapi::SecurityScheme>,
    /// The header tenancy reads the tenant from (strategy `header`), and
    /// the path prefixes it leaves alone.
    pub(crate) tenant_header: Option<(&'a str, &'a [String])>,
}

/// The `Idempotency-Key` header's value: 1 to 255 visible ASCII
/// characters, bare or as a quoted string.
const KEY_PATTERN: &str = r#"^(?:[\x21-\x7E]{1,255}|"[\x21\x23-\x7E]{1,255}")$"#;

/// The document's bytes: OpenAPI 3.1, JSON, keys sorted.
pub(crate) fn build(app: &AppFacts<'_>, sources: Vec<OperationSource>) -> Vec<u8> {
    // The generator keeps the schemas it met per thread: start clean.
    aide::generate::reset_context();
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for source in &sources {
        let (path, names) = openapi_path(&source.path);
        let operation = operation(app, source, &names);
        paths
            .entry(path)
            .or_default()
            .insert(source.method.as_str().to_ascii_lowercase(), operation);
    }
    let mut schemas = aide::generate::in_context(|ctx| ctx.schema.take_definitions(true));
    aide::generate::reset_context();
    schemas.insert("Problem".to_owned(), problem_schema());
    let mut components = json!({ "schemas": schemas });
    if app.bearer.is_some() {
        components["securitySchemes"]["bearer"] = json!({
            "type": "http",
            "scheme": "bearer",
            "description": "An API token made with the app's `create-token` command or `ApiTokens::create`, sent as `Authorization: Bearer <token>`.",
        });
    }
    if let Some(scheme) = app.principal {
        components["securitySchemes"]["principal"] =
            serde_json::to_value(scheme).unwrap_or(Value::Null);
    }
    let document = json!({
        "openapi": "3.1.0",
        "info": { "title": app.title, "version": app.version },
        "paths": paths,
        "components": components,
    });
    let mut bytes = serde_json::to_vec_pretty(&sorted(document)).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// `path` as an OpenAPI path template (`{*rest}` becomes `{rest}`), and its
/// parameters' names.
fn openapi_path(path: &str) -> (String, Vec<String>) {
    let mut names = Vec::new();
    let segments: Vec<String> = path
        .split('/')
        .map(
            |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => {
                    let name = name.trim_start_matches('*');
                    names.push(name.to_owned());
                    format!("{{{name}}}")
                }
                None => segment.to_owned(),
            },
        )
        .collect();
    (segments.join("/"), names)
}

/// One operation, as JSON.
fn operation(app: &AppFacts<'_>, source: &OperationSource, path_names: &[String]) -> Value {
    let mut described = Operation {
        operation_id: Some(source.name.clone()),
        ..Operation::default()
    };
    if let Some(describe) = source.describe {
        describe(&mut described);
    }
    let mut operation = match serde_json::to_value(&described) {
        Ok(Value::Object(operation)) => operation,
        _ => Map::new(),
    };
    // A `Path<T>` over single values left their schemas by name; any
    // other parameter of the path is a string.
    let mut values = match operation.remove(super::probe::PATH_VALUES) {
        Some(Value::Object(values)) => values,
        _ => Map::new(),
    };
    let parameters = array(&mut operation, "parameters");
    for name in path_names {
        let declared = parameters
            .iter()
            .any(|p| p["in"] == "path" && p["name"] == name.as_str());
        if !declared {
            let schema = values
                .remove(name)
                .unwrap_or_else(|| json!({ "type": "string" }));
            parameters.push(json!({
                "name": name, "in": "path", "required": true,
                "schema": schema,
            }));
        }
    }
    let responses = object(&mut operation, "responses");
    let has_success = responses.keys().any(|status| status.starts_with('2'));
    if !has_success {
        responses.insert(
            "2XX".to_owned(),
            json!({ "description": "The handler's answer." }),
        );
    }
    for response in responses.values_mut() {
        if response["description"].as_str().is_none_or(str::is_empty) {
            response["description"] = json!("The handler's answer.");
        }
    }
    let mutating = !matches!(source.method, Method::GET | Method::HEAD | Method::OPTIONS);
    let mut problems: BTreeMap<u16, Vec<&str>> = BTreeMap::new();
    if let (Some(guard), true) = (source.guard, mutating) {
        idempotency(&mut operation, guard, app.quota, &mut problems);
    }
    if mutating && let Some((field, ttl)) = app.submit_token {
        let forms = operation
            .get("requestBody")
            .and_then(|body| body.get("content"))
            .and_then(Value::as_object)
            .is_some_and(|content| {
                content.keys().any(|media| {
                    media == "application/x-www-form-urlencoded" || media == "multipart/form-data"
                })
            });
        if forms {
            operation.insert(
                "x-submit-token".to_owned(),
                json!({ "field": field, "ttl": ttl }),
            );
            for (status, code) in [
                (409, codes::SUBMIT_TOKEN_IN_FLIGHT.as_str()),
                (422, codes::SUBMIT_TOKEN_REUSED.as_str()),
                (503, codes::SUBMIT_TOKEN_STORE_UNAVAILABLE.as_str()),
            ] {
                problems.entry(status).or_default().push(code);
            }
            if app.quota {
                problems
                    .entry(429)
                    .or_default()
                    .push(codes::SUBMIT_TOKEN_QUOTA_EXCEEDED.as_str());
            }
        }
    }
    if app.principal.is_some() {
        // The resolver lets a request that names nobody through.
        let security = array(&mut operation, "security");
        security.push(json!({ "principal": [] }));
        security.push(json!({}));
        problems
            .entry(401)
            .or_default()
            .extend([crate::codes::PRINCIPAL_UNAUTHORIZED.as_str()]);
        problems
            .entry(503)
            .or_default()
            .push(crate::codes::PRINCIPAL_UNAVAILABLE.as_str());
    }
    if let Some(required) = app.bearer {
        // An empty requirement makes the token optional.
        let security = array(&mut operation, "security");
        security.insert(0, json!({ "bearer": [] }));
        if !required && !security.contains(&json!({})) {
            security.push(json!({}));
        }
        problems.entry(401).or_default().extend([
            crate::codes::API_TOKEN_MISSING.as_str(),
            crate::codes::API_TOKEN_INVALID.as_str(),
        ]);
        problems
            .entry(503)
            .or_default()
            .push(crate::codes::API_TOKEN_STORE_UNAVAILABLE.as_str());
        problems
            .entry(429)
            .or_default()
            .push(crate::codes::RATE_LIMITED.as_str());
    }
    if let Some((header, exempt)) = app.tenant_header
        && !exempt.iter().any(|prefix| under(&source.path, prefix))
    {
        array(&mut operation, "parameters").push(json!({
            "name": header,
            "in": "header",
            "required": true,
            "description": "The tenant the request acts in.",
            "schema": { "type": "string" },
        }));
        problems
            .entry(400)
            .or_default()
            .push(crate::codes::TENANT_MISSING.as_str());
        problems
            .entry(404)
            .or_default()
            .push(crate::codes::TENANT_UNKNOWN.as_str());
        problems
            .entry(503)
            .or_default()
            .push(crate::codes::TENANT_UNAVAILABLE.as_str());
    }
    // What the extractors refuse before the handler runs.
    let reads = operation.contains_key("requestBody")
        || operation
            .get("parameters")
            .and_then(Value::as_array)
            .is_some_and(|parameters| !parameters.is_empty());
    if reads {
        problems.entry(400).or_default();
    }
    // A path that names a resource may name one that is not there.
    if !path_names.is_empty() {
        problems
            .entry(404)
            .or_default()
            .push(autumn_base::problem::codes::NOT_FOUND.as_str());
    }
    if operation.contains_key("requestBody") {
        problems.entry(413).or_default();
        problems.entry(415).or_default();
        problems.entry(422).or_default();
    }
    problems
        .entry(500)
        .or_default()
        .push(autumn_base::problem::codes::INTERNAL_ERROR.as_str());
    if source.rate_limited {
        problems.entry(429).or_default().push("rate_limited");
        problems
            .entry(503)
            .or_default()
            .push("rate_limit_unavailable");
    }
    let responses = object(&mut operation, "responses");
    for (status, mut codes) in problems {
        codes.sort_unstable();
        codes.dedup();
        responses.insert(status.to_string(), problem_response(status, &codes));
    }
    if operation
        .get("parameters")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        operation.remove("parameters");
    }
    Value::Object(operation)
}

/// What a guarded operation tells a client about retrying it.
fn idempotency(
    operation: &mut Map<String, Value>,
    guard: GuardDescription,
    quota: bool,
    problems: &mut BTreeMap<u16, Vec<&'static str>>,
) {
    array(operation, "parameters").push(json!({
        "name": "Idempotency-Key",
        "in": "header",
        "required": guard.require_key,
        "description": "A new unique value (a UUID, say) for each operation, and the same one for every retry of it: a retry gets the first attempt's response instead of running again. 1 to 255 visible ASCII characters, bare or quoted.",
        "schema": { "type": "string", "pattern": KEY_PATTERN },
    }));
    operation.insert(
        "x-idempotency".to_owned(),
        json!({
            "ttl": guard.ttl.as_secs(),
            "in_flight_wait_ms": u64::try_from(guard.in_flight_wait.as_millis()).unwrap_or(u64::MAX),
            "fingerprint": guard.fingerprint,
        }),
    );
    let replayed = json!({
        "description": "`true` on a response replayed from the first attempt's record.",
        "schema": { "type": "string", "enum": ["true"] },
    });
    for (status, response) in object(operation, "responses") {
        if (status.starts_with('2') || status.starts_with('3'))
            && let Some(response) = response.as_object_mut()
        {
            object(response, "headers")
                .insert("X-Idempotent-Replayed".to_owned(), replayed.clone());
        }
    }
    let mut bad_request = vec![
        codes::IDEMPOTENCY_KEY_MALFORMED.as_str(),
        codes::REQUEST_BODY_UNREADABLE.as_str(),
    ];
    if guard.require_key {
        bad_request.push(codes::IDEMPOTENCY_KEY_MISSING.as_str());
    }
    for (status, list) in [
        (400, bad_request),
        (
            409,
            vec![
                codes::IDEMPOTENCY_KEY_IN_FLIGHT.as_str(),
                codes::IDEMPOTENCY_LOCK_UNAVAILABLE.as_str(),
                codes::IDEMPOTENCY_REPLAY_UNAVAILABLE.as_str(),
                codes::IDEMPOTENCY_RECORD_UNREADABLE.as_str(),
                codes::IDEMPOTENCY_RESPONSE_NOT_RECORDED.as_str(),
            ],
        ),
        (413, vec![codes::REQUEST_BODY_TOO_LARGE.as_str()]),
        (422, vec![codes::IDEMPOTENCY_KEY_REUSED.as_str()]),
        (
            503,
            vec![
                codes::IDEMPOTENCY_STORE_UNAVAILABLE.as_str(),
                codes::IDEMPOTENCY_STORE_FULL.as_str(),
            ],
        ),
    ] {
        problems.entry(status).or_default().extend(list);
    }
    if quota {
        problems
            .entry(429)
            .or_default()
            .push(codes::IDEMPOTENCY_QUOTA_EXCEEDED.as_str());
    }
}

/// A problem answer with `status`, listing the `code`s it may carry.
fn problem_response(status: u16, codes: &[&str]) -> Value {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|status| status.canonical_reason())
        .unwrap_or("Error");
    let description = if codes.is_empty() {
        format!("{reason}: a problem document.")
    } else {
        format!(
            "{reason}: a problem document whose `code` is one of {}.",
            codes.join(", ")
        )
    };
    let mut response = json!({
        "description": description,
        "content": {
            "application/problem+json": {
                "schema": { "$ref": "#/components/schemas/Problem" },
            },
        },
        "x-problem-codes": codes,
    });
    if matches!(status, 409 | 429 | 503) {
        response["headers"] = json!({
            "Retry-After": {
                "description": "Seconds to wait before trying again.",
                "schema": { "type": "integer", "minimum": 0 },
            },
        });
    }
    response
}

/// RFC 9457's problem document, with the members Autumn adds.
fn problem_schema() -> Value {
    json!({
        "type": "object",
        "description": "An RFC 9457 problem document. `code` is stable and machine-readable; `detail` says what to do, for a person.",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": { "type": "string" },
            "title": { "type": "string" },
            "status": { "type": "integer" },
            "detail": { "type": "string" },
            "code": { "type": "string" },
            "instance": { "type": "string" },
            "retry_after": { "type": "integer" },
            "new_key_needed": { "type": "boolean" },
        },
    })
}

/// Whether `path` is `prefix` or below it, by whole segments.
fn under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The array under `key` in `object`, made when absent.
fn array<'a>(object: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let slot = object
        .entry(key)
        .or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    match slot {
        Value::Array(array) => array,
        _ => unreachable!("made an array above"),
    }
}

/// The object under `key` in `object`, made when absent.
fn object<'a>(object: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = object
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(object) => object,
        _ => unreachable!("made an object above"),
    }
}

/// `value` with every object's keys in order, whatever map serde_json was
/// built with.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(object) => {
            let ordered: BTreeMap<String, Value> =
                object.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(ordered.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axum_paths_become_openapi_templates() {
        assert_eq!(
            openapi_path("/orders/{id}/files/{*rest}"),
            (
                "/orders/{id}/files/{rest}".to_owned(),
                vec!["id".to_owned(), "rest".to_owned()]
            )
        );
        assert_eq!(openapi_path("/"), ("/".to_owned(), Vec::new()));
    }
}
