//! What the memory store's tables are keyed by: 16 bytes per storage key,
//! and a 64-bit tag per owner.
//!
//! A storage key the framework makes (`idem:v1:` or `tok:v1:` and the
//! SHA-256 of what it names, in hex) is already a digest nobody can aim:
//! its first 128 bits, put through a keyed permutation, are its map key.
//! Hashing the 72-byte text again with two keyed SipHashes cost about
//! 1,000 instructions on every keyed request. Any other text (a store
//! called directly by an app) still gets the two SipHashes.

use std::hash::{BuildHasher, RandomState};

/// What a table is keyed by. Its first eight bytes are the table's hash;
/// the ninth picks the shard.
pub(super) type MapKey = [u8; 16];

/// The secrets a store's map keys are made with, drawn for each store.
pub(super) struct MapKeys {
    text: (RandomState, RandomState),
    /// Round keys of the permutation; the multipliers are odd, so never 0.
    rounds: [u64; 4],
}

impl MapKeys {
    pub(super) fn new() -> Self {
        let text = (RandomState::new(), RandomState::new());
        // Four more values from the same random source as the SipHash keys.
        let draw = |n: u64| RandomState::new().hash_one(n);
        Self {
            text,
            rounds: [draw(0), draw(1) | 1, draw(2), draw(3) | 1],
        }
    }

    /// The map key of `key`.
    pub(super) fn of(&self, key: &str) -> MapKey {
        match framework_digest(key) {
            Some((tag, high, low)) => self.permute(high ^ tag, low),
            None => {
                let mut out = [0; 16];
                out[..8].copy_from_slice(&self.text.0.hash_one(key).to_le_bytes());
                out[8..].copy_from_slice(&self.text.1.hash_one(key).to_le_bytes());
                out
            }
        }
    }

    /// Two Feistel rounds: a bijection on 128 bits, so distinct digests keep
    /// distinct map keys, whose every output bit the secret round keys
    /// scatter, so a client who knows its digests cannot aim them at one
    /// bucket of the table.
    fn permute(&self, high: u64, low: u64) -> MapKey {
        let [k0, k1, k2, k3] = self.rounds;
        let left = high ^ fold(low ^ k0, k1);
        let right = low ^ fold(left ^ k2, k3);
        let mut out = [0; 16];
        out[..8].copy_from_slice(&right.to_le_bytes());
        out[8..].copy_from_slice(&left.to_le_bytes());
        out
    }
}

/// The 128-bit product of `a` and `b`, its halves folded together.
fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    // Truncation wanted: the low half, then the high half.
    #[expect(clippy::cast_possible_truncation, reason = "the two halves")]
    let (low, high) = (product as u64, (product >> 64) as u64);
    low ^ high
}

/// The kind of a framework storage key and the first 128 bits of its
/// digest; `None` for any other text.
fn framework_digest(key: &str) -> Option<(u64, u64, u64)> {
    // Distinct per prefix, so the same digest under two prefixes (only a
    // SHA-256 collision makes one) would still give two map keys.
    const IDEMPOTENCY: u64 = 0x6964_656d_3a76_313a; // "idem:v1:"
    const SUBMIT_TOKEN: u64 = 0x746f_6b3a_7631_3a00; // "tok:v1:"
    let (tag, hex) = if let Some(hex) = key.strip_prefix("idem:v1:") {
        (IDEMPOTENCY, hex)
    } else if let Some(hex) = key.strip_prefix("tok:v1:") {
        (SUBMIT_TOKEN, hex)
    } else {
        return None;
    };
    let hex: &[u8; 64] = hex.as_bytes().try_into().ok()?;
    // One pass, no branch per digit: a digit that is none sets the high
    // bit of `bad`.
    let mut bad = 0_u8;
    let mut words = [0_u64; 2];
    for (word, digits) in words.iter_mut().zip(hex[..32].chunks_exact(16)) {
        for digit in digits {
            let value = NIBBLES[usize::from(*digit)];
            bad |= value;
            *word = *word << 4 | u64::from(value & 0x0f);
        }
    }
    for digit in &hex[32..] {
        bad |= NIBBLES[usize::from(*digit)];
    }
    (bad & 0x80 == 0).then_some((tag, words[0], words[1]))
}

/// Each byte's value as a lowercase hex digit (what `prefixed_hex`
/// writes), or `0x80` for a byte that is none.
const NIBBLES: [u8; 256] = {
    let mut table = [0x80_u8; 256];
    let mut digit = 0;
    while digit < 16 {
        let ascii = if digit < 10 {
            b'0' + digit
        } else {
            b'a' + digit - 10
        };
        table[ascii as usize] = digit;
        digit += 1;
    }
    table
};

/// Owners are compared by a 64-bit tag: owner ids are random and made by
/// the server, never by a client, so a collision is not something anyone
/// can aim for, and a fast unkeyed hash does; the store keeps no string per
/// lock or record.
pub(super) fn owner_tag(owner: &str) -> u64 {
    const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
    let bytes = owner.as_bytes();
    let mut chunks = bytes.chunks_exact(8);
    let mut tag = fold(SEED ^ bytes.len() as u64, SEED);
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        tag = fold(tag ^ u64::from_le_bytes(word), SEED);
    }
    let mut last = [0; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    fold(tag ^ u64::from_le_bytes(last), SEED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::storage_key;

    #[test]
    fn framework_keys_use_their_digest_and_other_text_is_hashed() {
        let keys = MapKeys::new();
        let key = storage_key("POST", "/orders", b"scope", "order-1");
        assert!(framework_digest(&key).is_some(), "{key}");
        assert_eq!(keys.of(&key), keys.of(&key));
        // The same digest under the other prefix, in capitals, or cut short
        // is another key.
        let hex = key.trim_start_matches("idem:v1:");
        let others = [
            format!("tok:v1:{hex}"),
            format!("idem:v1:{}", hex.to_uppercase()),
            format!("idem:v1:{}", &hex[..63]),
            "an app's own key".to_owned(),
        ];
        for other in &others {
            assert_ne!(keys.of(other), keys.of(&key), "{other}");
        }
        assert!(framework_digest(&others[1]).is_none());
        assert!(framework_digest(&others[2]).is_none());
        // Two stores draw their own secrets.
        assert_ne!(MapKeys::new().of(&key), keys.of(&key));
    }

    #[test]
    fn distinct_digests_keep_distinct_map_keys() {
        let keys = MapKeys::new();
        let mut seen = std::collections::HashSet::new();
        let mut buckets = std::collections::HashSet::new();
        for n in 0..20_000 {
            let map_key = keys.of(&storage_key("POST", "/orders", b"", &n.to_string()));
            assert!(seen.insert(map_key));
            buckets.insert(map_key[0]);
        }
        // The hash byte the table reads spreads over every value.
        assert_eq!(buckets.len(), 256);
        // Digests that differ in one bit only, as a client could pick them
        // if it could choose digests, still land apart.
        let base = "0".repeat(64);
        let mut low_bytes = std::collections::HashSet::new();
        for bit in 0..128 {
            let mut digits = base.clone().into_bytes();
            digits[bit / 4] = b"1248"[bit % 4];
            let key = format!("idem:v1:{}", String::from_utf8(digits).expect("hex"));
            low_bytes.insert(keys.of(&key)[..2].to_vec());
        }
        assert!(low_bytes.len() > 120, "{} of 128", low_bytes.len());
    }

    #[test]
    fn owner_tags_tell_owners_apart() {
        let owners = ["", "a", "abcdefgh", "abcdefghi", "abcdefgh\0"];
        let tags: std::collections::HashSet<u64> = owners.iter().map(|o| owner_tag(o)).collect();
        assert_eq!(tags.len(), owners.len());
        assert_eq!(owner_tag("abc"), owner_tag("abc"));
    }
}
