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
