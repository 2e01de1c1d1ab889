//! Sealing secrets before a store keeps them: [`SecretKeys`].
//!
//! A recorded response can carry a live credential (the session's
//! `Set-Cookie`) or personal data (its body). Stores keep records for hours,
//! in Redis or a database table that backups copy, so what they keep must
//! not be usable by whoever reads a dump. A sealed value is encrypted and
//! authenticated (AES-256-GCM-SIV, RFC 8452, a random nonce per value)
//! under a key derived from the app's `[security] secret_key`; keys retired
//! by a rotation still open what they sealed. GCM-SIV, because it resists
//! nonce misuse: should two random nonces ever repeat, all that leaks is
//! whether the two values were equal. It runs on the CPU's AES
//! instructions, a fraction of a microsecond for a cookie.
//!
//! ```
//! use autumn_base::seal::SecretKeys;
//!
//! let keys = SecretKeys::new("a random secret of at least 32 bytes!!", &[] as &[&str])?;
//! let sealed = keys.seal_text(b"set-cookie", b"sid=abc; Secure; HttpOnly");
//! assert!(!sealed.contains("sid=abc"));
//! assert_eq!(
//!     keys.open_text(b"set-cookie", &sealed).unwrap()?,
//!     b"sid=abc; Secure; HttpOnly"
//! );
//!
//! // After a rotation the old key still opens what it sealed.
//! let rotated = SecretKeys::new(
//!     "the next random secret, 32 bytes at least",
//!     &["a random secret of at least 32 bytes!!"],
//! )?;
//! assert!(rotated.open_text(b"set-cookie", &sealed).unwrap().is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::{Arc, OnceLock};

use aes_gcm_siv::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm_siv::{Aes256GcmSiv, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// The shortest secret accepted, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

/// What starts the text form of a sealed value ([`SecretKeys::seal_text`]).
/// No `Set-Cookie` value can start with it (a cookie name cannot hold `:`).
pub const SEALED_TEXT_PREFIX: &str = "autumn-sealed:v1:";

/// The layout's version, the first byte of a sealed value.
const VERSION: u8 = 1;
const ID_LEN: usize = 4;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = 1 + ID_LEN + NONCE_LEN;

/// The keys that seal and open: the current one, and the ones a rotation
/// retired. Cheap to clone.
#[derive(Clone)]
pub struct SecretKeys {
    current: Arc<Key>,
    old: Arc<[Key]>,
}

struct Key {
    /// Names the key inside what it seals, so opening picks the right key
    /// without trying each. Derived from the secret, and useless without it.
    id: [u8; ID_LEN],
    cipher: Aes256GcmSiv,
}

impl Key {
    fn from_secret(secret: &[u8]) -> Self {
        let derive = |purpose: &[u8]| {
            let mut hash = Sha256::new();
            hash.update(purpose);
            hash.update((secret.len() as u64).to_be_bytes());
            hash.update(secret);
            hash.finalize()
        };
        let material = derive(b"autumn-web seal key v1\0");
        let id = derive(b"autumn-web seal key id v1\0");
        let mut key_id = [0; ID_LEN];
        key_id.copy_from_slice(&id[..ID_LEN]);
        Self {
            id: key_id,
            cipher: Aes256GcmSiv::new(&material),
        }
    }
}

/// Why a secret key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretKeyError {
    /// Shorter than [`MIN_SECRET_LEN`] bytes.
    #[error(
        "is {len} bytes long; it must be at least {MIN_SECRET_LEN} random bytes (for example the output of `openssl rand -base64 48`)"
    )]
    TooShort {
        /// The length given.
        len: usize,
    },
}

/// Why a sealed value could not be opened. Either way the value is not
/// usable: a guard treats its record as one it cannot replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Sealed with a key this app does not have: rotated away, or made by
    /// another app or process.
    #[error(
        "it was sealed with a secret key this app does not have (set the key it was sealed with in security.old_secret_keys)"
    )]
    UnknownKey,
    /// Truncated, altered, or sealed for another purpose.
    #[error("the sealed value is damaged or was sealed for another purpose")]
    Damaged,
}

impl SecretKeys {
    /// Keys from the app's secret and the secrets a rotation retired.
    ///
    /// # Errors
    ///
    /// [`SecretKeyError::TooShort`] for a secret under [`MIN_SECRET_LEN`]
    /// bytes, current or old.
    pub fn new<S: AsRef<str>>(current: &str, old: &[S]) -> Result<Self, SecretKeyError> {
        let checked = |secret: &str| {
            if secret.len() < MIN_SECRET_LEN {
                Err(SecretKeyError::TooShort { len: secret.len() })
            } else {
                Ok(Key::from_secret(secret.as_bytes()))
            }
        };
        let current = checked(current)?;
        let old = old
            .iter()
            .map(|secret| checked(secret.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            current: Arc::new(current),
            old: old.into(),
        })
    }

    /// A key made at random for this process, the same on every call: what
    /// it seals opens only here, until the process ends. For an app given
    /// no secret outside production, where records are not shared.
    pub fn for_this_process() -> Self {
        static KEYS: OnceLock<SecretKeys> = OnceLock::new();
        KEYS.get_or_init(|| {
            let secret = Aes256GcmSiv::generate_key(&mut OsRng);
            Self {
                current: Arc::new(Key::from_secret(&secret)),
                old: Arc::from([]),
            }
        })
        .clone()
    }

    /// `plaintext`, encrypted and authenticated under the current key, bound
    /// to `purpose` (a value sealed for one purpose does not open for
    /// another).
    pub fn seal(&self, purpose: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let key = &self.current;
        let nonce = Aes256GcmSiv::generate_nonce(&mut OsRng);
        let mut out = Vec::with_capacity(HEADER_LEN + plaintext.len() + TAG_LEN);
        out.push(VERSION);
        out.extend_from_slice(&key.id);
        out.extend_from_slice(&nonce);
        let aad = aad(&out[..1 + ID_LEN], purpose);
        // Encryption fails only past the cipher's length limit (64 GiB),
        // far beyond any record.
        let sealed = key
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .unwrap_or_default();
        out.extend_from_slice(&sealed);
        out
    }

    /// Opens what [`seal`](Self::seal) made for `purpose`, with the current
    /// key or an old one.
    ///
    /// # Errors
    ///
    /// [`OpenError::UnknownKey`] when no key of this app sealed it,
    /// [`OpenError::Damaged`] when it was altered or sealed for another
    /// purpose.
    pub fn open(&self, purpose: &[u8], sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
        if sealed.len() < HEADER_LEN + TAG_LEN || sealed[0] != VERSION {
            return Err(OpenError::Damaged);
        }
        let id = &sealed[1..=ID_LEN];
        let key = std::iter::once(&*self.current)
            .chain(self.old.iter())
            .find(|key| key.id == id)
            .ok_or(OpenError::UnknownKey)?;
        let nonce = Nonce::from_slice(&sealed[1 + ID_LEN..HEADER_LEN]);
        let aad = aad(&sealed[..1 + ID_LEN], purpose);
        key.cipher
            .decrypt(
                nonce,
                Payload {
                    msg: &sealed[HEADER_LEN..],
                    aad: &aad,
                },
            )
            .map_err(|_| OpenError::Damaged)
    }

    /// [`seal`](Self::seal) as text that fits in a header value:
    /// [`SEALED_TEXT_PREFIX`] and URL-safe base64.
    pub fn seal_text(&self, purpose: &[u8], plaintext: &[u8]) -> String {
        let sealed = self.seal(purpose, plaintext);
        let mut out =
            String::with_capacity(SEALED_TEXT_PREFIX.len() + sealed.len().div_ceil(3) * 4);
        out.push_str(SEALED_TEXT_PREFIX);
        URL_SAFE_NO_PAD.encode_string(&sealed, &mut out);
        out
    }

    /// Opens what [`seal_text`](Self::seal_text) made; `None` when `text`
    /// is not sealed text at all.
    pub fn open_text(&self, purpose: &[u8], text: &str) -> Option<Result<Vec<u8>, OpenError>> {
        let encoded = text.strip_prefix(SEALED_TEXT_PREFIX)?;
        Some(match URL_SAFE_NO_PAD.decode(encoded) {
            Ok(sealed) => self.open(purpose, &sealed),
            Err(_) => Err(OpenError::Damaged),
        })
    }
}

/// What a sealed value is bound to besides its key: its layout and key id,
/// and its purpose.
fn aad(header: &[u8], purpose: &[u8]) -> Vec<u8> {
    [header, purpose].concat()
}

impl std::fmt::Debug for SecretKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Key ids only: they name keys without revealing them.
        let hex = |key: &Key| {
            key.id
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect::<String>()
        };
        f.debug_struct("SecretKeys")
            .field("current", &hex(&self.current))
            .field("old", &self.old.iter().map(hex).collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef-current";
    const RETIRED: &str = "0123456789abcdef0123456789abcdef-retired";

    fn keys() -> SecretKeys {
        SecretKeys::new(SECRET, &[] as &[&str]).expect("a long secret")
    }

    #[test]
    fn a_sealed_value_hides_its_plaintext_and_opens_again() {
        let sealed = keys().seal(b"set-cookie", b"sid=secret-session-id");
        assert!(
            !sealed
                .windows(b"secret-session-id".len())
                .any(|w| w == b"secret-session-id")
        );
        assert_eq!(
            keys().open(b"set-cookie", &sealed),
            Ok(b"sid=secret-session-id".to_vec())
        );
    }

    #[test]
    fn the_same_plaintext_seals_differently_each_time() {
        assert_ne!(keys().seal(b"p", b"same"), keys().seal(b"p", b"same"));
    }

    #[test]
    fn a_value_sealed_for_one_purpose_does_not_open_for_another() {
        let sealed = keys().seal(b"set-cookie", b"sid=1");
        assert_eq!(keys().open(b"body", &sealed), Err(OpenError::Damaged));
    }

    #[test]
    fn an_altered_value_does_not_open() {
        let mut sealed = keys().seal(b"p", b"sid=1");
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        assert_eq!(keys().open(b"p", &sealed), Err(OpenError::Damaged));
        assert_eq!(keys().open(b"p", &sealed[..10]), Err(OpenError::Damaged));
    }

    #[test]
    fn a_retired_key_opens_what_it_sealed_and_an_unknown_key_does_not() {
        let old = SecretKeys::new(RETIRED, &[] as &[&str]).expect("long");
        let sealed = old.seal(b"p", b"sid=1");
        let rotated = SecretKeys::new(SECRET, &[RETIRED]).expect("long");
        assert_eq!(rotated.open(b"p", &sealed), Ok(b"sid=1".to_vec()));
        assert_eq!(keys().open(b"p", &sealed), Err(OpenError::UnknownKey));
        assert_eq!(
            SecretKeys::for_this_process().open(b"p", &sealed),
            Err(OpenError::UnknownKey)
        );
    }

    #[test]
    fn a_short_secret_is_refused_current_or_old() {
        assert_eq!(
            SecretKeys::new("short", &[] as &[&str]).err(),
            Some(SecretKeyError::TooShort { len: 5 })
        );
        assert_eq!(
            SecretKeys::new(SECRET, &["short"]).err(),
            Some(SecretKeyError::TooShort { len: 5 })
        );
    }

    #[test]
    fn text_that_is_not_sealed_is_told_apart() {
        assert!(keys().open_text(b"p", "sid=1; Secure").is_none());
        assert_eq!(
            keys().open_text(b"p", "autumn-sealed:v1:!!"),
            Some(Err(OpenError::Damaged))
        );
    }

    #[test]
    fn debug_names_keys_without_revealing_them() {
        let shown = format!("{:?}", SecretKeys::new(SECRET, &[RETIRED]).expect("long"));
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
        assert!(shown.starts_with("SecretKeys { current: \""), "{shown}");
    }
}
