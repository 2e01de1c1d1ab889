use autumn_web::prelude::*;

#[post(
    "/payments",
    idempotency = "required",
    idempotency_ttl = "48h",
    idempotency_in_flight_ttl = "30s",
    in_flight_wait_ms = 2000,
    idempotency_ignore = ["/client_ts", "/meta/trace_id"],
    record_errors = "server",
    anonymous_keys = "refuse",
)]
async fn pay() -> &'static str {
    "paid"
}

#[put(
    "/orders/{id}",
    idempotency = "optional",
    idempotency_only = ["/qty"],
    anonymous_keys = "allow"
)]
async fn replace_order() -> &'static str {
    "replaced"
}

#[post("/webhooks", idempotency = "off")]
async fn webhook() -> &'static str {
    "ok"
}

fn main() {
    let routes = routes![pay, replace_order, webhook];
    let pay = &routes[0];
    assert_eq!(
        pay.policy.ttl,
        Some(std::time::Duration::from_secs(48 * 3600))
    );
    assert_eq!(
        pay.policy.in_flight_wait,
        Some(std::time::Duration::from_millis(2000))
    );
    assert_eq!(
        pay.policy.record_errors,
        Some(autumn_web::idempotency::RecordErrors::Server)
    );
    assert_eq!(routes[1].policy.record_errors, None);
    assert_eq!(
        pay.policy.anonymous_keys,
        Some(autumn_web::idempotency::AnonymousKeys::Refuse)
    );
    assert_eq!(
        routes[1].policy.anonymous_keys,
        Some(autumn_web::idempotency::AnonymousKeys::Allow)
    );
    assert_eq!(routes[2].policy.anonymous_keys, None);
    assert_eq!(routes[2].idempotency, autumn_web::RouteIdempotency::Off);
}
