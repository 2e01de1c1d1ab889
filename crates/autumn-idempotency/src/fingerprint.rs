//! Fingerprints that look at a JSON body's content rather than its bytes.
//!
//! Today's fingerprint ([`crate::key::fingerprint`], version 1) hashes the
//! body's bytes, so two JSON bodies that differ only in key order or
//! whitespace, or in a field the client sets afresh on every try (a client
//! timestamp, a trace id), are different requests and the retry gets 422.
//! A route whose policy asks for a JSON fingerprint gets version 2 instead:
//!
//! - a JSON body (`application/json` or any `+json` type) is parsed and
//!   written out canonically, RFC 8785 style: object members sorted by their
//!   UTF-16 code units, no whitespace, integral numbers without a fraction,
//!   strings with the minimal escapes;
//! - the fields the route lists under `ignore` (JSON Pointers) are removed
//!   first, or only the fields listed under `only` are kept;
//! - a body that is not JSON, or does not parse, is hashed as bytes.
//!
//! The stored fingerprint says which version made it: version 1 is the bare
//! 32-byte digest records have always carried, version 2 starts with the
//! byte `2`. A record made before a route changed its policy (or before an
//! upgrade) is compared the way it was made, so a byte-identical retry of it
//! still replays. In the dev profile, a version 2 fingerprint also carries a
//! short hash of each field, so a 422 can name the first field that differs
//! (never its value).

use std::collections::HashMap;

use serde_json::Value;

use crate::key::{fingerprint_digest, hash_parts};

/// The first byte of a version 2 fingerprint. Version 1 has no tag: it is
/// a bare 32-byte digest.
const VERSION_2: u8 = 2;
/// The domain of a version 2 digest.
const DOMAIN_2: &str = "autumn.fingerprint.v2";
/// At most this many fields are kept to name a difference; a body with more
/// names one among the first.
const MAX_EXPLAINED_FIELDS: usize = 512;
/// Longer pointers are not kept to name a difference.
const MAX_EXPLAINED_POINTER: usize = 256;

/// Why a JSON Pointer in a fingerprint policy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PointerError {
    /// A non-empty pointer must start with `/`.
    #[error(
        "the JSON Pointer {0:?} must start with `/` (like \"/client_ts\"); \"\" is the whole body"
    )]
    NoLeadingSlash(String),
    /// `~` is only valid as `~0` (a `~`) or `~1` (a `/`).
    #[error(
        "the JSON Pointer {0:?} has a `~` not followed by 0 or 1; write `~0` for `~` and `~1` for `/`"
    )]
    BadEscape(String),
}

/// A parsed RFC 6901 JSON Pointer: its reference tokens, unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pointer {
    text: String,
    tokens: Vec<String>,
}

impl Pointer {
    /// The pointer as written.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Parses `text`, refusing what RFC 6901 does not allow.
    pub(crate) fn parse(text: &str) -> Result<Self, PointerError> {
        if text.is_empty() {
            return Ok(Self {
                text: String::new(),
                tokens: Vec::new(),
            });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PointerError::NoLeadingSlash(text.to_owned()));
        };
        let tokens = rest
            .split('/')
            .map(|token| unescape(token).ok_or_else(|| PointerError::BadEscape(text.to_owned())))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            text: text.to_owned(),
            tokens,
        })
    }
}

/// Checks `text` is a JSON Pointer a fingerprint policy accepts.
///
/// ```
/// use autumn_idempotency::fingerprint::check_pointer;
///
/// assert!(check_pointer("/client_ts").is_ok());
/// assert!(check_pointer("/a~1b/0").is_ok());
/// assert!(check_pointer("client_ts").is_err());
/// assert!(check_pointer("/a~2").is_err());
/// ```
///
/// # Errors
///
/// [`PointerError`] naming what is wrong.
pub fn check_pointer(text: &str) -> Result<(), PointerError> {
    Pointer::parse(text).map(|_| ())
}

fn unescape(token: &str) -> Option<String> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        match c {
            '~' => match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            },
            c => out.push(c),
        }
    }
    Some(out)
}

fn escape_into(out: &mut String, token: &str) {
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
}

/// Which fields of a JSON body a version 2 fingerprint covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JsonRule {
    /// Removed before hashing.
    pub(crate) ignore: Vec<Pointer>,
    /// When not empty, the only fields hashed.
    pub(crate) only: Vec<Pointer>,
    /// Keep a hash per field, to name the first that differs (dev profile).
    pub(crate) explain: bool,
}

/// The fingerprint to store for a request: version 1 without a rule,
/// version 2 with one.
pub(crate) fn fingerprint(
    rule: Option<&JsonRule>,
    method: &str,
    path: &str,
    content_type: &[u8],
    body: &[u8],
) -> Vec<u8> {
    match rule {
        None => fingerprint_digest(method, path, content_type, body).to_vec(),
        Some(rule) => v2(rule, method, path, content_type, body).encode(),
    }
}

/// How a retry compares with the fingerprint recorded for its key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Comparison {
    /// The same request: replay.
    Same,
    /// Another request; in the dev profile, the first field that differs
    /// when both were JSON.
    Differs(Option<String>),
}

/// Compares the request with `recorded`, in the version `recorded` was made
/// with, so a record from before a policy change is still matched right.
///
/// `current` is this request's [`fingerprint`] under today's rule: when the
/// record was made the same way (the usual replay), it is the answer and
/// nothing is hashed again.
pub(crate) fn compare(
    recorded: &[u8],
    current: &[u8],
    rule: Option<&JsonRule>,
    method: &str,
    path: &str,
    content_type: &[u8],
    body: &[u8],
) -> Comparison {
    if recorded == current {
        return Comparison::Same;
    }
    match recorded.split_first() {
        Some((&VERSION_2, rest)) if rest.len() >= 32 => {
            // A route that dropped its JSON rule still reads its old records
            // as JSON, with no field left out.
            let plain = JsonRule::default();
            let rule = rule.unwrap_or(&plain);
            let now = v2(rule, method, path, content_type, body);
            if now.digest[..] == rest[..32] {
                return Comparison::Same;
            }
            let pointer = if rule.explain {
                first_difference(&now.fields, &rest[32..])
            } else {
                None
            };
            Comparison::Differs(pointer)
        }
        _ => {
            // Version 1: the bare digest every record made before version 2
            // carries.
            let now = fingerprint_digest(method, path, content_type, body);
            if recorded == now {
                Comparison::Same
            } else {
                Comparison::Differs(None)
            }
        }
    }
}

/// A version 2 fingerprint before encoding.
struct V2 {
    digest: [u8; 32],
    /// Each field's pointer and a short hash of its value, in canonical
    /// order; empty unless the rule explains.
    fields: Vec<(String, [u8; 8])>,
}

impl V2 {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(33 + self.fields.len() * 24);
        out.push(VERSION_2);
        out.extend_from_slice(&self.digest);
        for (pointer, hash) in &self.fields {
            // Bounded by MAX_EXPLAINED_POINTER, so it fits two bytes.
            let len = u16::try_from(pointer.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(pointer.as_bytes());
            out.extend_from_slice(hash);
        }
        out
    }
}

fn is_json(content_type: &[u8]) -> bool {
    let essence = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    essence.eq_ignore_ascii_case(b"application/json")
        || (essence.len() > 5 && essence[essence.len() - 5..].eq_ignore_ascii_case(b"+json"))
}

fn v2(rule: &JsonRule, method: &str, path: &str, content_type: &[u8], body: &[u8]) -> V2 {
    let path = &*crate::key::canonical_target(path);
    let parsed = is_json(content_type)
        .then(|| serde_json::from_slice::<Value>(body).ok())
        .flatten();
    let Some(mut value) = parsed else {
        let digest = hash_parts(
            DOMAIN_2,
            &[
                method.as_bytes(),
                path.as_bytes(),
                content_type,
                b"bytes",
                body,
            ],
        );
        return V2 {
            digest,
            fields: Vec::new(),
        };
    };
    let mut canonical = Vec::with_capacity(body.len());
    let mut fields = Vec::new();
    let fields_out = rule.explain.then_some(&mut fields);
    if rule.only.is_empty() {
        for pointer in &rule.ignore {
            remove(&mut value, &pointer.tokens);
        }
        let mut at = String::new();
        write_canonical(&value, &mut canonical, &mut at, fields_out);
    } else {
        // Each kept field as `pointer NUL value`, in the order the rule
        // lists them; a missing one as the pointer alone.
        let mut fields_out = fields_out;
        for pointer in &rule.only {
            canonical.extend_from_slice(pointer.text.as_bytes());
            canonical.push(0);
            let start = canonical.len();
            match value.pointer(&pointer.text) {
                Some(found) => write_canonical(found, &mut canonical, &mut String::new(), None),
                None => canonical.push(0),
            }
            if let Some(fields) = fields_out.as_deref_mut() {
                fields.push((pointer.text.clone(), short_hash(&canonical[start..])));
            }
            canonical.push(0);
        }
    }
    let digest = hash_parts(
        DOMAIN_2,
        &[
            method.as_bytes(),
            path.as_bytes(),
            content_type,
            b"json",
            &canonical,
        ],
    );
    V2 { digest, fields }
}

/// Removes what `tokens` points at, if it is there.
fn remove(value: &mut Value, tokens: &[String]) {
    let Some((last, parents)) = tokens.split_last() else {
        // The whole body: nothing left to compare.
        *value = Value::Null;
        return;
    };
    let mut at = value;
    for token in parents {
        let next = match at {
            Value::Object(map) => map.get_mut(token),
            Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        };
        match next {
            Some(next) => at = next,
            None => return,
        }
    }
    match at {
        Value::Object(map) => {
            map.remove(last);
        }
        Value::Array(items) => {
            if let Some(i) = last.parse::<usize>().ok().filter(|&i| i < items.len()) {
                items.remove(i);
            }
        }
        _ => {}
    }
}

fn short_hash(bytes: &[u8]) -> [u8; 8] {
    let digest = hash_parts("autumn.fingerprint.field", &[bytes]);
    let mut short = [0u8; 8];
    short.copy_from_slice(&digest[..8]);
    short
}

/// Writes `value` canonically; with `fields`, also each leaf's pointer and
/// short hash (up to [`MAX_EXPLAINED_FIELDS`]).
fn write_canonical(
    value: &Value,
    out: &mut Vec<u8>,
    at: &mut String,
    mut fields: Option<&mut Vec<(String, [u8; 8])>>,
) {
    let start = out.len();
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => write_number(number, out),
        Value::String(text) => write_string(text, out),
        Value::Array(items) if !items.is_empty() => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let len = at.len();
                at.push('/');
                at.push_str(&i.to_string());
                write_canonical(item, out, at, fields.as_deref_mut());
                at.truncate(len);
            }
            out.push(b']');
            return;
        }
        Value::Object(map) if !map.is_empty() => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            // RFC 8785 orders members by the UTF-16 code units of their names.
            members.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push(b'{');
            for (i, (name, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(name, out);
                out.push(b':');
                let len = at.len();
                at.push('/');
                escape_into(at, name);
                write_canonical(member, out, at, fields.as_deref_mut());
                at.truncate(len);
            }
            out.push(b'}');
            return;
        }
        Value::Array(_) => out.extend_from_slice(b"[]"),
        Value::Object(_) => out.extend_from_slice(b"{}"),
    }
    if let Some(fields) = fields
        && fields.len() < MAX_EXPLAINED_FIELDS
        && at.len() <= MAX_EXPLAINED_POINTER
    {
        fields.push((at.clone(), short_hash(&out[start..])));
    }
}

fn write_number(number: &serde_json::Number, out: &mut Vec<u8>) {
    if number.is_i64() || number.is_u64() {
        out.extend_from_slice(number.to_string().as_bytes());
        return;
    }
    match number.as_f64() {
        // An integral value is written without a fraction (`1.0` is `1`),
        // as ECMAScript writes numbers below 1e21.
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the value is integral and below 1e21, so it fits an i128"
        )]
        Some(float) if float.fract() == 0.0 && float.abs() < 1e21 => {
            out.extend_from_slice((float as i128).to_string().as_bytes());
        }
        _ => out.extend_from_slice(number.to_string().as_bytes()),
    }
}

fn write_string(text: &str, out: &mut Vec<u8>) {
    // serde_json escapes exactly what JSON requires (quote, backslash,
    // control characters), as RFC 8785 does.
    let _written = serde_json::to_writer(&mut *out, text).is_ok();
}

/// The first field whose hash differs between `now` and the fields stored
/// after a version 2 digest, or that only one of them has.
fn first_difference(now: &[(String, [u8; 8])], stored: &[u8]) -> Option<String> {
    let recorded = decode_fields(stored)?;
    let by_pointer: HashMap<&str, &[u8]> = recorded
        .iter()
        .map(|(pointer, hash)| (*pointer, *hash))
        .collect();
    if let Some((pointer, _)) = now
        .iter()
        .find(|(pointer, hash)| by_pointer.get(pointer.as_str()) != Some(&&hash[..]))
    {
        return Some(pointer.clone());
    }
    let current: HashMap<&str, ()> = now.iter().map(|(p, _)| (p.as_str(), ())).collect();
    recorded
        .iter()
        .find(|(pointer, _)| !current.contains_key(pointer))
        .map(|(pointer, _)| (*pointer).to_owned())
}

fn decode_fields(mut bytes: &[u8]) -> Option<Vec<(&str, &[u8])>> {
    let mut fields = Vec::new();
    while let [a, b, rest @ ..] = bytes {
        let len = usize::from(u16::from_be_bytes([*a, *b]));
        let pointer = std::str::from_utf8(rest.get(..len)?).ok()?;
        let hash = rest.get(len..len + 8)?;
        fields.push((pointer, hash));
        bytes = &rest[len + 8..];
    }
    bytes.is_empty().then_some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &[u8] = b"application/json";

    fn rule(ignore: &[&str], only: &[&str], explain: bool) -> JsonRule {
        let parse = |list: &[&str]| {
            list.iter()
                .map(|p| Pointer::parse(p).expect("pointer"))
                .collect()
        };
        JsonRule {
            ignore: parse(ignore),
            only: parse(only),
            explain,
        }
    }

    fn fp(rule: &JsonRule, body: &str) -> Vec<u8> {
        fingerprint(Some(rule), "POST", "/p", JSON, body.as_bytes())
    }

    /// Compares as the layer does: with this request's fingerprint under
    /// `rule` at hand.
    fn cmp(recorded: &[u8], rule: &JsonRule, body: &str) -> Comparison {
        let current = fp(rule, body);
        compare(
            recorded,
            &current,
            Some(rule),
            "POST",
            "/p",
            JSON,
            body.as_bytes(),
        )
    }

    #[test]
    fn key_order_whitespace_and_integral_floats_do_not_matter() {
        let r = rule(&[], &[], false);
        let a = fp(&r, r#"{"b":[1,2],"a":{"y":1.0,"x":"é"}}"#);
        let b = fp(
            &r,
            "{ \"a\" : {\"x\":\"\\u00e9\", \"y\":1}, \"b\":[1, 2] }\n",
        );
        assert_eq!(a, b);
        assert_eq!(a[0], VERSION_2);
        assert_ne!(a, fp(&r, r#"{"b":[2,1],"a":{"y":1,"x":"é"}}"#));
        assert_eq!(
            cmp(&a, &r, r#"{"a":{"x":"é","y":1},"b":[1,2]}"#),
            Comparison::Same
        );
    }

    #[test]
    fn members_sort_by_utf16_code_units() {
        let mut out = Vec::new();
        let value: Value =
            serde_json::from_str(r#"{"\ud83d\ude00":1,"\ufb01":2,"a":3}"#).expect("json");
        write_canonical(&value, &mut out, &mut String::new(), None);
        // U+1F600 is D83D DE00 in UTF-16, below U+FB01.
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "{\"a\":3,\"\u{1F600}\":1,\"\u{FB01}\":2}"
        );
    }

    #[test]
    fn ignored_fields_do_not_count_and_only_keeps_what_is_listed() {
        let ignore = rule(&["/client_ts", "/meta/trace~1id"], &[], false);
        assert_eq!(
            fp(
                &ignore,
                r#"{"amount":5,"client_ts":1,"meta":{"trace/id":"a"}}"#
            ),
            fp(
                &ignore,
                r#"{"amount":5,"client_ts":2,"meta":{"trace/id":"b"}}"#
            ),
        );
        assert_ne!(
            fp(&ignore, r#"{"amount":5,"client_ts":1}"#),
            fp(&ignore, r#"{"amount":6,"client_ts":1}"#),
        );
        let only = rule(&[], &["/amount", "/to"], false);
        assert_eq!(
            fp(&only, r#"{"amount":5,"to":"x","note":"a"}"#),
            fp(&only, r#"{"note":"b","to":"x","amount":5.0}"#),
        );
        assert_ne!(
            fp(&only, r#"{"amount":5}"#),
            fp(&only, r#"{"amount":5,"to":null}"#)
        );
    }

    #[test]
    fn a_body_that_is_not_json_is_hashed_as_bytes() {
        let r = rule(&[], &[], true);
        let text = fingerprint(Some(&r), "POST", "/p", b"text/plain", b"{\"a\":1}");
        let json = fingerprint(Some(&r), "POST", "/p", JSON, b"{\"a\":1}");
        assert_ne!(text, json);
        assert_eq!(text.len(), 33, "no fields kept for bytes");
        let broken = fp(&r, "{\"a\":");
        assert_eq!(cmp(&broken, &r, "{\"a\":"), Comparison::Same);
        assert_eq!(cmp(&broken, &r, "{\"a\": "), Comparison::Differs(None));
        let problem = fingerprint(Some(&r), "POST", "/p", b"application/problem+json", b"{}");
        assert_eq!(
            problem.len(),
            33 + 2 + 8,
            "`+json` is JSON: one field, the empty body"
        );
    }

    #[test]
    fn a_version_1_record_is_compared_as_bytes() {
        let r = rule(&["/client_ts"], &[], true);
        let v1 = crate::key::fingerprint("POST", "/p", JSON, br#"{"a":1,"client_ts":1}"#);
        assert_eq!(v1.len(), 32);
        assert_eq!(cmp(&v1, &r, r#"{"a":1,"client_ts":1}"#), Comparison::Same);
        assert_eq!(
            cmp(&v1, &r, r#"{"a":1,"client_ts":2}"#),
            Comparison::Differs(None)
        );
        // And without a rule, version 2 records are still read as JSON.
        let v2 = fp(&rule(&[], &[], false), r#"{"a":1}"#);
        assert_eq!(
            compare(
                &v2,
                &fingerprint(None, "POST", "/p", JSON, b"{ \"a\": 1 }"),
                None,
                "POST",
                "/p",
                JSON,
                b"{ \"a\": 1 }"
            ),
            Comparison::Same
        );
    }

    #[test]
    fn explaining_names_the_first_differing_field_and_no_value() {
        let r = rule(&[], &[], true);
        let recorded = fp(&r, r#"{"to":"acct-1","amount":5,"items":[{"sku":"a"}]}"#);
        let differs = |body: &str| match cmp(&recorded, &r, body) {
            Comparison::Differs(pointer) => pointer,
            Comparison::Same => panic!("expected a difference for {body}"),
        };
        assert_eq!(
            differs(r#"{"to":"acct-1","amount":6,"items":[{"sku":"a"}]}"#).as_deref(),
            Some("/amount")
        );
        assert_eq!(
            differs(r#"{"to":"acct-1","amount":5,"items":[{"sku":"b"}]}"#).as_deref(),
            Some("/items/0/sku")
        );
        assert_eq!(
            differs(r#"{"to":"acct-1","amount":5}"#).as_deref(),
            Some("/items/0/sku")
        );
        let a_over_b = r#"{"to":"acct-1","amount":5,"items":[{"sku":"a"}],"a/b":1}"#;
        assert_eq!(differs(a_over_b).as_deref(), Some("/a~1b"));
        // Without explaining, nothing but the digest is kept.
        let quiet = fp(&rule(&[], &[], false), r#"{"amount":5}"#);
        assert_eq!(quiet.len(), 33);
        assert_eq!(
            cmp(&quiet, &rule(&[], &[], false), r#"{"amount":6}"#),
            Comparison::Differs(None)
        );
    }

    #[test]
    fn pointers_are_checked() {
        assert_eq!(
            Pointer::parse("a"),
            Err(PointerError::NoLeadingSlash("a".into()))
        );
        assert_eq!(
            Pointer::parse("/a~"),
            Err(PointerError::BadEscape("/a~".into()))
        );
        let p = Pointer::parse("/a~1b/~0c/0").expect("pointer");
        assert_eq!(p.tokens, ["a/b", "~c", "0"]);
        assert!(Pointer::parse("").expect("whole body").tokens.is_empty());
    }

    #[test]
    fn a_corrupt_field_list_names_nothing() {
        let r = rule(&[], &[], true);
        let mut recorded = fp(&r, r#"{"a":1}"#);
        recorded.push(9);
        assert_eq!(cmp(&recorded, &r, r#"{"a":2}"#), Comparison::Differs(None));
    }
}
