//! `GET /openapi.json`: the document built from the app's routes, with what
//! each guarded operation tells a client about retrying it.

use autumn_web::config::AutumnConfig;
use autumn_web::openapi::JsonSchema;
use autumn_web::prelude::*;
use autumn_web::test::{TestApp, TestClient};
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "autumn_web::openapi::schemars")]
struct NewOrder {
    /// What is ordered.
    item: String,
    qty: u32,
}

#[derive(Serialize, JsonSchema)]
#[schemars(crate = "autumn_web::openapi::schemars")]
struct Order {
    id: u64,
    item: String,
}

#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "autumn_web::openapi::schemars")]
struct Signup {
    email: String,
}

#[post("/orders")]
async fn place_order(Json(new): Json<NewOrder>) -> (StatusCode, Json<Order>) {
    let _ = new.qty;
    (
        StatusCode::CREATED,
        Json(Order {
            id: 1,
            item: new.item,
        }),
    )
}

#[get("/orders/{id}")]
async fn show_order(Path(id): Path<u64>) -> AutumnResult<Json<Order>> {
    Ok(Json(Order {
        id,
        item: "tea".to_owned(),
    }))
}

#[get("/orders/{id}/lines/{line}")]
async fn show_line(Path((id, line)): Path<(uuid::Uuid, u8)>) -> String {
    format!("{id} {line}")
}

#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "autumn_web::openapi::schemars")]
struct Shelf {
    aisle: u16,
    shelf: String,
}

#[get("/aisles/{aisle}/{shelf}")]
async fn show_shelf(Path(at): Path<Shelf>) -> String {
    format!("{} {}", at.aisle, at.shelf)
}

#[post("/payments", idempotency = "required", in_flight_wait_ms = 250)]
async fn pay(Json(new): Json<NewOrder>) -> Json<Order> {
    Json(Order {
        id: 2,
        item: new.item,
    })
}

#[post("/hooks", idempotent = false)]
async fn hook() -> &'static str {
    "ok"
}

#[post("/signup")]
async fn signup(Form(form): Form<Signup>) -> Redirect {
    let _ = form.email;
    Redirect::to("/")
}

fn client(toml: &str) -> TestClient {
    TestApp::new()
        .routes(routes![
            place_order,
            show_order,
            show_line,
            show_shelf,
            pay,
            hook,
            signup
        ])
        .idempotent()
        .with_config(AutumnConfig::from_toml_str(toml).expect("config"))
        .build()
}

async fn document(client: &TestClient) -> serde_json::Value {
    let answer = client.get("/openapi.json").send().await;
    answer
        .assert_status(200)
        .assert_header("content-type", "application/json");
    answer.json()
}

fn parameter<'a>(operation: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    operation["parameters"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
}

#[tokio::test]
async fn every_route_is_an_operation_with_its_types_and_its_retry_policy() {
    let doc = document(&client("")).await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["title"], "API");

    let place = &doc["paths"]["/orders"]["post"];
    assert_eq!(place["operationId"], "place_order");
    // The request body from `Json<NewOrder>`, the response from `Json<Order>`.
    assert_eq!(
        place["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/NewOrder"
    );
    assert_eq!(
        place["responses"]["2XX"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Order"
    );
    assert_eq!(
        doc["components"]["schemas"]["NewOrder"]["properties"]["item"]["description"],
        "What is ordered."
    );
    // Guarded: the key, optional here, and how a retry is answered.
    let key = parameter(place, "Idempotency-Key").expect("the key header");
    assert_eq!(key["in"], "header");
    assert_eq!(key["required"], false);
    assert_eq!(place["x-idempotency"]["ttl"], 86_400);
    assert_eq!(place["x-idempotency"]["fingerprint"], "bytes");
    assert!(place["responses"]["2XX"]["headers"]["X-Idempotent-Replayed"].is_object());
    for (status, code) in [
        ("400", "idempotency_key_malformed"),
        ("409", "idempotency_key_in_flight"),
        ("422", "idempotency_key_reused"),
        ("429", "idempotency_quota_exceeded"),
        ("503", "idempotency_store_unavailable"),
    ] {
        let response = &place["responses"][status];
        assert_eq!(
            response["content"]["application/problem+json"]["schema"]["$ref"],
            "#/components/schemas/Problem",
            "{status}"
        );
        assert!(
            response["x-problem-codes"]
                .as_array()
                .is_some_and(|codes| codes.iter().any(|c| c == code)),
            "{status}: {response}"
        );
    }

    // A required key, and the route's own wait.
    let pay = &doc["paths"]["/payments"]["post"];
    assert_eq!(
        parameter(pay, "Idempotency-Key").expect("key")["required"],
        true
    );
    assert_eq!(pay["x-idempotency"]["in_flight_wait_ms"], 250);
    assert!(
        pay["responses"]["400"]["x-problem-codes"]
            .as_array()
            .is_some_and(|codes| codes.iter().any(|c| c == "idempotency_key_missing"))
    );

    // A read and a route that opted out say nothing of keys.
    let show = &doc["paths"]["/orders/{id}"]["get"];
    assert!(parameter(show, "Idempotency-Key").is_none());
    let id = parameter(show, "id").expect("the path parameter");
    assert_eq!(id["in"], "path");
    // A single value's own schema, not a plain string.
    assert_eq!(id["schema"]["type"], "integer", "{id}");
    assert_eq!(id["schema"]["format"], "uint64", "{id}");
    assert_eq!(show["responses"]["404"]["x-problem-codes"][0], "not_found");
    // A tuple's values by position; a struct's fields by name.
    let line = &doc["paths"]["/orders/{id}/lines/{line}"]["get"];
    let schema = |operation, name| parameter(operation, name).expect(name)["schema"].clone();
    assert_eq!(schema(line, "id")["format"], "uuid");
    assert_eq!(schema(line, "line")["format"], "uint8");
    let shelf = &doc["paths"]["/aisles/{aisle}/{shelf}"]["get"];
    assert_eq!(schema(shelf, "aisle")["format"], "uint16");
    assert_eq!(schema(shelf, "shelf")["type"], "string");
    assert!(
        !serde_json::to_string(&doc)
            .expect("JSON")
            .contains("x-autumn-path-values"),
        "the handover does not reach the document"
    );
    let hook = &doc["paths"]["/hooks"]["post"];
    assert!(parameter(hook, "Idempotency-Key").is_none());
    assert!(hook.get("x-idempotency").is_none());
    assert!(hook["responses"].get("409").is_none());

    // A form route names its submit-token field.
    let signup = &doc["paths"]["/signup"]["post"];
    assert_eq!(signup["x-submit-token"]["field"], "_submit_token");
    assert!(
        signup["requestBody"]["content"]
            .get("application/x-www-form-urlencoded")
            .is_some()
    );
}

#[tokio::test]
async fn the_document_is_the_same_bytes_every_time() {
    let first = client("").get("/openapi.json").send().await.text();
    let second = client("").get("/openapi.json").send().await.text();
    assert_eq!(first, second);
    // Keys sorted: `components` before `info` before `openapi` before `paths`.
    let order: Vec<usize> = ["\"components\"", "\"info\"", "\"openapi\"", "\"paths\""]
        .iter()
        .map(|key| first.find(key).expect("a top-level key"))
        .collect();
    assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{order:?}");
}

#[tokio::test]
async fn only_dev_and_test_serve_the_document_unless_enabled() {
    let mut config = AutumnConfig::from_toml_str(
        "[security]\nsecret_key = \"0123456789abcdef0123456789abcdef-secret\"\n",
    )
    .expect("config");
    config.profile = autumn_web::config::Profile::new("prod");
    config.idempotency.allow_memory_in_production = true;
    config.session.allow_memory_in_production = true;
    let hidden = TestApp::new()
        .routes(routes![place_order])
        .idempotent()
        .with_config(config.clone())
        .build();
    hidden.get("/openapi.json").send().await.assert_status(404);
    // Nor under a profile of the app's own: only dev and test serve it
    // unasked.
    let mut staging = config.clone();
    staging.profile = autumn_web::config::Profile::new("staging");
    let staging = TestApp::new()
        .routes(routes![place_order])
        .idempotent()
        .with_config(staging)
        .build();
    staging.get("/openapi.json").send().await.assert_status(404);
    config.openapi.enabled = Some(true);
    config.openapi.path = "/api/openapi.json".to_owned();
    config.openapi.title = "Orders".to_owned();
    let shown = TestApp::new()
        .routes(routes![place_order])
        .idempotent()
        .with_config(config)
        .build();
    let doc: serde_json::Value = shown.get("/api/openapi.json").send().await.json();
    assert_eq!(doc["info"]["title"], "Orders");
}

#[test]
fn a_document_path_that_is_a_route_stops_the_launch_naming_the_key() {
    let config = AutumnConfig::from_toml_str("[openapi]\npath = \"/orders/{id}\"\n");
    let error = config.expect_err("a template is no document path");
    assert!(error.to_string().contains("openapi.path"), "{error}");
    let config = AutumnConfig::from_toml_str("[openapi]\npath = \"/orders/1\"\n").expect("config");
    #[get("/orders/1")]
    async fn first() -> &'static str {
        "first"
    }
    let error = autumn_web::app()
        .routes(routes![first])
        .with_config(config)
        .into_router()
        .expect_err("the path is taken");
    assert!(error.to_string().contains("openapi.path"), "{error}");
}

async fn any_tenant(_: String) -> Result<bool, autumn_web::tenancy::TenantResolveError> {
    Ok(true)
}

#[tokio::test]
async fn api_tokens_get_a_bearer_scheme_and_header_tenancy_its_header() {
    use std::sync::Arc;

    use autumn_web::api_token::{ApiTokens, MemoryApiTokenStore, RequireApiTokenLayer};

    let tokens = ApiTokens::new(Arc::new(MemoryApiTokenStore::new()));
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![place_order, show_order])
            .api_tokens(RequireApiTokenLayer::new(tokens))
            .with_tenant_resolver(any_tenant),
    )
    .with_config(
        AutumnConfig::from_toml_str(
            "[tenancy]\nenabled = true\nstrategy = \"header\"\nheader = \"x-tenant\"\n",
        )
        .expect("config"),
    )
    .idempotent()
    .build();
    // Fetched with neither a token nor a tenant: it is how clients learn
    // they need both.
    let doc = document(&client).await;
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let place = &doc["paths"]["/orders"]["post"];
    assert_eq!(place["security"], serde_json::json!([{ "bearer": [] }]));
    assert!(
        place["responses"]["401"]["x-problem-codes"]
            .as_array()
            .is_some_and(|codes| codes.iter().any(|c| c == "api_token_missing"))
    );
    let tenant = parameter(place, "x-tenant").expect("the tenant header");
    assert_eq!(
        (&tenant["in"], &tenant["required"]),
        (&serde_json::json!("header"), &serde_json::json!(true))
    );
    assert!(
        doc["paths"]["/orders/{id}"]["get"]["responses"]["404"]["x-problem-codes"]
            .as_array()
            .is_some_and(|codes| codes.iter().any(|c| c == "tenant_unknown"))
    );
}

/// Reads an `x-user` header: a stand-in for a JWT check.
struct Users;

impl autumn_web::principal::PrincipalResolver for Users {
    fn resolve<'a>(
        &'a self,
        parts: &'a autumn_web::principal::Parts,
    ) -> autumn_web::principal::PrincipalFuture<'a> {
        let user = parts
            .headers
            .get("x-user")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        Box::pin(async move { Ok(user) })
    }

    fn security_scheme(&self) -> Option<autumn_web::openapi::SecurityScheme> {
        Some(autumn_web::openapi::SecurityScheme::ApiKey {
            location: autumn_web::openapi::ApiKeyLocation::Header,
            name: "x-user".to_owned(),
            description: None,
            extensions: Default::default(),
        })
    }
}

#[tokio::test]
async fn the_principal_resolver_names_its_credential_in_the_document() {
    let client = TestApp::from_builder(
        autumn_web::app()
            .routes(routes![place_order])
            .scope_by(Users),
    )
    .idempotent()
    .build();
    let doc = document(&client).await;
    let scheme = &doc["components"]["securitySchemes"]["principal"];
    assert_eq!(
        (&scheme["type"], &scheme["in"], &scheme["name"]),
        (
            &serde_json::json!("apiKey"),
            &serde_json::json!("header"),
            &serde_json::json!("x-user")
        )
    );
    let place = &doc["paths"]["/orders"]["post"];
    // A request that names nobody passes: the credential is optional.
    assert_eq!(
        place["security"],
        serde_json::json!([{ "principal": [] }, {}])
    );
    assert!(
        place["responses"]["401"]["x-problem-codes"]
            .as_array()
            .is_some_and(|codes| codes.iter().any(|c| c == "principal_unauthorized"))
    );
}
