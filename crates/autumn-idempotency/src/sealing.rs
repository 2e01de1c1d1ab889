//! Sealing what a record carries that must not be usable at rest:
//! [`RecordSealing`].
//!
//! A recorded response is kept for hours in a store that backups copy. Its
//! `Set-Cookie` values are live credentials (the session cookie), so they
//! are always sealed; its body is sealed too when the app asks
//! (`[security] encrypt_recorded_bodies`). A guard seals a record before
//! the store sees it and opens it before a replay; a record it cannot open
//! (its key rotated away) is refused with 409, never run again.

use std::sync::Arc;

use autumn_base::seal::{OpenError, SecretKeys};
use bytes::Bytes;
use http::{HeaderValue, header};

use crate::record::IdempotencyRecord;

const SET_COOKIE: &[u8] = b"set-cookie";
const BODY: &[u8] = b"body";

/// How the guards seal the records they write: with which keys, and whether
/// bodies too. Cheap to clone.
///
/// ```
/// use autumn_idempotency::RecordSealing;
/// use autumn_idempotency::seal::SecretKeys;
///
/// let keys = SecretKeys::new("a random secret of at least 32 bytes!!", &[] as &[&str])?;
/// let sealing = RecordSealing::new(keys).with_bodies(true);
/// assert!(sealing.seals_bodies());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct RecordSealing {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    keys: SecretKeys,
    bodies: bool,
}

impl Default for RecordSealing {
    /// `Set-Cookie` sealed with [`SecretKeys::for_this_process`]: what
    /// this process records, only this process can replay.
    fn default() -> Self {
        Self::new(SecretKeys::for_this_process())
    }
}

impl RecordSealing {
    /// `Set-Cookie` values sealed with `keys`; bodies kept as they are.
    pub fn new(keys: SecretKeys) -> Self {
        Self {
            inner: Arc::new(Inner {
                keys,
                bodies: false,
            }),
        }
    }

    /// Whether bodies are sealed too.
    #[must_use]
    pub fn with_bodies(self, bodies: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                keys: self.inner.keys.clone(),
                bodies,
            }),
        }
    }

    /// Whether bodies are sealed.
    pub fn seals_bodies(&self) -> bool {
        self.inner.bodies
    }

    /// `record` with its `Set-Cookie` values sealed, and its body when
    /// bodies are. A value already sealed stays as it is; a
    /// [marker](IdempotencyRecord::not_recorded) holds nothing to seal and
    /// comes back as it is.
    pub fn seal(&self, record: IdempotencyRecord) -> IdempotencyRecord {
        if record.is_not_recorded() {
            return record;
        }
        let keys = &self.inner.keys;
        let mut record = record;
        for (name, value) in record.headers_mut() {
            if *name == header::SET_COOKIE && !is_sealed(value) {
                let sealed = keys.seal_text(SET_COOKIE, value.as_bytes());
                // Sealed text is base64 after an ASCII prefix: always a
                // valid header value.
                if let Ok(sealed) = HeaderValue::try_from(sealed) {
                    *value = sealed;
                }
            }
        }
        if self.inner.bodies && !record.body_sealed() {
            let sealed = keys.seal(BODY, record.body());
            record = record.with_body(Bytes::from(sealed), true);
        }
        record
    }

    /// `record` as it was before [`seal`](Self::seal), ready to replay.
    /// A record that holds nothing sealed comes back as it is, at no cost;
    /// so does a [marker](IdempotencyRecord::not_recorded), whatever this
    /// app's keys, for the guard to answer it.
    ///
    /// # Errors
    ///
    /// [`OpenError`] when a value was sealed with a key this app does not
    /// have, or was altered: the record cannot be replayed.
    pub fn open(&self, record: IdempotencyRecord) -> Result<IdempotencyRecord, OpenError> {
        if record.is_not_recorded() {
            return Ok(record);
        }
        let keys = &self.inner.keys;
        let mut record = record;
        for (name, value) in record.headers_mut() {
            if *name != header::SET_COOKIE {
                continue;
            }
            let Ok(text) = value.to_str() else { continue };
            if let Some(opened) = keys.open_text(SET_COOKIE, text) {
                *value = HeaderValue::from_bytes(&opened?).map_err(|_| OpenError::Damaged)?;
            }
        }
        if record.body_sealed() {
            let opened = keys.open(BODY, record.body())?;
            record = record.with_body(Bytes::from(opened), false);
        }
        Ok(record)
    }
}

fn is_sealed(value: &HeaderValue) -> bool {
    value
        .as_bytes()
        .starts_with(autumn_base::seal::SEALED_TEXT_PREFIX.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, StatusCode};

    fn keys(secret: &str) -> SecretKeys {
        SecretKeys::new(secret, &[] as &[&str]).expect("a long secret")
    }

    fn record() -> IdempotencyRecord {
        IdempotencyRecord::new(
            StatusCode::CREATED,
            [
                (
                    header::SET_COOKIE,
                    HeaderValue::from_static("__Host-autumn_session=live-id; Secure; HttpOnly"),
                ),
                (
                    HeaderName::from_static("x-order"),
                    HeaderValue::from_static("7"),
                ),
            ],
            "order 7 for alice@example.com",
        )
    }

    #[test]
    fn a_sealed_record_keeps_no_cookie_and_opens_to_the_original() {
        let sealing = RecordSealing::new(keys("k".repeat(40).as_str()));
        let sealed = sealing.seal(record());
        let stored = String::from_utf8_lossy(&sealed.encode()).into_owned();
        assert!(!stored.contains("live-id"), "{stored}");
        // Only cookies are sealed unless bodies are asked for.
        assert!(stored.contains("alice@example.com"));
        assert!(stored.contains("x-order"));
        let decoded = IdempotencyRecord::decode(&sealed.encode()).expect("decodes");
        assert_eq!(sealing.open(decoded), Ok(record()));
    }

    #[test]
    fn bodies_are_sealed_when_asked_and_survive_the_codec() {
        let sealing = RecordSealing::new(keys("k".repeat(40).as_str())).with_bodies(true);
        let sealed = sealing.seal(record());
        let encoded = sealed.encode();
        assert!(!String::from_utf8_lossy(&encoded).contains("alice@example.com"));
        assert_eq!(encoded[0], 2, "a sealed body is written as version 2");
        let decoded = IdempotencyRecord::decode(&encoded).expect("decodes");
        assert!(decoded.body_sealed());
        assert_eq!(sealing.open(decoded), Ok(record()));
    }

    #[test]
    fn a_record_sealed_by_another_key_does_not_open() {
        let sealed = RecordSealing::new(keys("a".repeat(40).as_str())).seal(record());
        let other = RecordSealing::new(keys("b".repeat(40).as_str()));
        assert_eq!(other.open(sealed), Err(OpenError::UnknownKey));
    }

    #[test]
    fn a_marker_passes_sealing_and_opening_untouched() {
        let sealing = RecordSealing::new(keys("k".repeat(40).as_str())).with_bodies(true);
        let marker = IdempotencyRecord::not_recorded(StatusCode::OK);
        let sealed = sealing.seal(marker.clone());
        assert_eq!(sealed, marker, "nothing in a marker is sealed");
        let decoded = IdempotencyRecord::decode(&sealed.encode()).expect("decodes");
        // Any app opens it, whatever its keys: there is nothing to open.
        let other = RecordSealing::new(keys("b".repeat(40).as_str()));
        assert_eq!(other.open(decoded), Ok(marker));
    }

    #[test]
    fn sealing_twice_seals_once() {
        let sealing = RecordSealing::new(keys("k".repeat(40).as_str())).with_bodies(true);
        let twice = sealing.seal(sealing.seal(record()));
        assert_eq!(sealing.open(twice), Ok(record()));
    }
}
