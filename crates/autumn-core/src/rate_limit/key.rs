//! Who counts as one client under a rule, and the bucket a request counts
//! in. Bucket names carry a digest of the client, never the client itself:
//! a session id in a Redis key would be a usable session cookie.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::Request;
use http::request::Parts;
use sha2::{Digest, Sha256};

use crate::config::RateLimitBy;
use crate::scope::NamedPrincipal;
use crate::session::Session;
use crate::tenancy::Tenant;
pub(crate) use autumn_base::address::counted_address;

/// How the app finds a request's client address from its headers on the
/// connection the current task serves (`ClientIp`'s way), given at launch.
pub(crate) type ClientOf = fn(&http::HeaderMap) -> IpAddr;

/// A function the app registered with `AppBuilder::rate_limit_key`: the
/// client a request counts as, or `None` for "count it by address".
pub type RateLimitKeyFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// How a rule finds the client of a request.
#[derive(Clone)]
pub(crate) enum ClientKey {
    ClientIp,
    Session,
    Tenant,
    Principal,
    Global,
    App(RateLimitKeyFn),
}

impl ClientKey {
    /// `by` of the configuration, with the app's functions for `key:NAME`;
    /// `Err` names a function the app did not register.
    pub(crate) fn new(
        by: &RateLimitBy,
        functions: &HashMap<String, RateLimitKeyFn>,
    ) -> Result<Self, String> {
        Ok(match by {
            RateLimitBy::Session => Self::Session,
            RateLimitBy::Tenant => Self::Tenant,
            RateLimitBy::Principal => Self::Principal,
            RateLimitBy::Global => Self::Global,
            RateLimitBy::Key(name) => match functions.get(name) {
                Some(function) => Self::App(Arc::clone(function)),
                None => {
                    return Err(format!(
                        "`key:{name}` names no function: register one with AppBuilder::rate_limit_key(\"{name}\", ..)"
                    ));
                }
            },
            // `RateLimitBy` is non-exhaustive: anything newer counts by address.
            _ => Self::ClientIp,
        })
    }

    /// The bucket `request` counts in under the rule `rule`: the rule's
    /// name, what kind of client, and a digest of which one.
    pub(crate) async fn bucket(
        &self,
        rule: &str,
        request: &mut Request,
        client_of: ClientOf,
    ) -> String {
        let client = match self {
            Self::Global => return format!("{rule}:all"),
            Self::ClientIp => None,
            Self::Session => match request.extensions().get::<Session>() {
                // Only a session the store knows: a made-up cookie would
                // otherwise be a fresh count per request.
                Some(session) => session
                    .id()
                    .await
                    .ok()
                    .flatten()
                    .map(|id| ("s", id.as_str().to_owned())),
                None => None,
            },
            Self::Tenant => request
                .extensions()
                .get::<Tenant>()
                .map(|tenant| ("t", tenant.id().to_owned())),
            Self::Principal => request
                .extensions()
                .get::<NamedPrincipal>()
                .map(|principal| ("p", principal.0.to_string())),
            Self::App(function) => {
                let (parts, body) = std::mem::take(request).into_parts();
                let key = function(&parts);
                *request = Request::from_parts(parts, body);
                key.map(|key| ("k", key))
            }
        };
        let (kind, client) = client.unwrap_or_else(|| {
            (
                "a",
                counted_address(client_of(request.headers())).to_string(),
            )
        });
        let digest = Sha256::digest(client.as_bytes());
        format!("{rule}:{kind}:{}", hex::encode(&digest[..16]))
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn localhost(_: &http::HeaderMap) -> IpAddr {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    }

    #[tokio::test]
    async fn a_bucket_names_the_rule_and_a_digest_never_the_client() {
        let function: RateLimitKeyFn = Arc::new(|parts: &Parts| {
            parts
                .headers
                .get("x-account")
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        });
        let key = ClientKey::App(function);
        let mut request = Request::builder()
            .header("x-account", "alice@example.com")
            .body(axum::body::Body::empty())
            .expect("a request");
        let bucket = key.bucket("login", &mut request, localhost).await;
        assert!(bucket.starts_with("login:k:"), "{bucket}");
        assert!(!bucket.contains("alice"), "{bucket}");
        // The request is handed back whole.
        assert_eq!(request.headers()["x-account"], "alice@example.com");
        // Without the header: the address.
        let mut anonymous = Request::new(axum::body::Body::empty());
        assert!(
            key.bucket("login", &mut anonymous, localhost)
                .await
                .starts_with("login:a:")
        );
        assert_eq!(
            ClientKey::Global
                .bucket("login", &mut anonymous, localhost)
                .await,
            "login:all"
        );
    }
}
