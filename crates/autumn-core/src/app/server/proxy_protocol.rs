//! The PROXY protocol, versions 1 (text) and 2 (binary): a load balancer
//! that passes TCP through, TLS included, cannot add `X-Forwarded-For`, so
//! it opens each connection with a header naming the client it came from
//! (HAProxy's specification, `proxy-protocol.txt`).
//!
//! Read with `[server] proxy_protocol = true`, and only from a peer in
//! `trusted_proxies`: anyone else could name any client. From such a peer
//! the header is taken when the connection starts with one and the
//! connection is served as it is when it does not, so that health checks a
//! balancer (or a kubelet on its network) sends without a header still get
//! answers. A header that starts right but does not parse closes the
//! connection. From any other peer nothing is read here: a header is the
//! start of its request, which HTTP/1 answers with 400 and TLS refuses as a
//! handshake.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tokio::io::{AsyncRead, AsyncReadExt as _};

use super::rewind::Rewind;

/// How a version 1 header starts.
const V1_START: &[u8] = b"PROXY ";
/// The longest version 1 header, its CRLF included.
const V1_LONGEST: usize = 107;
/// How a version 2 header starts.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// A version 2 header's fixed part: the signature, version and command,
/// family and transport, and the length of what follows.
const V2_FIXED: usize = 16;

/// What a connection's PROXY header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Header {
    /// The connection carries this client's.
    Client(IpAddr),
    /// The balancer's own connection (version 2 `LOCAL`, version 1
    /// `UNKNOWN`, or a client that is not on IP): its peer is the client.
    Local,
}

/// Why a connection that began with a PROXY header was closed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyHeaderError {
    /// The peer closed the connection before the header's end.
    #[error("the connection closed inside its PROXY header")]
    Closed,
    /// Reading failed.
    #[error("reading the PROXY header failed: {0}")]
    Io(#[from] io::Error),
    /// A version 1 header with no CRLF where one must be.
    #[error("a PROXY v1 header must end with CRLF within {V1_LONGEST} bytes")]
    V1TooLong,
    /// A version 1 header whose line does not parse.
    #[error(
        "a PROXY v1 header must read `PROXY TCP4|TCP6 <source> <destination> <source port> <destination port>` or `PROXY UNKNOWN`: {0}"
    )]
    V1Malformed(&'static str),
    /// A version 2 header of another version.
    #[error("a PROXY v2 header must say version 2, not {0}")]
    V2Version(u8),
    /// A version 2 command other than `LOCAL` (0) or `PROXY` (1).
    #[error("a PROXY v2 command must be LOCAL (0) or PROXY (1), not {0}")]
    V2Command(u8),
    /// A version 2 address family or transport the specification does not
    /// define.
    #[error("a PROXY v2 address family and transport byte of {0:#04x} is not defined")]
    V2Family(u8),
    /// A version 2 header too short for the addresses its family has.
    #[error("a PROXY v2 header of {len} address bytes cannot hold its family's {needed}")]
    V2Short {
        /// The length the header gives.
        len: usize,
        /// What its family needs.
        needed: usize,
    },
}

/// Reads `io`'s PROXY header, if it starts with one: what the header says
/// (`None` without one), and `io` with every byte read past it put back.
///
/// # Errors
///
/// When the connection starts as a header does but no header can be read:
/// it must be closed.
pub(crate) async fn read<T: AsyncRead + Unpin>(
    mut io: T,
) -> Result<(Option<Header>, Rewind<T>), ProxyHeaderError> {
    let mut seen = Vec::with_capacity(256);
    let mut chunk = [0_u8; 256];
    loop {
        let read = io.read(&mut chunk).await?;
        if read == 0 {
            // Closed before a header could start: whoever serves the
            // connection sees the end.
            return Ok((None, Rewind::new(io, seen)));
        }
        seen.extend_from_slice(&chunk[..read]);
        if !could_start(&seen, V1_START) && !could_start(&seen, V2_SIGNATURE) {
            return Ok((None, Rewind::new(io, seen)));
        }
        if seen.starts_with(V1_START) || seen.starts_with(V2_SIGNATURE) {
            break;
        }
    }
    let (header, length) = if seen.starts_with(V1_START) {
        let end = loop {
            if let Some(at) = seen.windows(2).position(|pair| pair == b"\r\n") {
                break at;
            }
            if seen.len() >= V1_LONGEST {
                return Err(ProxyHeaderError::V1TooLong);
            }
            more(&mut io, &mut seen, &mut chunk).await?;
        };
        if end + 2 > V1_LONGEST {
            return Err(ProxyHeaderError::V1TooLong);
        }
        (parse_v1(&seen[..end])?, end + 2)
    } else {
        while seen.len() < V2_FIXED {
            more(&mut io, &mut seen, &mut chunk).await?;
        }
        let length = V2_FIXED + usize::from(u16::from_be_bytes([seen[14], seen[15]]));
        while seen.len() < length {
            more(&mut io, &mut seen, &mut chunk).await?;
        }
        (parse_v2(&seen[..length])?, length)
    };
    let rest = seen.split_off(length);
    Ok((Some(header), Rewind::new(io, rest)))
}

/// Whether `seen` is how `start` begins, or begins with it.
fn could_start(seen: &[u8], start: &[u8]) -> bool {
    let common = seen.len().min(start.len());
    seen[..common] == start[..common]
}

/// Reads more of a header that has begun; its end is an error.
async fn more<T: AsyncRead + Unpin>(
    io: &mut T,
    seen: &mut Vec<u8>,
    chunk: &mut [u8],
) -> Result<(), ProxyHeaderError> {
    match io.read(chunk).await? {
        0 => Err(ProxyHeaderError::Closed),
        read => {
            seen.extend_from_slice(&chunk[..read]);
            Ok(())
        }
    }
}

/// A version 1 line, without its CRLF.
fn parse_v1(line: &[u8]) -> Result<Header, ProxyHeaderError> {
    use ProxyHeaderError::V1Malformed;
    let line = std::str::from_utf8(line).map_err(|_| V1Malformed("it is not ASCII text"))?;
    let mut fields = line.split(' ');
    // "PROXY", already seen.
    fields.next();
    let family = fields.next().ok_or(V1Malformed("no protocol"))?;
    if family == "UNKNOWN" {
        // What follows is to be ignored.
        return Ok(Header::Local);
    }
    let parse_ip = |text: Option<&str>| -> Result<IpAddr, ProxyHeaderError> {
        let text = text.ok_or(V1Malformed("too few fields"))?;
        match family {
            "TCP4" => text
                .parse::<Ipv4Addr>()
                .map(IpAddr::V4)
                .map_err(|_| V1Malformed("an address is not an IPv4 address")),
            "TCP6" => text
                .parse::<Ipv6Addr>()
                .map(IpAddr::V6)
                .map_err(|_| V1Malformed("an address is not an IPv6 address")),
            _ => Err(V1Malformed("the protocol is not TCP4, TCP6 or UNKNOWN")),
        }
    };
    let source = parse_ip(fields.next())?;
    parse_ip(fields.next())?;
    for _ in 0..2 {
        let port = fields.next().ok_or(V1Malformed("too few fields"))?;
        let valid = !port.is_empty()
            && port.bytes().all(|byte| byte.is_ascii_digit())
            && (port == "0" || !port.starts_with('0'))
            && port.parse::<u16>().is_ok();
        if !valid {
            return Err(V1Malformed("a port is not a number from 0 to 65535"));
        }
    }
    if fields.next().is_some() {
        return Err(V1Malformed("too many fields"));
    }
    Ok(Header::Client(source))
}

/// A whole version 2 header, its signature checked.
fn parse_v2(header: &[u8]) -> Result<Header, ProxyHeaderError> {
    let (version, command) = (header[12] >> 4, header[12] & 0x0f);
    if version != 2 {
        return Err(ProxyHeaderError::V2Version(version));
    }
    let (family, transport) = (header[13] >> 4, header[13] & 0x0f);
    if family > 3 || transport > 2 {
        return Err(ProxyHeaderError::V2Family(header[13]));
    }
    let addresses = &header[V2_FIXED..];
    let needed = match family {
        1 => 12,
        2 => 36,
        3 => 216,
        _ => 0,
    };
    if addresses.len() < needed {
        return Err(ProxyHeaderError::V2Short {
            len: addresses.len(),
            needed,
        });
    }
    match command {
        // The balancer's own connection (a health check): its addresses,
        // if any, are to be ignored.
        0 => Ok(Header::Local),
        1 => Ok(match family {
            1 => Header::Client(IpAddr::V4(Ipv4Addr::new(
                addresses[0],
                addresses[1],
                addresses[2],
                addresses[3],
            ))),
            2 => {
                let mut octets = [0_u8; 16];
                octets.copy_from_slice(&addresses[..16]);
                Header::Client(IpAddr::V6(Ipv6Addr::from(octets)))
            }
            // UNSPEC or a Unix socket: no IP address to name.
            _ => Header::Local,
        }),
        other => Err(ProxyHeaderError::V2Command(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `bytes` read as, and what is read back after the header.
    async fn read_all(bytes: &[u8]) -> Result<(Option<Header>, Vec<u8>), ProxyHeaderError> {
        let (header, mut rest) = read(bytes).await?;
        let mut back = Vec::new();
        rest.read_to_end(&mut back).await?;
        Ok((header, back))
    }

    fn v2(command: u8, family: u8, addresses: &[u8]) -> Vec<u8> {
        let mut header = V2_SIGNATURE.to_vec();
        header.push(0x20 | command);
        header.push(family);
        let len = u16::try_from(addresses.len()).expect("short");
        header.extend_from_slice(&len.to_be_bytes());
        header.extend_from_slice(addresses);
        header
    }

    fn client(text: &str) -> Option<Header> {
        Some(Header::Client(text.parse().expect("an address")))
    }

    #[tokio::test]
    async fn a_v1_header_names_the_client_and_what_follows_is_read_back() {
        let request = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";
        for (line, named) in [
            (
                &b"PROXY TCP4 203.0.113.7 192.0.2.1 51000 443\r\n"[..],
                client("203.0.113.7"),
            ),
            (
                b"PROXY TCP6 2001:db8::7 2001:db8::1 0 65535\r\n",
                client("2001:db8::7"),
            ),
            (b"PROXY UNKNOWN\r\n", Some(Header::Local)),
            (
                b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n",
                Some(Header::Local),
            ),
        ] {
            let sent = [line, &request[..]].concat();
            let (header, back) = read_all(&sent).await.expect("a header");
            assert_eq!(header, named, "{}", String::from_utf8_lossy(line));
            assert_eq!(back, request);
        }
    }

    #[tokio::test]
    async fn a_v2_header_names_the_client_and_its_tlvs_are_skipped() {
        let mut v4 = vec![203, 0, 113, 7, 192, 0, 2, 1, 0xc7, 0x38, 0x01, 0xbb];
        // A TLV (an AWS endpoint id, say): skipped with the header.
        v4.extend_from_slice(&[0xea, 0, 3, 1, 2, 3]);
        let mut v6 = "2001:db8::7"
            .parse::<Ipv6Addr>()
            .expect("v6")
            .octets()
            .to_vec();
        v6.extend_from_slice(&[0; 20]);
        let tls = [0x16_u8, 0x03, 0x01];
        for (header, named) in [
            (v2(1, 0x11, &v4), client("203.0.113.7")),
            (v2(1, 0x21, &v6), client("2001:db8::7")),
            (v2(0, 0x00, &[]), Some(Header::Local)),
            (v2(0, 0x11, &v4), Some(Header::Local)),
            (v2(1, 0x31, &[0; 216]), Some(Header::Local)),
        ] {
            let sent = [&header[..], &tls[..]].concat();
            let (read_header, back) = read_all(&sent).await.expect("a header");
            assert_eq!(read_header, named);
            assert_eq!(back, tls);
        }
    }

    #[tokio::test]
    async fn a_connection_without_a_header_is_read_back_whole() {
        for sent in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"PROXIES / HTTP/1.1\r\n\r\n",
            b"\r\n\r\nGET / HTTP/1.1\r\n\r\n",
            b"\x16\x03\x01\x00\x05hello",
            b"PROX",
            b"",
        ] {
            let (header, back) = read_all(sent).await.expect("no header");
            assert_eq!(header, None);
            assert_eq!(back, sent);
        }
    }

    #[tokio::test]
    async fn a_header_read_a_byte_at_a_time_is_whole() {
        let (client_end, server_end) = tokio::io::duplex(64);
        let sent = [
            &v2(1, 0x11, &[10, 0, 0, 9, 10, 0, 0, 1, 0, 80, 0, 80])[..],
            b"GET",
        ]
        .concat();
        let writer = tokio::spawn(async move {
            let mut client_end = client_end;
            for byte in sent {
                tokio::io::AsyncWriteExt::write_all(&mut client_end, &[byte])
                    .await
                    .expect("write");
            }
            client_end
        });
        let (header, mut rest) = read(server_end).await.expect("a header");
        let _client = writer.await.expect("writer");
        assert_eq!(header, client("10.0.0.9"));
        let mut back = [0_u8; 3];
        rest.read_exact(&mut back).await.expect("read back");
        assert_eq!(&back, b"GET");
    }

    #[tokio::test]
    async fn a_malformed_header_is_an_error_that_says_what_is_wrong() {
        let long = format!("PROXY TCP4 {}\r\n", "1".repeat(120));
        for (sent, says) in [
            (&b"PROXY TCP4 203.0.113.7\r\n"[..], "too few fields"),
            (b"PROXY TCP4 nope 192.0.2.1 1 2\r\n", "not an IPv4 address"),
            (
                b"PROXY TCP6 203.0.113.7 192.0.2.1 1 2\r\n",
                "not an IPv6 address",
            ),
            (
                b"PROXY UDP4 203.0.113.7 192.0.2.1 1 2\r\n",
                "not TCP4, TCP6",
            ),
            (b"PROXY TCP4 203.0.113.7 192.0.2.1 1 65536\r\n", "a port"),
            (b"PROXY TCP4 203.0.113.7 192.0.2.1 01 2\r\n", "a port"),
            (
                b"PROXY TCP4 203.0.113.7 192.0.2.1 1 2 3\r\n",
                "too many fields",
            ),
            (b"PROXY TCP4  203.0.113.7 192.0.2.1 1 2\r\n", "not an IPv4"),
            (b"PROXY TCP4 \xff 192.0.2.1 1 2\r\n", "not ASCII"),
            (long.as_bytes(), "within 107 bytes"),
            (b"PROXY TCP4 203.0.113.7", "closed inside"),
            (&v2(2, 0x11, &[0; 12]), "LOCAL (0) or PROXY (1), not 2"),
            (&v2(1, 0x41, &[0; 12]), "0x41 is not defined"),
            (&v2(1, 0x13, &[0; 12]), "0x13 is not defined"),
            (
                &v2(1, 0x11, &[0; 4]),
                "4 address bytes cannot hold its family's 12",
            ),
            (&v2(1, 0x21, &[0; 12]), "cannot hold its family's 36"),
            (&v2(1, 0x11, &[0; 12])[..15], "closed inside"),
        ] {
            let error = read_all(sent)
                .await
                .expect_err(&String::from_utf8_lossy(sent));
            assert!(error.to_string().contains(says), "{error} / {says}");
        }
        // Another version.
        let mut v1_of_v2 = v2(1, 0x11, &[0; 12]);
        v1_of_v2[12] = 0x11;
        let error = read_all(&v1_of_v2).await.expect_err("version 1 in v2 form");
        assert!(error.to_string().contains("version 2, not 1"), "{error}");
    }
}
