//! Telling HTTP/2 "prior knowledge" (h2c) from HTTP/1 on a plaintext
//! connection, by its first bytes, and refusing it clearly when h2c is off.
//!
//! An HTTP/2 client that starts without TLS sends a fixed 24-byte preface.
//! HTTP/1's parser sees it as a request for version "HTTP/2.0", which hyper
//! answers by closing the connection with no word. The bytes read to decide
//! are handed back to whichever protocol serves the connection
//! ([`Rewind`]).

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use super::rewind::Rewind;

/// What every HTTP/2 connection starts with (RFC 9113, section 3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads until the first bytes either are HTTP/2's preface or cannot be:
/// whether they are, and `io` with those bytes put back. Most HTTP/1
/// requests decide on their first read; a client that sends nothing is cut
/// off by the caller's timeout.
pub(crate) async fn sniff<T: AsyncRead + Unpin>(mut io: T) -> io::Result<(bool, Rewind<T>)> {
    let mut seen = Vec::with_capacity(PREFACE.len());
    let mut buf = [0_u8; 24];
    loop {
        let wanted = PREFACE.len() - seen.len();
        let read = io.read(&mut buf[..wanted]).await?;
        if read == 0 {
            // Closed early: let the HTTP/1 side see the end.
            return Ok((false, Rewind::new(io, seen)));
        }
        seen.extend_from_slice(&buf[..read]);
        if !PREFACE.starts_with(&seen) {
            return Ok((false, Rewind::new(io, seen)));
        }
        if seen.len() == PREFACE.len() {
            return Ok((true, Rewind::new(io, seen)));
        }
    }
}

/// Tells an HTTP/2 client to come back over HTTP/1.1: the server's
/// (empty) SETTINGS, then GOAWAY with `HTTP_1_1_REQUIRED` and a reason it
/// may show. Then the connection is closed.
pub(crate) async fn refuse_h2c<T: AsyncWrite + Unpin>(mut io: T) -> io::Result<()> {
    const SETTINGS: [u8; 9] = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    const HTTP_1_1_REQUIRED: u32 = 0xd;
    let reason: &[u8] = b"HTTP/2 without TLS (h2c) is off on this server: use HTTP/1.1, or HTTPS";
    let mut frame = Vec::with_capacity(9 + 8 + reason.len());
    let length = u32::try_from(8 + reason.len()).unwrap_or(8);
    frame.extend_from_slice(&length.to_be_bytes()[1..]);
    // Type GOAWAY, no flags, stream 0; last stream 0: nothing was served.
    frame.extend_from_slice(&[0x7, 0, 0, 0, 0, 0]);
    frame.extend_from_slice(&0_u32.to_be_bytes());
    frame.extend_from_slice(&HTTP_1_1_REQUIRED.to_be_bytes());
    frame.extend_from_slice(reason);
    io.write_all(&SETTINGS).await?;
    io.write_all(&frame).await?;
    io.flush().await?;
    io.shutdown().await
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt as _;

    use super::*;

    #[tokio::test]
    async fn an_http1_request_is_read_back_whole_after_the_sniff() {
        let request = b"GET /orders HTTP/1.1\r\nhost: x\r\n\r\n";
        let (is_h2, mut io) = sniff(&request[..]).await.expect("read");
        assert!(!is_h2);
        let mut back = Vec::new();
        io.read_to_end(&mut back).await.expect("read back");
        assert_eq!(back, request);
    }

    #[tokio::test]
    async fn the_preface_is_recognised_even_a_byte_at_a_time() {
        let (client, server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            let mut client = client;
            for byte in PREFACE.iter().chain(b"rest") {
                client.write_all(&[*byte]).await.expect("write");
            }
            client
        });
        let (is_h2, mut io) = sniff(server).await.expect("read");
        assert!(is_h2);
        let _client = writer.await.expect("writer");
        let mut back = [0_u8; 28];
        io.read_exact(&mut back).await.expect("read back");
        assert_eq!(&back[..24], PREFACE);
        assert_eq!(&back[24..], b"rest");
    }

    #[tokio::test]
    async fn a_request_that_starts_like_the_preface_is_still_http1() {
        let request = b"PRIVATE /x HTTP/1.1\r\n\r\n";
        let (is_h2, mut io) = sniff(&request[..]).await.expect("read");
        assert!(!is_h2);
        let mut back = Vec::new();
        io.read_to_end(&mut back).await.expect("read back");
        assert_eq!(back, request);
    }
}
