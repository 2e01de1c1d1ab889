//! The soak's own keys in the shared Redis: counted at the end of the load
//! (how many records the run left live), then removed so that a run does
//! not leave its records there until their TTL: `SCAN` with a pattern,
//! `UNLINK` what it finds. Just enough RESP for those two.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long a scan may take before it gives up (the keys then expire by
/// their TTL).
const SCAN_DEADLINE: Duration = Duration::from_secs(60);
const TIMEOUT: Duration = Duration::from_secs(5);

/// One RESP reply, as far as `SCAN` and `UNLINK` need.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Integer(i64),
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    Other,
}

/// Deletes every key matching `pattern`; answers how many were removed.
pub(crate) fn unlink_matching(addr: SocketAddr, pattern: &str) -> Result<u64, String> {
    let mut removed = 0;
    scan(addr, pattern, |link, keys| {
        let mut unlink: Vec<&[u8]> = vec![b"UNLINK"];
        unlink.extend(keys.iter().map(Vec::as_slice));
        if let Reply::Integer(n) = link.call(&unlink)? {
            removed += u64::try_from(n).unwrap_or(0);
        }
        Ok(())
    })?;
    Ok(removed)
}

/// How many keys match `pattern` (each once: `SCAN` may name a key twice
/// while Redis resizes its table).
pub(crate) fn count_matching(addr: SocketAddr, pattern: &str) -> Result<u64, String> {
    let mut seen = HashSet::new();
    scan(addr, pattern, |_, keys| {
        seen.extend(keys);
        Ok(())
    })?;
    Ok(seen.len() as u64)
}

/// One connection to Redis.
struct Link {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Link {
    fn open(addr: SocketAddr) -> Result<Self, String> {
        let stream = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(TIMEOUT))
            .map_err(|e| e.to_string())?;
        let reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        Ok(Self {
            writer: stream,
            reader,
        })
    }

    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut command = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            command.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            command.extend_from_slice(arg);
            command.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&command).map_err(|e| e.to_string())?;
        read_reply(&mut self.reader, 0)
    }
}

/// `SCAN`s every key matching `pattern`, handing each non-empty batch to
/// `each` (with the connection, for a command on them).
fn scan(
    addr: SocketAddr,
    pattern: &str,
    mut each: impl FnMut(&mut Link, Vec<Vec<u8>>) -> Result<(), String>,
) -> Result<(), String> {
    let mut link = Link::open(addr)?;
    let deadline = Instant::now() + SCAN_DEADLINE;
    let mut cursor = b"0".to_vec();
    loop {
        if Instant::now() > deadline {
            return Err(format!("gave up after {}s", SCAN_DEADLINE.as_secs()));
        }
        let scan = [
            &b"SCAN"[..],
            &cursor,
            b"MATCH",
            pattern.as_bytes(),
            b"COUNT",
            b"1000",
        ];
        let Reply::Array(mut parts) = link.call(&scan)? else {
            return Err("SCAN did not answer an array".to_owned());
        };
        let (Some(Reply::Array(keys)), Some(Reply::Bulk(next))) = (parts.pop(), parts.pop()) else {
            return Err("SCAN answered an unexpected shape".to_owned());
        };
        let keys: Vec<Vec<u8>> = keys
            .into_iter()
            .filter_map(|key| match key {
                Reply::Bulk(key) => Some(key),
                _ => None,
            })
            .collect();
        if !keys.is_empty() {
            each(&mut link, keys)?;
        }
        if next == b"0" {
            return Ok(());
        }
        cursor = next;
    }
}

fn read_reply(reader: &mut impl BufRead, depth: usize) -> Result<Reply, String> {
    if depth > 4 {
        return Err("reply nested too deep".to_owned());
    }
    let mut line = String::new();
    if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
        return Err("Redis closed the connection".to_owned());
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || {
        rest.parse::<i64>()
            .map_err(|_| format!("bad reply line {line:?}"))
    };
    match kind {
        ":" => Ok(Reply::Integer(number()?)),
        "$" => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Reply::Other); // a nil bulk string
            };
            let mut data = vec![0; len + 2];
            reader.read_exact(&mut data).map_err(|e| e.to_string())?;
            data.truncate(len);
            Ok(Reply::Bulk(data))
        }
        "*" => {
            let len = usize::try_from(number()?).unwrap_or(0);
            let items = (0..len)
                .map(|_| read_reply(reader, depth + 1))
                .collect::<Result<_, _>>()?;
            Ok(Reply::Array(items))
        }
        "-" => Err(format!("Redis answered {rest}")),
        _ => Ok(Reply::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_scan_reply() {
        let raw = b"*2\r\n$2\r\n17\r\n*2\r\n$3\r\na:1\r\n$3\r\nb:2\r\n".as_slice();
        let reply = read_reply(&mut BufReader::new(raw), 0).expect("reply");
        assert_eq!(
            reply,
            Reply::Array(vec![
                Reply::Bulk(b"17".to_vec()),
                Reply::Array(vec![
                    Reply::Bulk(b"a:1".to_vec()),
                    Reply::Bulk(b"b:2".to_vec())
                ]),
            ])
        );
        let error = read_reply(&mut BufReader::new(b"-ERR nope\r\n".as_slice()), 0);
        assert_eq!(error, Err("Redis answered ERR nope".to_owned()));
    }
}
