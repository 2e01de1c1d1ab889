//! The contract a session backend implements, and what it keeps.

use std::future::Future;
use std::pin::Pin;

use serde_json::{Map, Value};

use super::id::SessionId;

/// The boxed future every [`SessionStore`] method returns.
pub type SessionFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, SessionStoreError>> + Send + 'a>>;

/// A backend that keeps sessions: memory, Redis or the app database.
///
/// A store maps a session id to a [`SessionRecord`] until the record's
/// `expires_at_millis`; an expired record is never returned. Stores key their
/// rows by [`SessionId::storage_key`] (a hash), never by the id itself, so a
/// dump of the store or its logs reveals no cookie that would sign anyone in.
///
/// Implementations are called concurrently from many requests (and, for
/// shared backends, many processes) and must not block the runtime thread.
#[expect(
    clippy::len_without_is_empty,
    reason = "`len` is an optional metric, not a collection's size"
)]
pub trait SessionStore: Send + Sync + 'static {
    /// The record under `id`, if there is one that has not expired at
    /// `now_millis` (the app clock).
    fn load<'a>(
        &'a self,
        id: &'a SessionId,
        now_millis: u64,
    ) -> SessionFuture<'a, Option<SessionRecord>>;

    /// Writes `record` under `id`, replacing what was there; it lives until
    /// `record.expires_at_millis` (`now_millis` tells a backend with its own
    /// expiry how long that is).
    fn save<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, ()>;

    /// Removes `id`'s record, if any.
    fn delete<'a>(&'a self, id: &'a SessionId) -> SessionFuture<'a, ()>;

    /// Removes records that expired before `now_millis`, at most `limit` of
    /// them; returns how many went. Backends that expire entries by
    /// themselves (Redis) keep the default, which does nothing.
    fn delete_expired(&self, now_millis: u64, limit: u64) -> SessionFuture<'_, u64> {
        let _ = (now_millis, limit);
        Box::pin(async { Ok(0) })
    }

    /// How many records the store holds, for the metrics, when it can tell
    /// cheaply.
    fn len(&self) -> Option<u64> {
        None
    }
}

/// What a store keeps for one session.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct SessionRecord {
    /// The session's values, by key, as JSON.
    pub data: Map<String, Value>,
    /// When the record expires, in milliseconds since the Unix epoch on the
    /// app clock.
    pub expires_at_millis: u64,
    /// The id was replaced (`cycle_id`) or logged out (`flush`): the record
    /// carries no data, and a request that finds it retired saves nothing
    /// under it (its values go under a fresh id); a retry that still sends
    /// it is recognised as the same visitor until it expires. [`save`] is a
    /// plain upsert, though: a request that loaded the id while it was live
    /// and saves after it was retired writes it back as live.
    ///
    /// [`save`]: SessionStore::save
    pub retired: bool,
}

impl SessionRecord {
    /// A live record holding `data` until `expires_at_millis`.
    #[must_use]
    pub fn new(data: Map<String, Value>, expires_at_millis: u64) -> Self {
        Self {
            data,
            expires_at_millis,
            retired: false,
        }
    }

    /// The marker left under an id that was rotated away or logged out.
    #[must_use]
    pub fn retired(expires_at_millis: u64) -> Self {
        Self {
            data: Map::new(),
            expires_at_millis,
            retired: true,
        }
    }

    /// The record as stored: a small JSON document.
    ///
    /// ```
    /// use autumn_core::session::SessionRecord;
    ///
    /// let mut data = serde_json::Map::new();
    /// data.insert("user_id".into(), 7.into());
    /// let record = SessionRecord::new(data, 1_000);
    /// let bytes = record.encode();
    /// assert_eq!(SessionRecord::decode(&bytes).unwrap(), record);
    /// ```
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let document = serde_json::json!({
            "v": 1,
            "data": self.data,
            "exp": self.expires_at_millis,
            "retired": self.retired,
        });
        // A `Value` built from strings, numbers and maps always serializes.
        serde_json::to_vec(&document).unwrap_or_default()
    }

    /// Reads a record [`encode`](Self::encode) wrote.
    ///
    /// # Errors
    ///
    /// A [`SessionStoreError`] when the bytes are not such a record.
    pub fn decode(bytes: &[u8]) -> Result<Self, SessionStoreError> {
        #[derive(serde::Deserialize)]
        struct Stored {
            v: u32,
            data: Map<String, Value>,
            exp: u64,
            #[serde(default)]
            retired: bool,
        }
        let stored: Stored = serde_json::from_slice(bytes).map_err(|error| {
            SessionStoreError::new(format!("unreadable session record: {error}"))
        })?;
        if stored.v != 1 {
            return Err(SessionStoreError::new(format!(
                "session record version {} is not known to this build",
                stored.v
            )));
        }
        Ok(Self {
            data: stored.data,
            expires_at_millis: stored.exp,
            retired: stored.retired,
        })
    }
}

/// A session backend failed: unreachable, full, or holding something
/// unreadable. Requests that need the session answer 503 with
/// `Retry-After`; nothing is run on a session that could not be read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("session store: {message}")]
pub struct SessionStoreError {
    message: String,
    full: bool,
}

impl SessionStoreError {
    /// An error described by `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            full: false,
        }
    }

    /// The store is at its configured capacity.
    pub fn full(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            full: true,
        }
    }

    /// Whether the store refused because it is full.
    pub fn is_full(&self) -> bool {
        self.full
    }
}
