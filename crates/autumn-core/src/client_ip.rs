//! [`ClientIp`]: the address of the client a request came from.

use std::convert::Infallible;
use std::net::IpAddr;

use axum::extract::FromRequestParts;
use http::request::Parts;

use crate::app::server::context::client_of;

/// The client's IP address: the connection's peer, or, when the peer is one
/// of `[server] trusted_proxies`, the client those proxies name in
/// `Forwarded` or `X-Forwarded-For` (the rightmost address that is not
/// itself a trusted proxy). A client cannot choose it by sending those
/// headers itself. With `[server] proxy_protocol`, the client a trusted
/// proxy's PROXY header names stands for the peer.
///
/// Outside a server connection (in `TestApp`) it is `127.0.0.1`. The access
/// log names the same address (`client_ip=`).
///
/// ```
/// use autumn_core::client_ip::ClientIp;
///
/// async fn whoami(ClientIp(address): ClientIp) -> String {
///     address.to_string()
/// }
/// # let _ = axum::Router::<()>::new().route("/whoami", axum::routing::get(whoami));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientIp(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for ClientIp {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(client_of(&parts.headers)))
    }
}
