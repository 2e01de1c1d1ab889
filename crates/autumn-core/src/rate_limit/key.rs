//! Who counts as one client under a rule, and the bucket a request counts
//! in. Bucket names carry a digest of the client, never the client itself:
//! a session id in a Redis key would be a usable session cookie.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use axum::extract::Request;
use http::request::Parts;
use sha2::{Digest, Sha256};

use crate::api_token::ApiPrincipal;
use crate::app::server::context;
use crate::config::RateLimitBy;
use crate::principal::Principal;
use crate::session::Session;
use crate::tenancy::Tenant;

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
    pub(crate) async fn bucket(&self, rule: &str, request: &mut Request) -> String {
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
            Self::Principal => principal(request).map(|id| ("p", id)),
            Self::App(function) => {
                let (parts, body) = std::mem::take(request).into_parts();
                let key = function(&parts);
                *request = Request::from_parts(parts, body);
                key.map(|key| ("k", key))
            }
        };
        let (kind, client) = client.unwrap_or_else(|| ("a", counted_address(request).to_string()));
        let digest = Sha256::digest(client.as_bytes());
        format!("{rule}:{kind}:{}", hex::encode(&digest[..16]))
    }
}

/// The principal the app's `scope_by` resolver or `RequireApiToken` named.
fn principal(request: &Request) -> Option<String> {
    let extensions = request.extensions();
    extensions
        .get::<Principal>()
        .map(|principal| principal.id().to_owned())
        .or_else(|| {
            extensions
                .get::<ApiPrincipal>()
                .map(|principal| principal.id().to_owned())
        })
}

/// The address a request counts as under `by = "client_ip"`: `ClientIp`'s,
/// an IPv6 one cut to its /64.
pub(crate) fn counted_address(request: &Request) -> IpAddr {
    address_key(client_ip(request))
}

/// The client's address, as `ClientIp` reads it.
fn client_ip(request: &Request) -> IpAddr {
    context::current().map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |connection| {
        connection.client(request.headers())
    })
}

/// What an address counts as: itself for IPv4, its /64 network for IPv6,
/// since one subscriber is usually given a whole /64 and could otherwise
/// take a fresh count per request.
fn address_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let network = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(network))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_count_by_their_network_and_mapped_ipv4_by_its_address() {
        let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("an address");
        let other: IpAddr = "2001:db8:1:2:bbbb::9".parse().expect("an address");
        let elsewhere: IpAddr = "2001:db8:1:3::1".parse().expect("an address");
        assert_eq!(address_key(one), address_key(other));
        assert_ne!(address_key(one), address_key(elsewhere));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().expect("an address");
        assert_eq!(
            address_key(mapped),
            "192.0.2.7".parse::<IpAddr>().expect("an address")
        );
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
        let bucket = key.bucket("login", &mut request).await;
        assert!(bucket.starts_with("login:k:"), "{bucket}");
        assert!(!bucket.contains("alice"), "{bucket}");
        // The request is handed back whole.
        assert_eq!(request.headers()["x-account"], "alice@example.com");
        // Without the header: the address.
        let mut anonymous = Request::new(axum::body::Body::empty());
        assert!(
            key.bucket("login", &mut anonymous)
                .await
                .starts_with("login:a:")
        );
        assert_eq!(
            ClientKey::Global.bucket("login", &mut anonymous).await,
            "login:all"
        );
    }
}
