//! Finding the submit-token field in a form body without changing the body.

use std::sync::Arc;

use memchr::memmem;

use crate::form_type::{MULTIPART, URLENCODED};
use crate::problem::SubmitTokenRejection;

/// Why a form body was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScanError {
    TooLarge {
        limit: usize,
    },
    Malformed(String),
    Repeated,
    BadToken,
    /// The field's part starts after the part of the body the layer scans
    /// before it runs the handler.
    Late,
}

impl ScanError {
    /// The refusal a client gets for this, naming the configured `field`.
    pub(crate) fn into_rejection(self, field: &Arc<str>) -> SubmitTokenRejection {
        match self {
            Self::TooLarge { limit } => SubmitTokenRejection::FormTooLarge { limit },
            Self::Malformed(why) => SubmitTokenRejection::FormMalformed(why),
            Self::Repeated => SubmitTokenRejection::TokenRepeated {
                field: field.clone(),
            },
            Self::BadToken => SubmitTokenRejection::TokenMalformed {
                field: field.clone(),
            },
            Self::Late => SubmitTokenRejection::TokenLate {
                field: field.clone(),
            },
        }
    }
}

/// The form kinds the layer reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FormKind {
    UrlEncoded,
    Multipart {
        boundary: String,
    },
    /// Announced as `multipart/form-data`, but without a boundary the
    /// parts cannot be told apart (no multipart extractor reads it either):
    /// `why` says what is wrong with the type.
    Unframed {
        why: &'static str,
    },
}

/// Whether `text` starts with `prefix`, in any case.
fn starts_with(text: &str, prefix: &str) -> bool {
    text.get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

/// The kind of form `content_type` announces, if it is one the layer reads.
///
/// Decided the way the extractors decide, so that every body a handler
/// parses as a form is scanned first: axum's `Form` takes any
/// `Content-Type` that starts with `application/x-www-form-urlencoded`
/// (whatever follows: parameters, spaces, junk), and its `Multipart`
/// parses the type with the `mime` crate and takes its `boundary`
/// parameter, whatever its length. The layer accepts a superset (any case,
/// leading spaces): a form scanned that the extractor then refuses costs
/// nothing. A type that names `multipart/form-data` but gives no boundary
/// the extractor could read is [`FormKind::Unframed`].
pub(crate) fn form_kind(content_type: &str) -> Option<FormKind> {
    let trimmed = content_type.trim_start();
    if starts_with(trimmed, URLENCODED) {
        return Some(FormKind::UrlEncoded);
    }
    // Anything but a multipart type is no form, parsed or not (a JSON
    // request, most of all): not worth a parse on every request.
    if !starts_with(trimmed, MULTIPART) {
        return None;
    }
    match trimmed.parse::<mime::Mime>() {
        Ok(media) if media.type_() == mime::MULTIPART && media.subtype() == mime::FORM_DATA => {
            Some(match media.get_param(mime::BOUNDARY) {
                // Any boundary the extractor takes, even one RFC 2046
                // would not: it reads the parts with it, so the layer must.
                Some(boundary) => FormKind::Multipart {
                    boundary: boundary.as_str().to_owned(),
                },
                None => FormKind::Unframed {
                    why: "multipart/form-data needs a boundary parameter",
                },
            })
        }
        Ok(_) => None,
        // Unparseable, so no extractor reads it as a form either; but a
        // body that looks like one and names the field is not let through.
        Err(_) if starts_with(trimmed, "multipart/form-data") => Some(FormKind::Unframed {
            why: "the multipart/form-data content type cannot be parsed",
        }),
        Err(_) => None,
    }
}

/// Looks for the token field's name anywhere in a body, as it streams by in
/// pieces cut anywhere: the check for a multipart body whose framing is
/// broken (no boundary, a part that does not parse, a body that ends
/// early), where parts cannot be read. A body that never spells the name
/// cannot carry the field, however a parser reads it, and passes untouched;
/// one that does might, and is refused as malformed. Only the last few
/// bytes of a piece are kept, for a name cut between two pieces.
#[derive(Debug)]
pub(crate) struct FieldSearch {
    /// The name as sent raw and as browsers escape it in a part header.
    names: Vec<memmem::Finder<'static>>,
    /// The longest name's length, less one: what a cut can hide.
    overlap: usize,
    tail: Vec<u8>,
    found: bool,
}

impl FieldSearch {
    pub(crate) fn new(field: &str) -> Self {
        let raw = field.as_bytes().to_vec();
        let escaped = escape_field(field);
        let mut spellings = vec![raw];
        if spellings[0] != escaped {
            spellings.push(escaped);
        }
        let overlap = spellings.iter().map(Vec::len).max().unwrap_or(1).max(1) - 1;
        Self {
            names: spellings
                .iter()
                .map(|name| memmem::Finder::new(name).into_owned())
                .collect(),
            overlap,
            tail: Vec::new(),
            found: false,
        }
    }

    /// Whether the name was seen.
    pub(crate) fn found(&self) -> bool {
        self.found
    }

    /// Reads the next piece of the body.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        if self.found {
            return;
        }
        let mut seam = self.tail.clone();
        seam.extend_from_slice(&bytes[..bytes.len().min(self.overlap)]);
        self.found = self
            .names
            .iter()
            .any(|name| name.find(&seam).is_some() || name.find(bytes).is_some());
        self.carry(bytes);
    }

    /// Passes `bytes` by without looking at them, keeping only their end:
    /// a name that starts there and goes on in the next piece fed is found.
    pub(crate) fn carry(&mut self, bytes: &[u8]) {
        if bytes.len() >= self.overlap {
            self.tail.clear();
            self.tail
                .extend_from_slice(&bytes[bytes.len() - self.overlap..]);
        } else {
            self.tail.extend_from_slice(bytes);
            let excess = self.tail.len().saturating_sub(self.overlap);
            self.tail.drain(..excess);
        }
    }
}

/// The field's name as browsers write it in a part header: they escape
/// these three.
fn escape_field(field: &str) -> Vec<u8> {
    let mut escaped = Vec::with_capacity(field.len());
    for &b in field.as_bytes() {
        match b {
            b'"' => escaped.extend_from_slice(b"%22"),
            b'\r' => escaped.extend_from_slice(b"%0D"),
            b'\n' => escaped.extend_from_slice(b"%0A"),
            _ => escaped.push(b),
        }
    }
    escaped
}

fn token(value: &[u8]) -> Result<String, ScanError> {
    if value.is_empty()
        || value.len() > MAX_TOKEN
        || value.iter().any(|b| !(0x21..=0x7e).contains(b))
    {
        return Err(ScanError::BadToken);
    }
    String::from_utf8(value.to_vec()).map_err(|_| ScanError::BadToken)
}

/// The longest token accepted.
const MAX_TOKEN: usize = 255;

fn hex(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Decodes `application/x-www-form-urlencoded` text strictly: `+` is a
/// space, and every `%` must start two hex digits.
fn percent_decode(input: &[u8]) -> Result<Vec<u8>, ScanError> {
    let mut out = Vec::with_capacity(input.len());
    let mut bytes = input.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let high = bytes.next().copied().and_then(hex);
                let low = bytes.next().copied().and_then(hex);
                match (high, low) {
                    (Some(high), Some(low)) => out.push(high << 4 | low),
                    _ => {
                        return Err(ScanError::Malformed(
                            "a % is not followed by two hex digits".into(),
                        ));
                    }
                }
            }
            _ => out.push(b),
        }
    }
    Ok(out)
}

/// The token in an urlencoded body, if the field is there.
pub(crate) fn urlencoded(body: &[u8], field: &str) -> Result<Option<String>, ScanError> {
    let mut found = None;
    for pair in body.split(|&b| b == b'&').filter(|pair| !pair.is_empty()) {
        let (name, value) = match pair.iter().position(|&b| b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        };
        let name = percent_decode(name)?;
        let value = percent_decode(value)?;
        if name == field.as_bytes() {
            if found.is_some() {
                return Err(ScanError::Repeated);
            }
            found = Some(token(&value)?);
        }
    }
    Ok(found)
}

/// Decodes a form name as the form extractor does (`form_urlencoded`): `+`
/// is a space, `%` and two hex digits a byte, and any other `%` itself.
fn lenient_decode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut at = 0;
    while let Some(&b) = input.get(at) {
        at += 1;
        match b {
            b'+' => out.push(b' '),
            b'%' => match (
                input.get(at).copied().and_then(hex),
                input.get(at + 1).copied().and_then(hex),
            ) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    at += 2;
                }
                _ => out.push(b'%'),
            },
            _ => out.push(b),
        }
    }
    out
}

/// Watches the names of an urlencoded body as it streams by, in pieces cut
/// anywhere, for one that the form extractor would read as the token field.
///
/// It decides whether a body carries the field at all: one that does is
/// checked (strictly, whole); one that does not passes on untouched, bad
/// escapes and all, as if no layer were there. Only the name being read is
/// kept, and no more of it than could still decode to the field.
#[derive(Debug)]
pub(crate) struct UrlencodedNames {
    field: Box<[u8]>,
    /// The raw bytes of the name being read.
    name: Vec<u8>,
    /// Reading a name (not a value).
    in_name: bool,
    /// The name being read is longer than any spelling of the field.
    too_long: bool,
    found: bool,
}

impl UrlencodedNames {
    pub(crate) fn new(field: &str) -> Self {
        Self {
            field: field.as_bytes().into(),
            name: Vec::new(),
            in_name: true,
            too_long: false,
            found: false,
        }
    }

    /// Whether a whole name seen so far is the field's.
    pub(crate) fn found(&self) -> bool {
        self.found
    }

    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match b {
                b'&' => {
                    self.end_name();
                    self.in_name = true;
                }
                b'=' if self.in_name => {
                    self.end_name();
                    self.in_name = false;
                }
                _ if self.in_name && !self.too_long => {
                    // Every byte of the field takes at most three (`%XX`).
                    if self.name.len() >= self.field.len() * 3 {
                        self.too_long = true;
                        self.name.clear();
                    } else {
                        self.name.push(b);
                    }
                }
                _ => {}
            }
        }
    }

    /// The body ended: the name being read, if any, is whole. Whether the
    /// body named the field.
    pub(crate) fn finish(&mut self) -> bool {
        self.end_name();
        self.found
    }

    fn end_name(&mut self) {
        if self.in_name && !self.too_long && lenient_decode(&self.name) == *self.field {
            self.found = true;
        }
        self.in_name = false;
        self.too_long = false;
        self.name.clear();
    }
}

/// The longest header block of a part the scanner reads.
const MAX_PART_HEADERS: usize = 8 * 1024;

fn trim_start(bytes: &[u8]) -> &[u8] {
    let at = bytes
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(bytes.len());
    &bytes[at..]
}

fn trim_end(bytes: &[u8]) -> &[u8] {
    let at = bytes
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(0, |at| at + 1);
    &bytes[..at]
}

/// The `name` and whether a `filename` is given, from the value of a
/// `Content-Disposition` header (`form-data; name="a"; filename="b"`).
/// A quoted value runs to the next `"`: browsers send a `"` inside a name
/// as `%22`, so a `;` or a `name=` inside a quoted filename is just text.
fn disposition_params(value: &[u8]) -> (Option<&[u8]>, bool) {
    let mut name = None;
    let mut file = false;
    let Some(first) = memchr::memchr(b';', value) else {
        return (None, false);
    };
    let mut rest = &value[first..];
    while let Some(after) = rest.strip_prefix(b";") {
        let param = trim_start(after);
        let end = param
            .iter()
            .position(|&b| b == b'=' || b == b';')
            .unwrap_or(param.len());
        let key = trim_end(&param[..end]);
        let (found, after_value) = if param.get(end) == Some(&b'=') {
            let raw = trim_start(&param[end + 1..]);
            match raw.strip_prefix(b"\"") {
                Some(quoted) => match memchr::memchr(b'"', quoted) {
                    Some(close) => (&quoted[..close], &quoted[close + 1..]),
                    None => (quoted, &[][..]),
                },
                None => {
                    let close = memchr::memchr(b';', raw).unwrap_or(raw.len());
                    (trim_end(&raw[..close]), &raw[close..])
                }
            }
        } else {
            (&[][..], &param[end..])
        };
        if key.eq_ignore_ascii_case(b"name") {
            name = Some(found);
        } else if key.eq_ignore_ascii_case(b"filename") || key.eq_ignore_ascii_case(b"filename*") {
            file = true;
        }
        // Skip whatever follows a value up to the next parameter.
        rest = match memchr::memchr(b';', after_value) {
            Some(at) => &after_value[at..],
            None => &[],
        };
    }
    (name, file)
}

/// Where a [`MultipartScanner`] is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Looking for the next delimiter; the bytes before it are the
    /// preamble or a part's content.
    Seeking,
    /// Just after a delimiter: `--` ends the body, a line break starts a
    /// part.
    AfterDelimiter,
    /// In a part's header block.
    Headers,
    /// After the closing delimiter: the rest is an epilogue.
    Done,
}

/// Reads a multipart body's parts as it arrives, in pieces of any size,
/// without holding on to it: only a delimiter's length of it between
/// pieces, a part's header block while it is read, and the token field's
/// value.
#[derive(Debug)]
pub(crate) struct MultipartScanner {
    /// `\r\n--boundary`: the first delimiter is found too, because the
    /// scan starts as if the body began with a line break.
    delimiter: memmem::Finder<'static>,
    /// The field's name as browsers write it in a part's header.
    field: Vec<u8>,
    state: State,
    /// Bytes held over from the last piece: a possible start of a
    /// delimiter, or an unfinished header block.
    pending: Vec<u8>,
    /// Whether the part being read is the token field, and its value.
    value: Option<Vec<u8>>,
    token: Option<String>,
    /// Whether any part was seen (for the error message).
    started: bool,
    /// Set once the handler runs: a part naming the field is then an error.
    watching: bool,
}

impl MultipartScanner {
    pub(crate) fn new(boundary: &str, field: &str) -> Self {
        let delimiter = format!("\r\n--{boundary}").into_bytes();
        Self {
            delimiter: memmem::Finder::new(&delimiter).into_owned(),
            field: escape_field(field),
            state: State::Seeking,
            pending: b"\r\n".to_vec(),
            value: None,
            token: None,
            started: false,
            watching: false,
        }
    }

    /// The token, once its part has been read whole.
    pub(crate) fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Whether the closing delimiter was read.
    pub(crate) fn is_complete(&self) -> bool {
        self.state == State::Done
    }

    /// Whether the token field's part was started but not finished.
    pub(crate) fn in_field(&self) -> bool {
        self.value.is_some()
    }

    /// Whether a part naming the token field was read, whole or not.
    pub(crate) fn met_field(&self) -> bool {
        self.token.is_some() || self.value.is_some()
    }

    /// The bytes held over from the pieces read so far (see `feed`).
    pub(crate) fn held(&self) -> &[u8] {
        &self.pending
    }

    /// From now on, a part naming the field is [`ScanError::Late`].
    pub(crate) fn watch(&mut self) {
        self.watching = true;
    }

    /// Reads the next piece of the body.
    pub(crate) fn feed(&mut self, mut input: &[u8]) -> Result<(), ScanError> {
        // Finish what the last piece left over, joined with as few of this
        // piece's bytes as that takes; the rest is read in place.
        while !self.pending.is_empty() && !input.is_empty() {
            let wanted = match self.state {
                State::Headers => MAX_PART_HEADERS + 4,
                _ => self.delimiter.needle().len(),
            };
            let take = input.len().min(wanted);
            let mut joined = std::mem::take(&mut self.pending);
            let held = joined.len();
            joined.extend_from_slice(&input[..take]);
            let used = self.read(&joined)?;
            if used >= held {
                input = &input[used - held..];
                break;
            }
            self.pending = joined.split_off(used);
            input = &input[take..];
        }
        if self.pending.is_empty() && !input.is_empty() {
            let used = self.read(input)?;
            self.pending = input[used..].to_vec();
        }
        Ok(())
    }

    /// Checks that the whole body has been read: it must have ended with
    /// its closing delimiter.
    pub(crate) fn finish(&self) -> Result<(), ScanError> {
        let why = match self.state {
            State::Done => return Ok(()),
            State::Seeking if !self.started => "the body does not contain its boundary",
            State::Headers => "a part's headers do not end",
            State::Seeking | State::AfterDelimiter => {
                "the body does not end with its closing boundary"
            }
        };
        Err(ScanError::Malformed(why.into()))
    }

    /// Reads what it can of `data`; answers how many bytes it is done
    /// with (the rest must come again, with more after it).
    fn read(&mut self, data: &[u8]) -> Result<usize, ScanError> {
        let delimiter_len = self.delimiter.needle().len();
        let mut at = 0;
        loop {
            let rest = &data[at..];
            match self.state {
                State::Done => return Ok(data.len()),
                State::Seeking => match self.delimiter.find(rest) {
                    Some(found) => {
                        self.content(&rest[..found])?;
                        if let Some(value) = self.value.take() {
                            self.token = Some(token(&value)?);
                        }
                        at += found + delimiter_len;
                        self.state = State::AfterDelimiter;
                    }
                    None => {
                        let keep = self.partial_delimiter(rest);
                        self.content(&rest[..rest.len() - keep])?;
                        return Ok(data.len() - keep);
                    }
                },
                State::AfterDelimiter => match rest.get(..2) {
                    None => return Ok(at),
                    Some(b"--") => {
                        at += 2;
                        self.state = State::Done;
                    }
                    // The line break stays: it opens the header block.
                    Some(b"\r\n") => {
                        self.started = true;
                        self.state = State::Headers;
                    }
                    Some(_) => {
                        return Err(ScanError::Malformed(
                            "a boundary is not followed by a line break".into(),
                        ));
                    }
                },
                State::Headers => {
                    let too_long = || {
                        ScanError::Malformed(format!(
                            "a part's headers are longer than {MAX_PART_HEADERS} bytes"
                        ))
                    };
                    let Some(end) = memmem::find(rest, b"\r\n\r\n") else {
                        // However the body is cut into pieces, the same
                        // header block is refused.
                        if rest.len() > MAX_PART_HEADERS + 3 {
                            return Err(too_long());
                        }
                        return Ok(at);
                    };
                    if end > MAX_PART_HEADERS {
                        return Err(too_long());
                    }
                    self.part(rest.get(2..end).unwrap_or_default())?;
                    at += end + 4;
                    self.state = State::Seeking;
                }
            }
        }
    }

    /// The length of the longest end of `data` that may be the start of a
    /// delimiter cut off by the end of the piece.
    fn partial_delimiter(&self, data: &[u8]) -> usize {
        let needle = self.delimiter.needle();
        let from = data.len().saturating_sub(needle.len() - 1);
        memchr::memchr_iter(b'\r', &data[from..])
            .map(|at| from + at)
            .find(|&at| needle.starts_with(&data[at..]))
            .map_or(0, |at| data.len() - at)
    }

    /// Content of the current part.
    fn content(&mut self, bytes: &[u8]) -> Result<(), ScanError> {
        if let Some(value) = &mut self.value {
            if value.len() + bytes.len() > MAX_TOKEN {
                return Err(ScanError::BadToken);
            }
            value.extend_from_slice(bytes);
        }
        Ok(())
    }

    /// A part's header block, without the line breaks around it.
    fn part(&mut self, headers: &[u8]) -> Result<(), ScanError> {
        let disposition = headers
            .split(|&b| b == b'\n')
            .filter_map(|line| {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let colon = memchr::memchr(b':', line)?;
                trim_end(trim_start(&line[..colon]))
                    .eq_ignore_ascii_case(b"content-disposition")
                    .then(|| &line[colon + 1..])
            })
            .next();
        let Some(disposition) = disposition else {
            return Err(ScanError::Malformed(
                "a part has no Content-Disposition header".into(),
            ));
        };
        let (name, is_file) = disposition_params(disposition);
        if name != Some(&self.field[..]) {
            return Ok(());
        }
        if self.watching {
            return Err(ScanError::Late);
        }
        if self.token.is_some() {
            return Err(ScanError::Repeated);
        }
        if is_file {
            return Err(ScanError::BadToken);
        }
        self.value = Some(Vec::new());
        Ok(())
    }
}

/// What scanning a multipart prefix found.
#[cfg(test)]
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MultipartScan {
    /// The token, when the field was seen.
    pub(crate) token: Option<String>,
    /// Whether every part was seen (the whole body was in `body`).
    pub(crate) complete: bool,
}

/// Scans a multipart body, or its first bytes when `whole` is false.
#[cfg(test)]
pub(crate) fn multipart(
    body: &[u8],
    boundary: &str,
    field: &str,
    whole: bool,
) -> Result<MultipartScan, ScanError> {
    let mut scanner = MultipartScanner::new(boundary, field);
    scanner.feed(body)?;
    if whole {
        scanner.finish()?;
    }
    Ok(MultipartScan {
        token: scanner.token().map(str::to_owned),
        complete: scanner.is_complete(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::form_type::may_be_form;

    #[test]
    fn urlencoded_forms_are_read_strictly() {
        assert_eq!(
            urlencoded(b"title=Hi&_submit_token=abc", "_submit_token"),
            Ok(Some("abc".into()))
        );
        assert_eq!(urlencoded(b"title=Hi", "_submit_token"), Ok(None));
        assert_eq!(
            urlencoded(b"_submit%5Ftoken=a%62c", "_submit_token"),
            Ok(Some("abc".into()))
        );
        assert_eq!(
            urlencoded(b"_submit_token=a&_submit_token=b", "_submit_token"),
            Err(ScanError::Repeated)
        );
        assert!(matches!(
            urlencoded(b"title=%zz", "_submit_token"),
            Err(ScanError::Malformed(_))
        ));
        assert!(matches!(
            urlencoded(b"title=%4", "_submit_token"),
            Err(ScanError::Malformed(_))
        ));
        assert_eq!(
            urlencoded(b"_submit_token=", "_submit_token"),
            Err(ScanError::BadToken)
        );
        assert_eq!(
            urlencoded(b"_submit_token=a+b", "_submit_token"),
            Err(ScanError::BadToken)
        );
    }

    fn names(body: &[u8], chunk: usize) -> bool {
        let mut names = UrlencodedNames::new("_submit_token");
        for piece in body.chunks(chunk.max(1)) {
            names.feed(piece);
        }
        names.finish()
    }

    #[test]
    fn urlencoded_names_are_read_as_the_extractor_reads_them() {
        for chunk in [1, 2, 5, 1000] {
            assert!(names(b"title=Hi&_submit_token=abc", chunk));
            assert!(names(b"_submit_token", chunk), "a name without a value");
            assert!(names(b"_submit%5Ftoken=x", chunk));
            assert!(
                names(b"a=%zz&_submit_token=x", chunk),
                "bad escapes elsewhere"
            );
            assert!(names(b"a=b&&_submit_token&", chunk));
            assert!(!names(b"title=Hi", chunk));
            assert!(!names(b"title=_submit_token", chunk), "a value is no name");
            assert!(!names(b"x=1=_submit_token", chunk), "nor is a second '='");
            assert!(!names(b"_submit_token%zz=x", chunk));
            assert!(!names(b"_submit_tokens=x", chunk));
            assert!(!names(b"x_submit_token=x", chunk));
            assert!(!names(b"title=%zz&note=100%", chunk), "bad escapes pass");
            assert!(!names(&[b'a'; 5000], chunk), "a long name is not the field");
        }
    }

    fn part(name: &str, extra: &str, value: &str) -> String {
        format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"{extra}\r\n\r\n{value}\r\n"
        )
    }

    #[test]
    fn multipart_parts_are_read_in_order() {
        let body = format!(
            "{}{}--XyZ--\r\n",
            part("_submit_token", "", "tok"),
            part("f", "; filename=\"a.txt\"", "data")
        );
        let scan = multipart(body.as_bytes(), "XyZ", "_submit_token", true).expect("scan");
        assert_eq!(
            scan,
            MultipartScan {
                token: Some("tok".into()),
                complete: true
            }
        );

        let none = format!("{}--XyZ--\r\n", part("title", "", "x"));
        assert_eq!(
            multipart(none.as_bytes(), "XyZ", "_submit_token", true),
            Ok(MultipartScan {
                token: None,
                complete: true
            })
        );
        let twice = format!(
            "{}{}--XyZ--\r\n",
            part("_submit_token", "", "a"),
            part("_submit_token", "", "b")
        );
        assert_eq!(
            multipart(twice.as_bytes(), "XyZ", "_submit_token", true),
            Err(ScanError::Repeated)
        );
        for broken in [
            "no boundary here",
            "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nunterminated",
        ] {
            assert!(
                matches!(
                    multipart(broken.as_bytes(), "XyZ", "_submit_token", true),
                    Err(ScanError::Malformed(_))
                ),
                "{broken}"
            );
        }
        // A prefix cut mid-part is not an error: the rest is watched.
        let prefix = &body.as_bytes()[..body.len() / 2 + 20];
        assert!(
            !multipart(prefix, "XyZ", "_submit_token", false)
                .expect("scan")
                .complete
        );
    }

    fn search(body: &[u8], chunk: usize) -> bool {
        let mut search = FieldSearch::new("_submit_token");
        for piece in body.chunks(chunk.max(1)) {
            search.feed(piece);
        }
        search.found()
    }

    #[test]
    fn the_field_name_is_found_however_the_body_is_cut() {
        let body = b"--x\r\nContent-Disposition: form-data; name=\"_submit_token\"\r\n\r\nt";
        for chunk in 1..=body.len() {
            assert!(search(body, chunk), "chunk {chunk}");
            assert!(!search(&body[..50], chunk), "cut before the name ends");
        }
        assert!(!search(b"_submit_toke_submit_tokn", 3));
        let mut quoted = FieldSearch::new("a\"b");
        quoted.feed(b"name=\"a%2");
        quoted.feed(b"2b\"");
        assert!(quoted.found(), "the escaped spelling counts");
        // Carried bytes are not searched, but their end joins the next.
        let mut carried = FieldSearch::new("_submit_token");
        carried.carry(b"xx_submit_token yy_submit");
        assert!(!carried.found());
        carried.feed(b"_token");
        assert!(carried.found());
    }

    #[test]
    fn content_types_name_their_form_kind() {
        // Every type axum's `Form` accepts: it only asks that the header
        // start with the urlencoded type.
        for urlencoded in [
            "application/x-www-form-urlencoded",
            "application/x-www-form-urlencoded; charset=UTF-8",
            "application/x-www-form-urlencoded;charset=utf-8",
            "application/x-www-form-urlencoded ; charset=utf-8",
            "application/x-www-form-urlencoded charset=utf-8",
            "application/x-www-form-urlencoded,text/plain",
            "application/x-www-form-urlencodedjunk",
            "  Application/X-WWW-Form-UrlEncoded",
        ] {
            assert_eq!(
                form_kind(urlencoded),
                Some(FormKind::UrlEncoded),
                "{urlencoded}"
            );
        }
        // Every boundary axum's `Multipart` reads (it parses with `mime`).
        for (multipart, boundary) in [
            ("multipart/form-data; boundary=abc", "abc"),
            ("multipart/form-data; boundary=\"abc\"", "abc"),
            ("multipart/form-data;boundary=abc", "abc"),
            ("Multipart/Form-Data; BOUNDARY=abc", "abc"),
            ("multipart/form-data; charset=utf-8; boundary=abc", "abc"),
            ("multipart/form-data; boundary=\"a;b c\"", "a;b c"),
            (
                "multipart/form-data; boundary=\"abc\" ; charset=utf-8",
                "abc",
            ),
            // Past RFC 2046's 70 characters: the extractor still reads it.
            (
                &format!("multipart/form-data; boundary={}", "b".repeat(100)),
                &"b".repeat(100),
            ),
            // Empty, as `mime` reads it: the extractor splits on `--` alone.
            ("multipart/form-data; boundary=", ""),
        ] {
            assert_eq!(
                form_kind(multipart),
                Some(FormKind::Multipart {
                    boundary: boundary.into()
                }),
                "{multipart}"
            );
        }
        for unframed in [
            "multipart/form-data",
            "multipart/form-data; charset=utf-8",
            "multipart/form-data; boundary=\"\"",
            "multipart/form-data; boundary=\"abc",
            "multipart/form-data; boundary=abc def",
        ] {
            assert!(
                matches!(form_kind(unframed), Some(FormKind::Unframed { .. })),
                "{unframed}"
            );
        }
        assert_eq!(form_kind("application/json"), None);
        assert!(!may_be_form(b"application/json"));
        assert!(!may_be_form(b""));
        assert!(may_be_form(b" \tMULTIPART/form-data; boundary=abc"));
        assert_eq!(form_kind("multipart/mixed; boundary=abc"), None);
        assert_eq!(form_kind("text/plain; x=\"unterminated"), None);
    }

    #[test]
    fn part_names_are_read_as_browsers_write_them() {
        let parts = |disposition: &str| {
            format!("--XyZ\r\nContent-Disposition: {disposition}\r\n\r\nvalue\r\n--XyZ--\r\n")
        };
        let found = |disposition: &str| {
            multipart(parts(disposition).as_bytes(), "XyZ", "_submit_token", true)
        };
        assert_eq!(
            found("form-data; name=\"_submit_token\"").map(|scan| scan.token),
            Ok(Some("value".into()))
        );
        assert_eq!(
            found("form-data; name=_submit_token").map(|scan| scan.token),
            Ok(Some("value".into()))
        );
        for other in [
            "form-data; name=\"title\"",
            "form-data; xname=\"_submit_token\"",
            "form-data; name=\"_submit_token2\"",
            "form-data; name=\"f\"; filename=\"a; name=_submit_token\"",
            "form-data; name=\"f\"; filename=\"name=\\\"_submit_token\\\"\"",
        ] {
            assert_eq!(found(other).map(|scan| scan.token), Ok(None), "{other}");
        }
        // A browser writes a `"` in a name as %22.
        let quoted = "--XyZ\r\nContent-Disposition: form-data; name=\"a%22b\"\r\n\r\nv\r\n--XyZ--";
        assert_eq!(
            multipart(quoted.as_bytes(), "XyZ", "a\"b", true).map(|scan| scan.token),
            Ok(Some("v".into()))
        );
    }

    #[test]
    fn a_watched_body_fails_on_a_part_naming_the_field_not_on_content() {
        let field = "_submit_token";
        let mut scanner = MultipartScanner::new("XyZ", field);
        scanner
            .feed(b"--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a\"\r\n\r\nabc")
            .expect("prefix");
        scanner.watch();
        // A file that happens to hold the field's name, cut in two.
        scanner
            .feed(b"Content-Disposition: form-data; name=\"_submit")
            .expect("content");
        scanner.feed(b"_token\"\r\n\r\nxyz").expect("content");
        scanner
            .feed(b"\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_subm")
            .expect("a header cut short is not decided yet");
        assert_eq!(
            scanner.feed(b"it_token\"\r\n\r\ntok\r\n--XyZ--\r\n"),
            Err(ScanError::Late)
        );
    }

    #[test]
    fn long_part_headers_and_long_tokens_are_refused() {
        let header = format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\nX: {}\r\n\r\nv\r\n--XyZ--",
            "y".repeat(MAX_PART_HEADERS)
        );
        assert!(matches!(
            multipart(header.as_bytes(), "XyZ", "_submit_token", true),
            Err(ScanError::Malformed(_))
        ));
        let long = format!("{}--XyZ--", part("_submit_token", "", &"t".repeat(256)));
        assert_eq!(
            multipart(long.as_bytes(), "XyZ", "_submit_token", true),
            Err(ScanError::BadToken)
        );
        let longest = format!("{}--XyZ--", part("_submit_token", "", &"t".repeat(255)));
        assert!(multipart(longest.as_bytes(), "XyZ", "_submit_token", true).is_ok());
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;
        use crate::form_type::may_be_form;

        const FIELD: &str = "_submit_token";

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            }
        }

        /// Feeds `body` in pieces cut at `cuts`, as a network would.
        fn scan_in_pieces(
            body: &[u8],
            boundary: &str,
            cuts: &[usize],
        ) -> Result<(Option<String>, bool), ScanError> {
            let mut scanner = MultipartScanner::new(boundary, FIELD);
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
            cuts.sort_unstable();
            let mut from = 0;
            for cut in cuts.into_iter().chain([body.len()]) {
                scanner.feed(&body[from..cut])?;
                from = cut;
            }
            scanner.finish()?;
            Ok((scanner.token().map(str::to_owned), scanner.is_complete()))
        }

        fn token() -> impl Strategy<Value = String> {
            "[!-~]{1,255}"
        }

        fn boundary() -> impl Strategy<Value = String> {
            "[0-9A-Za-z'()+_,./:=?-]{1,70}"
        }

        /// A part's content: bytes that may look like parts, names and
        /// cut-off delimiters, but hold no whole delimiter.
        fn content() -> impl Strategy<Value = Vec<u8>> {
            prop::collection::vec(
                prop_oneof![
                    any::<u8>().prop_map(|b| vec![b]),
                    Just(b"\r\n".to_vec()),
                    Just(b"\r\n-".to_vec()),
                    Just(b"\r\n--".to_vec()),
                    Just(b"name=\"_submit_token\"".to_vec()),
                    Just(
                        b"Content-Disposition: form-data; name=\"_submit_token\"\r\n\r\n".to_vec()
                    ),
                ],
                0..12,
            )
            .prop_map(|pieces| pieces.concat())
        }

        /// A valid multipart body: parts with random names and contents,
        /// the token field among them (or not), at any place.
        fn form() -> impl Strategy<Value = (String, Vec<u8>, Option<String>)> {
            (
                boundary(),
                prop::collection::vec(("[a-z]{1,8}", any::<bool>(), content()), 0..5),
                prop::option::of((token(), any::<prop::sample::Index>())),
            )
                .prop_filter_map("a content holds the delimiter", |(boundary, parts, field)| {
                    let delimiter = format!("\r\n--{boundary}");
                    let mut body = b"preamble".to_vec();
                    let at = field.as_ref().map(|(_, index)| index.index(parts.len() + 1));
                    for index in 0..=parts.len() {
                        if at == Some(index) {
                            let (token, _) = field.as_ref()?;
                            body.extend_from_slice(
                                format!(
                                    "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"{FIELD}\"\r\n\r\n{token}"
                                )
                                .as_bytes(),
                            );
                        }
                        let Some((name, file, content)) = parts.get(index) else {
                            continue;
                        };
                        if memmem::find(content, delimiter.as_bytes()).is_some()
                            || content.starts_with(&delimiter.as_bytes()[2..])
                        {
                            return None;
                        }
                        let filename = if *file { "; filename=\"x.bin\"" } else { "" };
                        body.extend_from_slice(
                            format!(
                                "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"{filename}\r\nContent-Type: application/octet-stream\r\n\r\n"
                            )
                            .as_bytes(),
                        );
                        body.extend_from_slice(content);
                    }
                    body.extend_from_slice(format!("\r\n--{boundary}--\r\nepilogue").as_bytes());
                    // The body starts with its first delimiter, no preamble.
                    let body = body[b"preamble\r\n".len()..].to_vec();
                    if memmem::find(&body[..], delimiter.as_bytes()).is_none()
                        && !body.starts_with(&delimiter.as_bytes()[2..])
                    {
                        return None;
                    }
                    Some((boundary, body, field.map(|(token, _)| token)))
                })
        }

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn urlencoded_never_panics(body in prop::collection::vec(any::<u8>(), 0..512)) {
                let _ = urlencoded(&body, FIELD);
            }

            /// What the scanner finds is what axum's `Form` (which parses
            /// with `form_urlencoded`) hands the handler.
            #[test]
            fn urlencoded_agrees_with_the_form_extractor(
                body in prop::collection::vec(
                    prop_oneof![
                        Just(b"_submit_token".to_vec()),
                        Just(b"_submit%5Ftoken".to_vec()),
                        Just(b"=".to_vec()),
                        Just(b"&".to_vec()),
                        Just(b"+".to_vec()),
                        Just(b"%41".to_vec()),
                        "[!-~]{1,4}".prop_map(String::into_bytes),
                    ],
                    0..16,
                ).prop_map(|pieces| pieces.concat())
            ) {
                if let Ok(found) = urlencoded(&body, FIELD) {
                    let pairs: Vec<(String, String)> =
                        serde_urlencoded::from_bytes(&body).expect("a form the scanner read");
                    let values: Vec<&String> =
                        pairs.iter().filter(|(name, _)| name == FIELD).map(|(_, v)| v).collect();
                    match found {
                        Some(token) => prop_assert_eq!(values, vec![&token]),
                        None => prop_assert!(values.is_empty()),
                    }
                }
            }

            /// Whether a body names the field is what `form_urlencoded`
            /// (axum's `Form`) says, for any bytes, cut anywhere.
            #[test]
            fn urlencoded_names_agree_with_the_form_extractor(
                body in prop::collection::vec(
                    prop_oneof![
                        Just(b"_submit_token".to_vec()),
                        Just(b"_submit%5Ftoken".to_vec()),
                        Just(b"_submit%5".to_vec()),
                        Just(b"=".to_vec()),
                        Just(b"&".to_vec()),
                        Just(b"+".to_vec()),
                        Just(b"%".to_vec()),
                        Just(b"%zz".to_vec()),
                        any::<u8>().prop_map(|b| vec![b]),
                    ],
                    0..16,
                ).prop_map(|pieces| pieces.concat()),
                chunk in 1usize..8,
            ) {
                let pairs: Result<Vec<(String, String)>, _> = serde_urlencoded::from_bytes(&body);
                prop_assume!(pairs.is_ok());
                let named = pairs.unwrap_or_default().iter().any(|(name, _)| name == FIELD);
                prop_assert_eq!(super::names(&body, chunk), named);
            }

            #[test]
            fn urlencoded_finds_the_field_anywhere(
                token in token(),
                before in prop::collection::vec(("[a-z]{1,6}", "[a-z0-9]{0,6}"), 0..4),
                after in prop::collection::vec(("[a-z]{1,6}", "[a-z0-9]{0,6}"), 0..4),
            ) {
                let encoded: String =
                    url_escape(&token);
                let pairs: Vec<String> = before
                    .iter()
                    .map(|(n, v)| format!("{n}={v}"))
                    .chain([format!("{FIELD}={encoded}")])
                    .chain(after.iter().map(|(n, v)| format!("{n}={v}")))
                    .collect();
                prop_assert_eq!(urlencoded(pairs.join("&").as_bytes(), FIELD), Ok(Some(token)));
            }

            #[test]
            fn content_types_never_panic(content_type in "\\PC{0,80}") {
                let _ = form_kind(&content_type);
            }

            /// The session and scope layers leave their parts out of a
            /// request `may_be_form` turns down: it must never turn down a
            /// type the layer reads as a form. The types the layer sees are
            /// header text (visible ASCII, spaces and tabs).
            #[test]
            fn every_form_may_be_a_form(
                content_type in "[ \\t]{0,2}(?i:application/x-www-form-urlencoded|multipart/form-data|multipart/|text/plain|application/json)?[ -~]{0,40}",
            ) {
                if form_kind(&content_type).is_some() {
                    prop_assert!(may_be_form(content_type.as_bytes()), "{content_type:?}");
                }
            }

            #[test]
            fn multipart_boundaries_are_read_however_they_are_written(
                boundary in boundary(),
                quoted in any::<bool>(),
                space in "[ ]{0,2}",
                charset in any::<bool>(),
            ) {
                let value = if quoted { format!("\"{boundary}\"") } else { boundary.clone() };
                let charset = if charset { "; charset=utf-8" } else { "" };
                let content_type = format!("multipart/form-data;{space}boundary={value}{charset}");
                // Characters outside a token need the quotes.
                let needs_quotes = boundary.contains(['\'', '(', ')', ',', '/', ':', '=', '?']);
                if quoted || !needs_quotes {
                    prop_assert_eq!(
                        form_kind(&content_type),
                        Some(FormKind::Multipart { boundary })
                    );
                } else {
                    prop_assert!(form_kind(&content_type).is_some());
                }
            }

            #[test]
            fn multipart_never_panics(
                body in prop::collection::vec(any::<u8>(), 0..512),
                boundary in boundary(),
                cuts in prop::collection::vec(any::<usize>(), 0..6),
                whole in any::<bool>(),
            ) {
                let _ = multipart(&body, &boundary, FIELD, whole);
                let _ = scan_in_pieces(&body, &boundary, &cuts);
            }

            /// Cut anywhere, a body scans as it does whole.
            #[test]
            fn multipart_pieces_scan_as_the_whole(
                (boundary, body, _) in form(),
                noise in prop::collection::vec(any::<u8>(), 0..4),
                at in any::<prop::sample::Index>(),
                cuts in prop::collection::vec(any::<usize>(), 0..8),
            ) {
                // Also bodies broken by a few stray bytes.
                let mut broken = body.clone();
                let at = at.index(broken.len() + 1);
                broken.splice(at..at, noise);
                for body in [body, broken] {
                    let whole = multipart(&body, &boundary, FIELD, true)
                        .map(|scan| (scan.token, scan.complete));
                    prop_assert_eq!(scan_in_pieces(&body, &boundary, &cuts), whole);
                }
            }

            #[test]
            fn multipart_finds_the_field_in_a_valid_form(
                (boundary, body, token) in form(),
                cuts in prop::collection::vec(any::<usize>(), 0..8),
            ) {
                prop_assert_eq!(
                    scan_in_pieces(&body, &boundary, &cuts),
                    Ok((token, true))
                );
            }

            /// Once the handler runs, only a part naming the field fails
            /// the body; whatever the files hold does not.
            #[test]
            fn a_watched_body_fails_only_on_a_late_field(
                (boundary, body, token) in form(),
                prefix in any::<prop::sample::Index>(),
                cuts in prop::collection::vec(any::<usize>(), 0..8),
            ) {
                let prefix = prefix.index(body.len() + 1);
                let mut scanner = MultipartScanner::new(&boundary, FIELD);
                scanner.feed(&body[..prefix]).expect("a valid form");
                let early = scanner.token().is_some() || scanner.in_field();
                scanner.watch();
                let mut cuts: Vec<usize> =
                    cuts.iter().map(|c| prefix + c % (body.len() - prefix + 1)).collect();
                cuts.sort_unstable();
                let mut from = prefix;
                let mut result = Ok(());
                for cut in cuts.into_iter().chain([body.len()]) {
                    result = result.and_then(|()| scanner.feed(&body[from..cut]));
                    from = cut;
                }
                if token.is_some() && !early {
                    prop_assert_eq!(result, Err(ScanError::Late));
                } else {
                    prop_assert_eq!(result, Ok(()));
                    prop_assert!(scanner.is_complete());
                }
            }
        }

        fn url_escape(value: &str) -> String {
            value
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect()
        }
    }
}
