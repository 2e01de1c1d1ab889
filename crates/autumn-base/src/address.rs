//! [`counted_address`]: the address one client counts as, wherever clients
//! are counted (rate limits, quotas).

use std::net::{IpAddr, Ipv6Addr};

/// What a client address counts as: itself for IPv4, its /64 network for
/// IPv6, since one subscriber is usually given a whole /64 and could
/// otherwise take a fresh count per request.
///
/// ```
/// use std::net::IpAddr;
/// use autumn_base::address::counted_address;
///
/// let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
/// let other: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
/// assert_eq!(counted_address(one), counted_address(other));
/// ```
pub fn counted_address(address: IpAddr) -> IpAddr {
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
        assert_eq!(counted_address(one), counted_address(other));
        assert_ne!(counted_address(one), counted_address(elsewhere));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().expect("an address");
        assert_eq!(
            counted_address(mapped),
            "192.0.2.7".parse::<IpAddr>().expect("an address")
        );
    }
}
