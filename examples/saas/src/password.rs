//! Password hashing: Argon2id with a fresh random salt per password, stored
//! as a PHC string (`$argon2id$v=19$m=...$salt$hash`), which carries its own
//! parameters so they can be raised later without breaking old hashes.
//!
//! Hashing is slow and takes 19 MiB on purpose. It runs on a few threads of
//! its own, not on the threads that serve requests nor on tokio's blocking
//! pool, each with one Argon2 memory buffer it reuses: that bounds both the
//! CPU a flood of logins can take and the memory hashing holds.

use std::cell::RefCell;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{Output, ParamsString, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use autumn_web::AutumnError;

/// The most threads that hash at once.
const MAX_HASHING_THREADS: usize = 2;

type Job = Box<dyn FnOnce() + Send>;

/// Runs `work` on a hashing thread and waits for its result.
async fn on_hashing_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, AutumnError> {
    static JOBS: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(MAX_HASHING_THREADS);
        let mut started = 0;
        for n in 0..threads {
            let receiver = receiver.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("password-hash-{n}"))
                .spawn(move || {
                    loop {
                        // The lock is held only to take a job, not to run it.
                        let job = match receiver.lock() {
                            Ok(receiver) => receiver.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                });
            started += usize::from(spawned.is_ok());
        }
        (started > 0).then(|| Mutex::new(sender))
    });
    let jobs = jobs
        .as_ref()
        .ok_or_else(|| AutumnError::internal("no password hashing thread could be started"))?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = reply.send(work());
    });
    jobs.lock()
        .map_err(|_| AutumnError::internal("the password hashing queue is poisoned"))?
        .send(job)
        .map_err(|_| AutumnError::internal("the password hashing threads are gone"))?;
    answer
        .await
        .map_err(|_| AutumnError::internal("a password hashing job was dropped"))
}

/// The PHC string for `password`, salted afresh.
///
/// # Errors
///
/// When the operating system gives no randomness or no hashing thread
/// runs.
pub(crate) async fn hash(password: String) -> Result<String, AutumnError> {
    on_hashing_thread(move || hash_now(&password)).await?
}

fn hash_now(password: &str) -> Result<String, AutumnError> {
    let salt = SaltString::generate(&mut OsRng);
    let salt = salt.as_salt();
    let mut raw_salt = [0u8; 64];
    let raw_salt = salt.decode_b64(&mut raw_salt).map_err(internal)?;
    let params = Params::default();
    let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone());
    let mut output = [0u8; Params::DEFAULT_OUTPUT_LEN];
    with_memory(params.block_count(), |memory| {
        argon2.hash_password_into_with_memory(password.as_bytes(), raw_salt, &mut output, memory)
    })
    .map_err(internal)?;
    let hash = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(&params).map_err(internal)?,
        salt: Some(salt),
        hash: Some(Output::new(&output).map_err(internal)?),
    };
    Ok(hash.to_string())
}

fn internal(error: impl std::fmt::Display) -> AutumnError {
    AutumnError::internal(error.to_string())
}

/// Runs `hash` with this thread's Argon2 memory, grown to `blocks` blocks.
///
/// Argon2 needs its whole memory cost (19 MiB by default) for every hash.
/// Allocated and freed each time, glibc soon serves it from the heap and
/// keeps it, a little more with each hash; kept here, each hashing thread
/// holds one buffer for good.
fn with_memory<T>(blocks: usize, hash: impl FnOnce(&mut [Block]) -> T) -> T {
    thread_local! {
        static MEMORY: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
    }
    MEMORY.with(|memory| {
        let mut memory = memory.borrow_mut();
        if memory.len() < blocks {
            memory.resize(blocks, Block::default());
        }
        hash(&mut memory[..blocks])
    })
}

/// Whether `password` matches `stored`, a PHC string from [`hash`]. With no
/// stored hash (an unknown email, or an account from before passwords), a
/// hash of a fixed password is checked instead, so that the answer takes as
/// long as for a real account and does not tell which emails exist.
///
/// # Errors
///
/// When no hashing thread runs.
pub(crate) async fn verify(password: String, stored: Option<String>) -> Result<bool, AutumnError> {
    on_hashing_thread(move || {
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
}

fn matches(password: &str, stored: &str) -> bool {
    // A hash that does not parse, or names other parameters than Argon2
    // takes, matches nothing.
    let Ok(parsed) = PasswordHash::new(stored) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (
        Algorithm::try_from(parsed.algorithm),
        Params::try_from(&parsed),
    ) else {
        return false;
    };
    let version = match parsed.version.map(Version::try_from).transpose() {
        Ok(version) => version.unwrap_or_default(),
        Err(_) => return false,
    };
    let mut raw_salt = [0u8; 64];
    let Ok(raw_salt) = salt.decode_b64(&mut raw_salt) else {
        return false;
    };
    let mut output = vec![0u8; expected.len()];
    let argon2 = Argon2::new(algorithm, version, params.clone());
    let hashed = with_memory(params.block_count(), |memory| {
        argon2.hash_password_into_with_memory(password.as_bytes(), raw_salt, &mut output, memory)
    });
    // `Output`'s equality takes the same time wherever the bytes differ.
    hashed.is_ok() && Output::new(&output).is_ok_and(|output| output == expected)
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

    #[test]
    fn hashes_are_standard_phc_strings_both_ways() {
        use argon2::password_hash::{PasswordHasher as _, PasswordVerifier as _};
        let ours = hash_now("correct horse").expect("hash");
        let parsed = PasswordHash::new(&ours).expect("a PHC string");
        assert!(
            Argon2::default()
                .verify_password(b"correct horse", &parsed)
                .is_ok()
        );
        let salt = SaltString::generate(&mut OsRng);
        let theirs = Argon2::default()
            .hash_password(b"correct horse", &salt)
            .expect("hash")
            .to_string();
        assert!(matches("correct horse", &theirs));
        assert!(!matches("Correct horse", &theirs));
    }
}
