//! Property tests for what a client or a store hands the crate: the
//! `Idempotency-Key` header and the record encoding. Any input, no panic;
//! what is valid comes back as it went in. Bounded case counts keep each
//! property well under two seconds in a debug build.

use autumn_idempotency::IdempotencyRecord;
use autumn_idempotency::key::{KeyError, MAX_KEY_LEN, parse_key};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn headers_with(values: &[HeaderValue]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for value in values {
        headers.append("idempotency-key", value.clone());
    }
    headers
}

/// A key as a client may write it: visible ASCII, 1 to 255 bytes.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[!-~]{1,255}",
        // Mostly the characters quoting treats specially.
        "[\"\\\\a-]{1,40}",
    ]
}

/// The draft's structured-field string for `key`.
fn quoted(key: &str) -> String {
    let mut out = String::from("\"");
    for c in key.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Any bytes a header value may hold (no control characters but tab).
fn header_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    // Control characters become the bytes quoting cares about.
    prop::collection::vec(any::<u8>(), 0..max).prop_map(|mut bytes| {
        for b in &mut bytes {
            if (*b < 0x20 && *b != b'\t') || *b == 0x7f {
                *b = if *b % 2 == 0 { b'"' } else { b'\\' };
            }
        }
        bytes
    })
}

fn record() -> impl Strategy<Value = IdempotencyRecord> {
    (
        100u16..=999,
        prop::collection::vec(("[a-z][a-z0-9-]{0,20}", header_bytes(40)), 0..6),
        prop::collection::vec(any::<u8>(), 0..256),
    )
        .prop_map(|(status, headers, body)| {
            let status = StatusCode::from_u16(status).expect("100 to 999");
            let headers = headers.into_iter().map(|(name, value)| {
                (
                    HeaderName::from_bytes(name.as_bytes()).expect("a lowercase token"),
                    HeaderValue::from_bytes(&value).expect("no control characters"),
                )
            });
            IdempotencyRecord::new(status, headers, body)
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_key_header_is_parsed_or_refused_without_panic(
        values in prop::collection::vec(header_bytes(300), 0..3),
    ) {
        let values: Vec<HeaderValue> = values
            .iter()
            .map(|v| HeaderValue::from_bytes(v).expect("no control characters"))
            .collect();
        match parse_key(&headers_with(&values)) {
            Ok(Some(key)) => {
                prop_assert_eq!(values.len(), 1);
                prop_assert!((1..=MAX_KEY_LEN).contains(&key.len()));
                prop_assert!(key.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{:?}", key);
            }
            Ok(None) => prop_assert!(values.is_empty()),
            Err(KeyError::Repeated) => prop_assert!(values.len() > 1),
            Err(_) => prop_assert_eq!(values.len(), 1),
        }
    }

    /// A bare key, with optional whitespace around it, is read as itself.
    #[test]
    fn a_bare_key_round_trips(key in key(), before in "[ \t]{0,2}", after in "[ \t]{0,2}") {
        prop_assume!(!key.starts_with('"'));
        let value = HeaderValue::from_str(&format!("{before}{key}{after}")).expect("visible");
        prop_assert_eq!(parse_key(&headers_with(&[value])), Ok(Some(key)));
    }

    /// A structured-field string is read as the key it quotes.
    #[test]
    fn a_quoted_key_round_trips(key in key()) {
        let value = HeaderValue::from_str(&quoted(&key)).expect("visible");
        prop_assert_eq!(parse_key(&headers_with(&[value])), Ok(Some(key)));
    }

    #[test]
    fn a_key_one_byte_too_long_is_refused(key in "[!-~]{256}") {
        prop_assume!(!key.starts_with('"'));
        let value = HeaderValue::from_str(&key).expect("visible");
        prop_assert_eq!(parse_key(&headers_with(&[value])), Err(KeyError::TooLong(256)));
    }

    #[test]
    fn a_record_round_trips(record in record()) {
        prop_assert_eq!(IdempotencyRecord::decode(&record.encode()).ok(), Some(record));
    }

    /// Whatever a store hands back, decoding answers: a record that
    /// encodes back to one that decodes the same, or an error.
    #[test]
    fn any_bytes_decode_or_are_refused_without_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        if let Ok(record) = IdempotencyRecord::decode(&bytes) {
            prop_assert_eq!(IdempotencyRecord::decode(&record.encode()).ok(), Some(record));
        }
    }

    /// A damaged record (truncated, a byte changed) is refused or read
    /// as some record, never a panic; a truncated one is always refused.
    #[test]
    fn a_damaged_record_is_refused_without_panic(
        record in record(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let encoded = record.encode();
        let cut = cut.index(encoded.len());
        prop_assert!(IdempotencyRecord::decode(&encoded[..cut]).is_err());
        let mut changed = encoded.clone();
        let at = flip.index(changed.len());
        changed[at] = byte;
        if let Ok(decoded) = IdempotencyRecord::decode(&changed) {
            prop_assert_eq!(IdempotencyRecord::decode(&decoded.encode()).ok(), Some(decoded));
        }
    }
}
