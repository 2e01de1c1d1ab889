//! [`RedisError`]: why a [`RedisConnection`](super::RedisConnection) could
//! not be built, or failed its launch or health check.

/// Why a [`RedisConnection`](super::RedisConnection) could not be built, or
/// failed [`ping`](super::RedisConnection::ping) or
/// [`health_check`](super::RedisConnection::health_check).
///
/// Every message names the URL with its password masked. A command's own
/// failure on the connection is the redis client's
/// [`redis::RedisError`](::redis::RedisError) instead (what
/// [`RedisConnection::run`](super::RedisConnection::run) returns).
///
/// ```
/// use autumn_base::redis::{RedisConnection, RedisError};
///
/// let error = RedisConnection::new("http://:secret@localhost").unwrap_err();
/// assert!(matches!(error, RedisError::InvalidUrl { .. }));
/// assert!(error.to_string().starts_with("invalid Redis URL"));
/// assert!(!error.to_string().contains("secret"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisError {
    /// The URL is not a Redis URL this build can use.
    #[error("invalid Redis URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL, password masked.
        url: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// Redis could not be reached, or did not answer a command of the check.
    #[error("Redis at {url} did not answer {command}: {error}")]
    NoAnswer {
        /// The URL, password masked.
        url: String,
        /// The command that got no answer (`PING`, `CLUSTER SLOTS`,
        /// `CLUSTER INFO`).
        command: &'static str,
        /// The client's error.
        error: ::redis::RedisError,
    },
    /// Redis refused the user name and password of the URL (`AUTH`).
    #[error(
        "Redis at {url} refused the user and password in the URL (AUTH failed): the password is wrong, or the ACL user does not exist or is disabled"
    )]
    AuthenticationFailed {
        /// The URL, password masked.
        url: String,
    },
    /// Redis answered `PING` with something other than `PONG`.
    #[error("Redis at {url} answered PING with {answer:?}")]
    UnexpectedPong {
        /// The URL, password masked.
        url: String,
        /// What it answered.
        answer: String,
    },
    /// Masters of a Redis Cluster report that it does not serve every slot.
    #[error(
        "Redis Cluster at {url} reports {} (in {not_ok} of {answered} answers to CLUSTER INFO, asked once per master{}): keys in slots without a serving master get no answer",
        .states.join(", "),
        unanswered_note(*.unanswered)
    )]
    ClusterDown {
        /// The URL, password masked.
        url: String,
        /// The distinct states reported, as `cluster_state:fail`.
        states: Vec<String>,
        /// How many answers reported a state other than `ok`.
        not_ok: usize,
        /// How many masters answered.
        answered: usize,
        /// How many masters did not answer.
        unanswered: usize,
    },
    /// A TLS file ([`RedisTls`](super::RedisTls)) cannot be read, or does
    /// not hold what it should.
    #[error("the Redis TLS {file} {} cannot be used: {reason}", .path.display())]
    TlsFile {
        /// Which file.
        file: TlsFile,
        /// Where it was looked for.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A client certificate was given without its key, or a key without
    /// its certificate.
    #[error("a Redis TLS client certificate needs both files, and there is no {missing}")]
    TlsIncomplete {
        /// The file that is missing.
        missing: TlsFile,
    },
    /// TLS files were given for a URL that is not `rediss://` (or
    /// `rediss+cluster://`): they would be ignored.
    #[error(
        "Redis TLS files are set, but {url} does not use TLS; use rediss:// (or rediss+cluster://), or remove them"
    )]
    TlsWithoutRediss {
        /// The URL, password masked.
        url: String,
    },
    /// No master of a Redis Cluster answered `CLUSTER INFO`.
    #[error("no master of the Redis Cluster at {url} answered CLUSTER INFO: {error}")]
    ClusterSilent {
        /// The URL, password masked.
        url: String,
        /// The first master's error.
        error: ::redis::RedisError,
    },
}

/// `; N unanswered` when some masters did not answer, else nothing.
fn unanswered_note(unanswered: usize) -> String {
    if unanswered == 0 {
        String::new()
    } else {
        format!("; {unanswered} unanswered")
    }
}

/// One of the files of a [`RedisTls`](super::RedisTls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFile {
    /// The CA certificate file (`ca_file`).
    Ca,
    /// The client certificate file (`cert_file`).
    Cert,
    /// The client key file (`key_file`).
    Key,
}

impl std::fmt::Display for TlsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Ca => "CA file",
            Self::Cert => "client certificate file",
            Self::Key => "client key file",
        })
    }
}
