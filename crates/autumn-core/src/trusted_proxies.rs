//! `[server] trusted_proxies`: the networks whose connections carry other
//! clients, and how a request's client address is read through them. (With
//! `[server] proxy_protocol`, the address a trusted proxy's PROXY header
//! names stands for the peer's here.)
//!
//! A connection from anywhere else is its own client: whatever it says in
//! `Forwarded` or `X-Forwarded-For` is ignored, since any client can send
//! those. From a trusted proxy, the client is the last address in those
//! headers that is not itself a trusted proxy (the headers are appended to
//! hop by hop, so the rightmost untrusted entry is the one a trusted proxy
//! saw connect).

use std::net::IpAddr;

use http::HeaderMap;

/// An address or a network (`10.0.0.0/8`, `fd00::/8`, `192.0.2.7`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Network {
    base: IpAddr,
    prefix: u8,
}

impl Network {
    /// Parses `text`; `None` when it is neither an address nor a network.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix.parse::<u8>().ok()?)),
            None => (text.trim(), None),
        };
        let base: IpAddr = address.parse().ok()?;
        let bits = if base.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(bits);
        (prefix <= bits).then_some(Self { base, prefix })
    }

    /// Whether it is every address of its family (`0.0.0.0/0`, `::/0`):
    /// trusting it lets any client name its own address.
    pub(crate) fn is_everything(&self) -> bool {
        self.prefix == 0
    }

    /// Whether `address` is in it (an IPv4-mapped IPv6 address counts as
    /// its IPv4 address).
    pub(crate) fn contains(&self, address: IpAddr) -> bool {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            v4 @ IpAddr::V4(_) => v4,
        };
        match (self.base, address) {
            (IpAddr::V4(base), IpAddr::V4(address)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(base) & mask == u32::from(address) & mask
            }
            (IpAddr::V6(base), IpAddr::V6(address)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(base) & mask == u128::from(address) & mask
            }
            _ => false,
        }
    }
}

/// Whether `address` is in one of the `trusted` networks.
pub(crate) fn is_trusted(address: IpAddr, trusted: &[Network]) -> bool {
    trusted.iter().any(|net| net.contains(address))
}

/// The client of a request that arrived from `peer`: `peer` itself unless
/// it is a trusted proxy, else the rightmost untrusted address of
/// `Forwarded` (preferred) or `X-Forwarded-For`.
pub(crate) fn client_of(peer: IpAddr, headers: &HeaderMap, trusted: &[Network]) -> IpAddr {
    let is_trusted = |address: IpAddr| is_trusted(address, trusted);
    if !is_trusted(peer) {
        return peer;
    }
    let hops = forwarded_for(headers);
    let hops = if hops.is_empty() {
        x_forwarded_for(headers)
    } else {
        hops
    };
    // From the right: each trusted hop vouches for the one before it.
    let mut client = peer;
    for hop in hops.into_iter().rev() {
        client = hop;
        if !is_trusted(hop) {
            break;
        }
    }
    client
}

/// The `for=` addresses of every `Forwarded` header, in order (RFC 7239).
fn forwarded_for(headers: &HeaderMap) -> Vec<IpAddr> {
    headers
        .get_all(http::header::FORWARDED)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|element| {
            element.split(';').find_map(|pair| {
                let (name, value) = pair.trim().split_once('=')?;
                name.eq_ignore_ascii_case("for")
                    .then(|| node_address(value))?
            })
        })
        .collect()
}

/// The addresses of every `X-Forwarded-For` header, in order.
fn x_forwarded_for(headers: &HeaderMap) -> Vec<IpAddr> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|entry| node_address(entry.trim()))
        .collect()
}

/// A node's address: `192.0.2.7`, `"[2001:db8::1]:4711"`, `192.0.2.7:80`;
/// `None` for `unknown` or an obfuscated name.
fn node_address(value: &str) -> Option<IpAddr> {
    let value = value.trim().trim_matches('"');
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    value
        .parse()
        .ok()
        .or_else(|| value.rsplit_once(':')?.0.parse().ok())
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    fn nets(list: &[&str]) -> Vec<Network> {
        list.iter()
            .map(|net| Network::parse(net).expect("a network"))
            .collect()
    }

    #[test]
    fn networks_contain_what_they_should() {
        let net = Network::parse("10.1.0.0/16").expect("net");
        assert!(net.contains(ip("10.1.200.3")));
        assert!(!net.contains(ip("10.2.0.1")));
        assert!(net.contains(ip("::ffff:10.1.0.9")), "IPv4-mapped");
        assert!(
            Network::parse("fd00::/8")
                .expect("v6")
                .contains(ip("fd12::1"))
        );
        assert!(
            Network::parse("0.0.0.0/0")
                .expect("all")
                .contains(ip("8.8.8.8"))
        );
        assert!(Network::parse("0.0.0.0/0").expect("all").is_everything());
        assert!(Network::parse("::/0").expect("all v6").is_everything());
        assert!(!Network::parse("0.0.0.0/1").expect("half").is_everything());
        assert!(!Network::parse("10.0.0.1").expect("one").is_everything());
        assert_eq!(Network::parse("10.0.0.0/33"), None);
        assert_eq!(Network::parse("proxy.internal"), None);
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4"));
        assert_eq!(
            client_of(ip("203.0.113.9"), &headers, &nets(&["10.0.0.0/8"])),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn through_trusted_proxies_the_rightmost_untrusted_hop_is_the_client() {
        let trusted = nets(&["10.0.0.0/8"]);
        let mut headers = HeaderMap::new();
        // A client-forged first entry, the real client, then a second proxy.
        headers.insert(
            "x-forwarded-for",
            HeaderValue::from_static("6.6.6.6, 198.51.100.7, 10.0.0.2"),
        );
        assert_eq!(
            client_of(ip("10.0.0.1"), &headers, &trusted),
            ip("198.51.100.7")
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::FORWARDED,
            HeaderValue::from_static("for=6.6.6.6, for=\"[2001:db8::7]:4711\";proto=https"),
        );
        assert_eq!(
            client_of(ip("10.0.0.1"), &headers, &trusted),
            ip("2001:db8::7")
        );
        // No header: the proxy itself.
        assert_eq!(
            client_of(ip("10.0.0.1"), &HeaderMap::new(), &trusted),
            ip("10.0.0.1")
        );
    }
}
