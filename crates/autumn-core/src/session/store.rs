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

    /// Writes `record` under `id`, replacing what was there, retired or not;
    /// it lives until `record.expires_at_millis` (`now_millis` tells a
    /// backend with its own expiry how long that is).
    ///
    /// The session layer calls it only to retire an id on sign-out, where
    /// the retired marker must win over whatever is stored. Every other
    /// write goes through [`save_unless_retired`](Self::save_unless_retired).
    fn save<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, ()>;

    /// Writes `record` under `id` as [`save`](Self::save) does, unless the
    /// record the store holds under `id` is
    /// [retired](SessionRecord::retired): then nothing is written, the
    /// retired record stays as it was, and the answer is
    /// [`SaveOutcome::Retired`].
    ///
    /// A request that loaded a live session saves through this, so that it
    /// loses to a request that retired the id meanwhile (a sign-out, a
    /// rotation) instead of making the id live again. The session layer
    /// writes every live record with it, and retires the old id of a
    /// rotation with it before writing the new one, so that a rotation
    /// coming after a sign-out moves nothing to a new id either.
    ///
    /// The check and the write must be one atomic step with respect to
    /// every other write to `id` (the memory store does both under its
    /// lock, Redis in one Lua script, the database in one
    /// `INSERT .. ON CONFLICT .. DO UPDATE .. WHERE` statement): a sign-out
    /// that lands between them is undone.
    ///
    /// The default implementation is not atomic: it
    /// [`load`](Self::load)s the record, then [`save`](Self::save)s. It
    /// keeps a store written before this method existed compiling, and
    /// refuses a save that starts after the retirement, but not one that
    /// races it. Override it in a store that several requests write at a
    /// time; a store that wraps another must forward it to the inner one.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`] when the store fails (or is full); whether
    /// `record` was written is then unknown.
    fn save_unless_retired<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, SaveOutcome> {
        Box::pin(async move {
            if let Some(stored) = self.load(id, now_millis).await?
                && stored.retired
            {
                return Ok(SaveOutcome::Retired);
            }
            self.save(id, record, now_millis).await?;
            Ok(SaveOutcome::Written)
        })
    }

    /// Removes `id`'s record, if any.
    fn delete<'a>(&'a self, id: &'a SessionId) -> SessionFuture<'a, ()>;

    /// Removes records that expired before `now_millis`, at most `limit` of
    /// them; returns how many went. Backends that expire entries by
    /// themselves (Redis) keep the default, which does nothing.
    fn delete_expired(&self, now_millis: u64, limit: u64) -> SessionFuture<'_, u64> {
        let _ = (now_millis, limit);
        Box::pin(async { Ok(0) })
    }

    /// Retires every live session signed in as `principal` (a
    /// [`SessionRecord::principal`]), except the one under `except`;
    /// returns how many were retired.
    ///
    /// Retired, not deleted: a request of an ended session that is still
    /// running saves through
    /// [`save_unless_retired`](Self::save_unless_retired) and so cannot
    /// bring it back. Its next request finds the id retired and is served
    /// as a guest.
    ///
    /// A store finds a principal's sessions through an index it keeps from
    /// the records it saves (the memory store by looking through its
    /// records, Redis in a set per principal, the database in an indexed
    /// `principal` column). A session a concurrent request is signing in
    /// (a record not written yet) may be missed; a session written after
    /// this call returns is not affected.
    ///
    /// The default implementation fails: a store that keeps no index cannot
    /// end anyone's sessions, and saying so is safer than reporting that
    /// none were left (a password change would then leave them signed in).
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`] when the store fails or keeps no index; some
    /// sessions may have been retired by then.
    fn end_sessions_of<'a>(
        &'a self,
        principal: &'a str,
        except: Option<&'a SessionId>,
        now_millis: u64,
    ) -> SessionFuture<'a, u64> {
        let _ = (principal, except, now_millis);
        Box::pin(async {
            Err(SessionStoreError::new(
                "this session store keeps no index of sessions by principal, so it cannot end them",
            ))
        })
    }

    /// How many records the store holds, for the metrics, when it can tell
    /// cheaply.
    fn len(&self) -> Option<u64> {
        None
    }
}

/// What [`SessionStore::save_unless_retired`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a save that found the id retired wrote nothing"]
pub enum SaveOutcome {
    /// The record was written: the id held nothing, or a record that was
    /// not retired.
    Written,
    /// The id was retired: nothing was written, and the retired record is
    /// still there.
    Retired,
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
    /// it is recognised as the same visitor until it expires.
    ///
    /// Retirement is final for as long as the store keeps the record: the
    /// session layer writes live records only through
    /// [`save_unless_retired`], which never puts a live record over a
    /// retired one. A request that loaded the id while it was live and
    /// saves after another request retired it therefore writes nothing,
    /// neither under the id (its values, a slid expiry) nor under a fresh
    /// one (its own rotation), and its response sets no session cookie;
    /// what it changed in the session is dropped.
    ///
    /// [`save_unless_retired`]: SessionStore::save_unless_retired
    pub retired: bool,
    /// Who the session is signed in as ([`Session::sign_in`]), if anyone:
    /// what stores index sessions by, to end them all
    /// ([`SessionStore::end_sessions_of`]).
    ///
    /// [`Session::sign_in`]: super::Session::sign_in
    pub principal: Option<String>,
    /// When the session's absolute lifetime started, in milliseconds since
    /// the Unix epoch on the app clock: its creation, or its last sign-in.
    /// `None` in a record written before this was kept; the session layer
    /// then starts the lifetime when it next loads the record.
    pub created_at_millis: Option<u64>,
}

impl SessionRecord {
    /// A live record holding `data` until `expires_at_millis`.
    #[must_use]
    pub fn new(data: Map<String, Value>, expires_at_millis: u64) -> Self {
        Self {
            data,
            expires_at_millis,
            retired: false,
            principal: None,
            created_at_millis: None,
        }
    }

    /// The record signed in as `principal`.
    #[must_use]
    pub fn with_principal(mut self, principal: Option<String>) -> Self {
        self.principal = principal;
        self
    }

    /// The record whose absolute lifetime started at `created_at_millis`.
    #[must_use]
    pub fn with_created_at(mut self, created_at_millis: Option<u64>) -> Self {
        self.created_at_millis = created_at_millis;
        self
    }

    /// The marker left under an id that was rotated away or logged out.
    #[must_use]
    pub fn retired(expires_at_millis: u64) -> Self {
        Self {
            data: Map::new(),
            expires_at_millis,
            retired: true,
            principal: None,
            created_at_millis: None,
        }
    }

    /// The record as stored: a small JSON document.
    ///
    /// The principal and the creation time are optional fields of the same
    /// version 1 document, not a version 2: a reader that does not know
    /// them ignores them, so replicas of the previous build keep reading
    /// the sessions this one writes during a rolling deploy, and records
    /// written before the fields existed read as having neither.
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
        let mut document = serde_json::json!({
            "v": 1,
            "data": self.data,
            "exp": self.expires_at_millis,
            "retired": self.retired,
        });
        if let Some(object) = document.as_object_mut() {
            if let Some(principal) = &self.principal {
                object.insert("principal".into(), principal.clone().into());
            }
            if let Some(created) = self.created_at_millis {
                object.insert("created".into(), created.into());
            }
        }
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
            #[serde(default)]
            principal: Option<String>,
            #[serde(default)]
            created: Option<u64>,
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
            principal: stored.principal,
            created_at_millis: stored.created,
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
