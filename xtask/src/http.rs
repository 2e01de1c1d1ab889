//! Just enough HTTP/1.1 for the soak and the bench: one keep-alive connection to a
//! loopback server, requests written and responses read separately (so that
//! two connections can have requests in flight at once), bodies framed by
//! `Content-Length` or chunked.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long one response may take to arrive; far above anything the
/// examples do, so that only a hung server trips it.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest response body read; the final order and user lists are the
/// only big ones.
const MAX_BODY: usize = 256 * 1024 * 1024;

/// A response, header names lowercased.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
    /// From writing the request to reading the whole response (on a
    /// connection with another read before this one, the wait for that
    /// read counts too).
    pub(crate) elapsed: Duration,
}

impl Response {
    /// The first value of header `name` (lowercase).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The `code` of a problem+json body, if the body has one.
    pub(crate) fn code(&self) -> Option<&str> {
        json_string(&self.body, "code")
    }
}

/// The string value of the first `"field":"..."` in `json` (no escapes
/// inside the value: enough for codes, ids and the soak's own keys).
pub(crate) fn json_string<'a>(json: &'a str, field: &str) -> Option<&'a str> {
    let marker = format!("\"{field}\":\"");
    let start = json.find(&marker)? + marker.len();
    let len = json[start..].find('"')?;
    Some(&json[start..start + len])
}

/// One client connection, opened again after the server closes it.
pub(crate) struct Connection {
    addr: SocketAddr,
    stream: Option<BufReader<TcpStream>>,
    /// Header lines sent with every request, each after `\r\n`.
    extra_headers: String,
    /// When the request whose response is read next was written.
    written_at: Option<Instant>,
}

impl Connection {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            stream: None,
            extra_headers: String::new(),
            written_at: None,
        }
    }

    /// The same connection, sending `name: value` with every request.
    pub(crate) fn with_header(mut self, name: &str, value: &str) -> Self {
        self.extra_headers.push_str(&format!("\r\n{name}: {value}"));
        self
    }

    /// Writes one request; `head` is everything before the blank line
    /// except `Host`, `Content-Length` and the connection's own headers,
    /// which are added here.
    pub(crate) fn write(&mut self, head: &str, body: &[u8]) -> Result<(), String> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.addr)
                .map_err(|e| format!("connect to {}: {e}", self.addr))?;
            stream
                .set_read_timeout(Some(READ_TIMEOUT))
                .map_err(|e| format!("set_read_timeout: {e}"))?;
            stream
                .set_nodelay(true)
                .map_err(|e| format!("set_nodelay: {e}"))?;
            self.stream = Some(BufReader::new(stream));
        }
        let mut request = format!(
            "{head}{}\r\nhost: {}\r\ncontent-length: {}\r\n\r\n",
            self.extra_headers,
            self.addr,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        self.written_at = Some(Instant::now());
        let written = match &mut self.stream {
            Some(stream) => stream.get_mut().write_all(&request),
            None => return Err("no connection".to_owned()),
        };
        written.map_err(|e| {
            self.stream = None;
            format!("write to {}: {e}", self.addr)
        })
    }

    /// Reads the response to the oldest request written.
    pub(crate) fn read(&mut self) -> Result<Response, String> {
        let Some(stream) = &mut self.stream else {
            return Err("read without a request".to_owned());
        };
        match read_response(stream) {
            Ok((mut response, keep_alive)) => {
                if !keep_alive {
                    self.stream = None;
                }
                response.elapsed = self
                    .written_at
                    .take()
                    .map_or(Duration::ZERO, |at| at.elapsed());
                Ok(response)
            }
            Err(why) => {
                self.stream = None;
                Err(format!("read from {}: {why}", self.addr))
            }
        }
    }

    /// [`write`](Self::write) then [`read`](Self::read).
    pub(crate) fn send(&mut self, head: &str, body: &[u8]) -> Result<Response, String> {
        self.write(head, body)?;
        self.read()
    }
}

fn read_line(stream: &mut BufReader<TcpStream>) -> Result<String, String> {
    let mut line = String::new();
    let read = stream.read_line(&mut line).map_err(|e| format!("{e}"))?;
    if read == 0 {
        return Err("connection closed".to_owned());
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// One response, and whether the connection stays open.
fn read_response(stream: &mut BufReader<TcpStream>) -> Result<(Response, bool), String> {
    let status_line = read_line(stream)?;
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    loop {
        let line = read_line(stream)?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header line {line:?}"))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    let keep_alive = !find("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    let chunked = find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let length = match find("content-length") {
        Some(value) => Some(
            value
                .parse::<usize>()
                .map_err(|_| format!("bad content-length {value:?}"))?,
        ),
        None => None,
    };
    let mut body = Vec::new();
    if chunked {
        loop {
            let size_line = read_line(stream)?;
            let size_hex = size_line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_hex, 16)
                .map_err(|_| format!("bad chunk size {size_line:?}"))?;
            if size == 0 {
                // Trailers, up to the blank line.
                while !read_line(stream)?.is_empty() {}
                break;
            }
            if body.len() + size > MAX_BODY {
                return Err("response body too large".to_owned());
            }
            let start = body.len();
            body.resize(start + size, 0);
            stream
                .read_exact(&mut body[start..])
                .map_err(|e| format!("chunk: {e}"))?;
            read_line(stream)?;
        }
    } else if let Some(length) = length {
        if length > MAX_BODY {
            return Err("response body too large".to_owned());
        }
        body.resize(length, 0);
        stream
            .read_exact(&mut body)
            .map_err(|e| format!("body: {e}"))?;
    } else if status != 204 && status != 304 && !(100..200).contains(&status) {
        // No framing: the body runs to the end of the connection.
        stream
            .take(MAX_BODY as u64)
            .read_to_end(&mut body)
            .map_err(|e| format!("body: {e}"))?;
        return Ok((response(status, headers, body), false));
    }
    Ok((response(status, headers, body), keep_alive))
}

fn response(status: u16, headers: Vec<(String, String)>, body: Vec<u8>) -> Response {
    Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        elapsed: Duration::ZERO,
    }
}

/// A loopback port nothing listens on right now: for a server started
/// next (a bench twin, a scratch Redis).
pub(crate) fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("no free port: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Serves `responses` in order on one connection, each after reading
    /// one request's head (the tests send no bodies).
    fn server(responses: &'static [&'static str]) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut writer = stream;
            for response in responses {
                let mut line = String::new();
                while reader.read_line(&mut line).expect("read") > 0 {
                    if line == "\r\n" {
                        break;
                    }
                    line.clear();
                }
                writer.write_all(response.as_bytes()).expect("write");
            }
        });
        addr
    }

    #[test]
    fn reads_sized_and_chunked_bodies_on_one_connection() {
        let addr = server(&[
            "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Idempotent-Replayed: true\r\ncontent-length: 11\r\n\r\n{\"id\":\"a\"}\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n",
            "HTTP/1.1 303 See Other\r\nlocation: /welcome\r\ncontent-length: 0\r\n\r\n",
        ]);
        let mut connection = Connection::new(addr);
        let first = connection
            .send("POST /orders HTTP/1.1", b"")
            .expect("first");
        assert_eq!(first.status, 201);
        assert_eq!(first.header("x-idempotent-replayed"), Some("true"));
        assert_eq!(json_string(&first.body, "id"), Some("a"));
        let second = connection
            .send("GET /orders HTTP/1.1", b"")
            .expect("second");
        assert_eq!((second.status, second.body.as_str()), (200, "Wikipedia"));
        let third = connection
            .send("POST /signup HTTP/1.1", b"")
            .expect("third");
        assert_eq!(third.status, 303);
        assert_eq!(third.header("location"), Some("/welcome"));
    }

    #[test]
    fn a_connection_sends_its_own_headers_with_every_request() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let heads = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut writer = stream;
            let mut heads = Vec::new();
            for _ in 0..2 {
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).expect("read");
                    if line == "\r\n" || line.is_empty() {
                        break;
                    }
                    head.push_str(&line);
                }
                heads.push(head);
                writer
                    .write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
                    .expect("write");
            }
            heads
        });
        let mut connection = Connection::new(addr).with_header("x-forwarded-for", "10.0.1.1");
        for head in ["GET /a HTTP/1.1", "POST /b HTTP/1.1"] {
            let response = connection.send(head, b"").expect("an answer");
            assert_eq!(response.status, 204);
        }
        let heads = heads.join().expect("the server thread");
        assert_eq!(heads.len(), 2);
        for head in heads {
            assert!(
                head.contains("\r\nx-forwarded-for: 10.0.1.1\r\n"),
                "{head:?}"
            );
        }
    }

    #[test]
    fn a_closed_connection_is_an_error_not_an_answer() {
        let addr = server(&["HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"]);
        let mut connection = Connection::new(addr);
        assert!(connection.send("GET / HTTP/1.1", b"").is_err());
    }
}
