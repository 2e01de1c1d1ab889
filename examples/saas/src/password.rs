//! Password hashing: Argon2id with a fresh random salt per password, stored
//! as a PHC string (`$argon2id$v=19$m=...$salt$hash`), which carries its own
//! parameters so they can be raised later without breaking old hashes.
//!
//! Hashing is slow on purpose, so it runs on the blocking pool, off the
//! threads that serve requests.

use std::sync::OnceLock;

use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};
use autumn_web::AutumnError;

/// The PHC string for `password`, salted afresh.
///
/// # Errors
///
/// When the operating system gives no randomness or the blocking pool is
/// gone.
pub(crate) async fn hash(password: String) -> Result<String, AutumnError> {
    tokio::task::spawn_blocking(move || hash_now(&password))
        .await
        .map_err(AutumnError::internal)?
}

fn hash_now(password: &str) -> Result<String, AutumnError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| AutumnError::internal(error.to_string()))
}

/// Whether `password` matches `stored`, a PHC string from [`hash`]. With no
/// stored hash (an unknown email, or an account from before passwords), a
/// hash of a fixed password is checked instead, so that the answer takes as
/// long as for a real account and does not tell which emails exist.
///
/// # Errors
///
/// When the blocking pool is gone.
pub(crate) async fn verify(password: String, stored: Option<String>) -> Result<bool, AutumnError> {
    tokio::task::spawn_blocking(move || {
        let known = stored.as_deref().filter(|stored| !stored.is_empty());
        let Some(decoy) = decoy() else {
            return known.is_some_and(|stored| matches(&password, stored));
        };
        match known {
            Some(stored) => matches(&password, stored),
            None => {
                let _ = matches(&password, decoy);
                false
            }
        }
    })
    .await
    .map_err(AutumnError::internal)
}

fn matches(password: &str, stored: &str) -> bool {
    // A hash that does not parse matches nothing.
    PasswordHash::new(stored).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// The hash compared against when there is no account.
fn decoy() -> Option<&'static str> {
    static DECOY: OnceLock<Option<String>> = OnceLock::new();
    DECOY
        .get_or_init(|| hash_now("not the password of any account").ok())
        .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_is_salted_and_checks_only_its_password() {
        let one = hash("correct horse".into()).await.expect("hash");
        let two = hash("correct horse".into()).await.expect("hash");
        assert!(one.starts_with("$argon2id$"), "{one}");
        assert!(!one.contains("correct horse"));
        assert_ne!(one, two, "each hash has its own salt");
        assert!(
            verify("correct horse".into(), Some(one.clone()))
                .await
                .expect("verify")
        );
        assert!(
            !verify("battery staple".into(), Some(one))
                .await
                .expect("verify")
        );
        assert!(!verify("correct horse".into(), None).await.expect("verify"));
        assert!(
            !verify(String::new(), Some("not a hash".into()))
                .await
                .expect("verify")
        );
    }
}
