//! [`Session`]: a request's session, loaded on first use and saved by the
//! session layer on the way out.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use autumn_base::clock::SharedClock;
use autumn_base::problem::{ProblemCode, ProblemDetails};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tokio::sync::Mutex;

use super::cookie::CookieSettings;
use super::id::SessionId;
use super::store::{SaveOutcome, SessionRecord, SessionStore, SessionStoreError};

/// A request's session: typed values kept server-side between requests.
///
/// Take it as an extractor. Nothing is read from the store until a method
/// needs it, and nothing is written unless a value changed (or the session
/// is due to have its expiry slid forward); the session layer then saves it
/// and sets the cookie after the handler returns.
///
/// ```
/// use autumn_core::session::Session;
///
/// async fn count_visits(session: Session) -> Result<String, autumn_core::session::SessionError> {
///     let visits: u64 = session.get("visits").await?.unwrap_or(0) + 1;
///     session.insert("visits", visits).await?;
///     Ok(format!("visit number {visits}"))
/// }
/// # let _ = count_visits;
/// ```
///
/// Sign the visitor in with [`sign_in`](Self::sign_in) (which rotates the
/// id, so an id planted before sign-in grants nothing after it) and out with
/// [`sign_out`](Self::sign_out); after a password change,
/// [`end_other_sessions`](Self::end_other_sessions) signs the user's other
/// browsers out.
///
/// A sign-out is final even against requests already running. One that
/// loaded the session before another request retired its id (a sign-out,
/// or a rotation) and saves after it writes nothing: its changes to the
/// session are dropped, its response keeps its status and body but gets
/// no session cookie, and the retired id stays retired
/// ([`SessionStore::save_unless_retired`]).
///
/// A request extension: inserted by the [`SessionService`](super::SessionService)
/// on every request it sees, before the inner layers run. Read by this
/// extractor and `Flash`, by the tenancy layer (strategy `"session"`: the
/// tenant id kept in it) and by the scope layer, which takes its presence to
/// mean the session layer ran (sessions on), so the raw cookie is never a
/// scope part.
#[derive(Clone)]
pub struct Session {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

pub(super) struct Inner {
    pub(super) store: Arc<dyn SessionStore>,
    pub(super) clock: SharedClock,
    pub(super) cookie: Arc<CookieSettings>,
    /// The id the request's cookie named, if it can be one.
    pub(super) sent: Option<SessionId>,
    /// Set by every change: the guards ask it, without a lock, whether the
    /// response will get a Set-Cookie.
    pub(super) changed: AtomicBool,
    /// Set before anything reads or writes the state: a session nobody
    /// touched is passed on the way out without taking its lock.
    touched: AtomicBool,
    pub(super) state: Mutex<State>,
}

/// What the store said about the cookie's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Known {
    /// No cookie, or one naming no session in the store (forged, expired, or
    /// never saved): such an id is never written to.
    Unknown,
    /// A live session, expiring at the given time.
    Live { expires_at_millis: u64 },
    /// An id that was rotated away or logged out.
    Retired,
}

#[derive(Default)]
pub(super) struct State {
    /// `None` until the store was asked (or there was no cookie to ask about).
    pub(super) known: Option<Known>,
    /// The id now in effect, once the session was saved under a new one.
    pub(super) current: Option<SessionId>,
    /// The fresh id the next save writes under, when it was asked for
    /// before the save ([`Session::id_after_save`]).
    pub(super) next: Option<SessionId>,
    pub(super) data: Map<String, Value>,
    /// Who the session is signed in as ([`Session::sign_in`]).
    pub(super) principal: Option<String>,
    /// When the session's absolute lifetime started: loaded with it, or
    /// set by a sign-in; `None` for a session not stored yet.
    pub(super) created_at: Option<u64>,
    pub(super) modified: bool,
    pub(super) cycle: bool,
    pub(super) flushed: bool,
}

impl Session {
    pub(super) fn new(
        store: Arc<dyn SessionStore>,
        clock: SharedClock,
        cookie: Arc<CookieSettings>,
        sent: Option<SessionId>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                clock,
                cookie,
                sent,
                changed: AtomicBool::new(false),
                touched: AtomicBool::new(false),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The value stored under `key`, if there is one of type `T`.
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read;
    /// [`SessionError::Value`] when the stored value is not a `T`.
    pub async fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, SessionError> {
        let mut state = self.loaded().await?;
        match state.data.get(key) {
            None => Ok(None),
            Some(value) => serde_json::from_value(value.clone())
                .map(Some)
                .map_err(|error| {
                    // A value the app can no longer read is dropped, not an
                    // outage for this visitor forever.
                    state.data.remove(key);
                    self.changed(&mut state);
                    SessionError::Value(error.to_string())
                }),
        }
    }

    /// Stores `value` under `key`.
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read;
    /// [`SessionError::Value`] when `value` does not serialize to JSON.
    pub async fn insert<T: Serialize>(&self, key: &str, value: T) -> Result<(), SessionError> {
        let value =
            serde_json::to_value(value).map_err(|error| SessionError::Value(error.to_string()))?;
        let mut state = self.loaded().await?;
        state.data.insert(key.to_owned(), value);
        self.changed(&mut state);
        Ok(())
    }

    /// Removes the value under `key`, returning it if it was a `T`.
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read.
    pub async fn remove<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, SessionError> {
        let mut state = self.loaded().await?;
        let Some(value) = state.data.remove(key) else {
            return Ok(None);
        };
        self.changed(&mut state);
        Ok(serde_json::from_value(value).ok())
    }

    /// Removes every value; the session (and its id) stays.
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read.
    pub async fn clear(&self) -> Result<(), SessionError> {
        let mut state = self.loaded().await?;
        state.data.clear();
        self.changed(&mut state);
        Ok(())
    }

    /// Gives the session a new id when it is saved, keeping its values; the
    /// old id is retired. Call it when the visitor signs in, so an id an
    /// attacker planted before sign-in is worthless after it.
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read.
    pub async fn cycle_id(&self) -> Result<(), SessionError> {
        let mut state = self.loaded().await?;
        state.cycle = true;
        self.changed(&mut state);
        Ok(())
    }

    /// Forgets the session: its values are dropped, its id retired and the
    /// cookie removed. Call it when the visitor signs out.
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read.
    pub async fn flush(&self) -> Result<(), SessionError> {
        let mut state = self.loaded().await?;
        state.data.clear();
        state.principal = None;
        state.created_at = None;
        state.flushed = true;
        self.changed(&mut state);
        Ok(())
    }

    /// Signs the visitor in as `principal` (a user id, say): the session
    /// gets a new id when it is saved (the old one is retired, so an id
    /// planted before sign-in grants nothing after it), remembers who it
    /// belongs to ([`principal`](Self::principal)), and joins that
    /// principal's sessions, which
    /// [`end_other_sessions`](Self::end_other_sessions) and
    /// [`sign_out_everywhere`](Self::sign_out_everywhere) end. Its
    /// absolute lifetime starts again.
    ///
    /// The session's values are kept (a guest's cart survives signing in),
    /// unless it was signed in as someone else: then they are dropped
    /// first, so nothing of one user's session reaches another's.
    ///
    /// ```
    /// use autumn_core::session::{Session, SessionError};
    ///
    /// async fn signed_in(session: Session, user_id: i64) -> Result<(), SessionError> {
    ///     session.sign_in(user_id.to_string()).await?;
    ///     assert_eq!(session.principal().await?, Some(user_id.to_string()));
    ///     Ok(())
    /// }
    /// # let _ = signed_in;
    /// ```
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read.
    pub async fn sign_in(&self, principal: impl Into<String>) -> Result<(), SessionError> {
        let principal = principal.into();
        let mut state = self.loaded().await?;
        if state
            .principal
            .as_ref()
            .is_some_and(|signed_in| *signed_in != principal)
        {
            state.data.clear();
        }
        state.principal = Some(principal);
        state.created_at = Some(self.inner.clock.now_millis());
        state.cycle = true;
        self.changed(&mut state);
        Ok(())
    }

    /// Who the session is signed in as, if anyone ([`sign_in`](Self::sign_in)).
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read.
    pub async fn principal(&self) -> Result<Option<String>, SessionError> {
        Ok(self.loaded().await?.principal.clone())
    }

    /// Signs the visitor out: as [`flush`](Self::flush), the values are
    /// dropped, the id retired and the cookie removed; the session leaves
    /// its principal's sessions. The next request is a guest's.
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read.
    pub async fn sign_out(&self) -> Result<(), SessionError> {
        self.flush().await
    }

    /// Ends every other session signed in as this session's principal (the
    /// other browsers of the same user), keeping this one: call it after a
    /// password change. Returns how many were ended; 0 when the session is
    /// signed in as nobody.
    ///
    /// The others are retired at once, in the store: their next request is
    /// a guest's, and one already running cannot save them back
    /// ([`SessionStore::end_sessions_of`]).
    ///
    /// ```
    /// use autumn_core::session::{Session, SessionError};
    ///
    /// async fn password_changed(session: Session) -> Result<u64, SessionError> {
    ///     session.end_other_sessions().await
    /// }
    /// # let _ = password_changed;
    /// ```
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read, or the
    /// store failed to end the others (or cannot: it keeps no index).
    pub async fn end_other_sessions(&self) -> Result<u64, SessionError> {
        let state = self.loaded().await?;
        let Some(principal) = state.principal.clone() else {
            return Ok(0);
        };
        // The id stored now: a rotation pending in this request retires it
        // itself, and must find it live to move the values.
        let kept = state.current.clone().or_else(|| match state.known {
            Some(Known::Live { .. }) => self.inner.sent.clone(),
            _ => None,
        });
        let now = self.inner.clock.now_millis();
        Ok(self
            .inner
            .store
            .end_sessions_of(&principal, kept.as_ref(), now)
            .await?)
    }

    /// Ends every session signed in as this session's principal, this one
    /// included, and signs this visitor out ([`sign_out`](Self::sign_out)):
    /// "sign out everywhere". Returns how many sessions were ended in the
    /// store (this one among them when it was stored).
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read, or the
    /// store failed to end the sessions (or cannot: it keeps no index);
    /// this session is then not signed out either.
    pub async fn sign_out_everywhere(&self) -> Result<u64, SessionError> {
        let principal = self.principal().await?;
        let ended = match principal {
            Some(principal) => {
                let now = self.inner.clock.now_millis();
                self.inner
                    .store
                    .end_sessions_of(&principal, None, now)
                    .await?
            }
            None => 0,
        };
        self.sign_out().await?;
        Ok(ended)
    }

    /// The id of the stored session this request belongs to, if any: `None`
    /// for a visitor without one (no cookie, or a cookie naming no live
    /// session). After a save under a new id, that id.
    ///
    /// # Errors
    ///
    /// [`SessionError::Store`] when the session could not be read.
    pub async fn id(&self) -> Result<Option<SessionId>, SessionError> {
        let state = self.loaded().await?;
        if state.current.is_some() {
            return Ok(state.current.clone());
        }
        Ok(match state.known {
            Some(Known::Live { .. }) => self.inner.sent.clone(),
            _ => None,
        })
    }

    /// Who the request is, for the idempotency scope: the cookie's id when
    /// the store knows it (live or retired), with whether it does. Loads the
    /// session when it was not loaded yet.
    pub(super) async fn identity(&self) -> Result<Option<(SessionId, bool)>, SessionError> {
        let Some(sent) = self.inner.sent.clone() else {
            return Ok(None);
        };
        let state = self.loaded().await?;
        let known = !matches!(state.known, Some(Known::Unknown) | None);
        Ok(Some((sent, known)))
    }

    fn changed(&self, state: &mut State) {
        state.modified = true;
        self.inner.changed.store(true, Ordering::Release);
    }

    /// The state, loaded from the store first when it was not yet.
    async fn loaded(&self) -> Result<tokio::sync::MutexGuard<'_, State>, SessionError> {
        self.inner.touched.store(true, Ordering::Release);
        let mut state = self.inner.state.lock().await;
        if state.known.is_none() {
            state.known = Some(match &self.inner.sent {
                None => Known::Unknown,
                Some(id) => {
                    let now = self.inner.clock.now_millis();
                    match self.inner.store.load(id, now).await? {
                        None => Known::Unknown,
                        Some(record) if record.retired => Known::Retired,
                        // Past its absolute lifetime: expired however
                        // active, and never written to again.
                        Some(record)
                            if self.inner.cookie.absolute_ttl.is_some_and(|absolute| {
                                record.created_at_millis.is_some_and(|created| {
                                    created.saturating_add(millis(absolute)) <= now
                                })
                            }) =>
                        {
                            Known::Unknown
                        }
                        Some(record) => {
                            state.data = record.data;
                            state.principal = record.principal;
                            // A record from before creation times were
                            // kept starts its lifetime now.
                            state.created_at = Some(record.created_at_millis.unwrap_or(now));
                            Known::Live {
                                expires_at_millis: record.expires_at_millis,
                            }
                        }
                    }
                }
            });
        }
        Ok(state)
    }

    /// The id the session will be stored under once the pending save is
    /// done, when that is not the id the request came with: a session
    /// created for a guest, or rotated by a sign-in. The id is chosen now
    /// and the save uses it, so a guard can lock the key a retry carrying
    /// the new cookie will look up before the save makes it the caller's.
    /// `None` when the save keeps the request's id, removes the session, or
    /// writes nothing.
    pub(crate) async fn id_after_save(&self) -> Option<SessionId> {
        if self.untouched() || !self.pending() {
            return None;
        }
        let mut state = self.inner.state.lock().await;
        let known = state.known.clone()?;
        if !state.modified || state.flushed {
            return None;
        }
        let live_sent = match (&known, &self.inner.sent) {
            (Known::Live { .. }, Some(id)) if state.current.is_none() => Some(id.clone()),
            _ => None,
        };
        if live_sent.is_none() && state.current.is_none() && state.is_empty() {
            return None;
        }
        match (&live_sent, &state.current, state.cycle) {
            // Kept: the retry carries the id the request came with.
            (Some(_), _, false) => None,
            (None, Some(id), false) => Some(id.clone()),
            _ => Some(state.next.get_or_insert_with(SessionId::generate).clone()),
        }
    }

    /// The id the session was last saved under in this request, if it got
    /// a new one (created, or rotated).
    pub(super) fn saved_id(&self) -> Option<SessionId> {
        // Asked right after a save, when nothing holds the state.
        self.inner
            .state
            .try_lock()
            .ok()
            .and_then(|state| state.current.clone())
    }

    /// Whether the session was never read or written while serving this
    /// request, so saving it has nothing to do. Only a load sets what a
    /// save writes from, and every read or write loads first; one still
    /// under way (another task holding a clone) counts as touched.
    pub(super) fn untouched(&self) -> bool {
        !self.inner.touched.load(Ordering::Acquire)
    }

    /// Whether saving would write anything: something changed.
    pub(super) fn pending(&self) -> bool {
        self.inner.changed.load(Ordering::Acquire)
    }

    /// Saves what changed (and slides a live session's expiry when due) and
    /// appends the cookie to `headers`. Safe to call twice: the second call
    /// finds nothing to do. Nothing is read from the store here: a session
    /// nobody touched was never loaded and is left alone.
    pub(super) async fn save(&self, headers: &mut HeaderMap) -> Result<(), SessionError> {
        let mut state = self.inner.state.lock().await;
        let saved = self.write(&mut state, headers).await;
        if saved.is_err() {
            // Tried once: the failure is answered (by a guard, or by the
            // session layer), and a second attempt on the way out would
            // answer over it.
            state.modified = false;
            self.inner.changed.store(false, Ordering::Release);
        }
        saved
    }

    async fn write(&self, state: &mut State, headers: &mut HeaderMap) -> Result<(), SessionError> {
        let Some(known) = state.known.clone() else {
            return Ok(());
        };
        let now = self.inner.clock.now_millis();
        let ttl = self.inner.cookie.ttl;
        let created_at = *state.created_at.get_or_insert(now);
        let mut expires_at = now.saturating_add(millis(ttl));
        if let Some(absolute) = self.inner.cookie.absolute_ttl {
            // Never kept past its absolute lifetime, however active.
            expires_at = expires_at.min(created_at.saturating_add(millis(absolute)));
        }
        if !state.modified {
            // Sliding expiry: rewrite a live session once a tenth of its
            // lifetime has passed since it was last written, not on every
            // request.
            if let Known::Live { expires_at_millis } = known
                && state.current.is_none()
                && expires_at.saturating_sub(expires_at_millis) >= millis(ttl) / 10
                && let Some(id) = &self.inner.sent
            {
                let record = state.record(expires_at);
                match self
                    .inner
                    .store
                    .save_unless_retired(id, &record, now)
                    .await?
                {
                    SaveOutcome::Written => {
                        state.known = Some(Known::Live {
                            expires_at_millis: expires_at,
                        });
                        append(headers, self.inner.cookie.set(id));
                    }
                    SaveOutcome::Retired => retired_meanwhile(state),
                }
            }
            return Ok(());
        }
        let live_sent = match (&known, &self.inner.sent) {
            (Known::Live { .. }, Some(id)) if state.current.is_none() => Some(id.clone()),
            _ => None,
        };
        if state.flushed {
            if let Some(old) = &live_sent {
                // A plain save: a sign-out wins over whatever another
                // request wrote meanwhile.
                self.inner
                    .store
                    .save(old, &SessionRecord::retired(expires_at), now)
                    .await?;
            } else if let Some(current) = &state.current {
                self.inner.store.delete(current).await?;
            }
            if self.inner.sent.is_some() || state.current.is_some() {
                append(headers, self.inner.cookie.remove());
            }
            state.current = None;
            state.created_at = None;
            state.known = Some(Known::Unknown);
        } else if live_sent.is_none() && state.current.is_none() && state.is_empty() {
            // Nothing to keep for a visitor without a session.
        } else {
            // A live session keeps its id unless it is rotated; anything else
            // (no cookie, an unknown or retired id) gets a fresh one: an id
            // Autumn did not issue is never adopted.
            let target = match (&live_sent, &state.current, state.cycle) {
                (Some(id), _, false) => id.clone(),
                (None, Some(id), false) => id.clone(),
                // The id a guard was told it would get, if it asked.
                _ => state.next.take().unwrap_or_else(SessionId::generate),
            };
            // A rotation retires the old id before the values move: only
            // while no other request retired it first (a sign-out), or the
            // values it still holds would live on under the new id. When
            // the new id cannot be written after that, the visitor is
            // signed out rather than left on an id meant to be gone.
            let rotated_from = live_sent
                .as_ref()
                .or(state.current.as_ref())
                .filter(|old| state.cycle && **old != target);
            let mut outcome = SaveOutcome::Written;
            if let Some(old) = rotated_from {
                outcome = self
                    .inner
                    .store
                    .save_unless_retired(old, &SessionRecord::retired(expires_at), now)
                    .await?;
            }
            if outcome == SaveOutcome::Written {
                let record = state.record(expires_at);
                outcome = self
                    .inner
                    .store
                    .save_unless_retired(&target, &record, now)
                    .await?;
            }
            match outcome {
                SaveOutcome::Written => {
                    append(headers, self.inner.cookie.set(&target));
                    state.current = Some(target);
                    state.known = Some(Known::Live {
                        expires_at_millis: expires_at,
                    });
                }
                SaveOutcome::Retired => retired_meanwhile(state),
            }
        }
        state.modified = false;
        state.cycle = false;
        state.flushed = false;
        self.inner.changed.store(false, Ordering::Release);
        Ok(())
    }

    /// Gives a visitor without a session cookie an id of its own, in the
    /// cookie only: a form rendered for them binds its submit token to this
    /// browser, while nothing is stored.
    pub(super) fn issue_cookie_only(&self, headers: &mut HeaderMap) {
        if self.inner.sent.is_some() || headers.contains_key(header::SET_COOKIE) {
            return;
        }
        append(headers, self.inner.cookie.set(&SessionId::generate()));
    }
}

/// Another request retired the id this one meant to save under (signed
/// out, or rotated it away) after this one loaded it: the store kept the
/// retired record and wrote nothing. The request ends as one that found the
/// id retired: no values, no id of its own, and no cookie, so neither the
/// old id nor its values come back, and the browser keeps whatever cookie
/// the other request's answer gave it.
fn retired_meanwhile(state: &mut State) {
    tracing::debug!(
        "the session was retired by another request while this one ran; its changes were not saved"
    );
    state.data.clear();
    state.principal = None;
    state.created_at = None;
    state.current = None;
    state.known = Some(Known::Retired);
}

impl State {
    /// Nothing worth storing: no values, nobody signed in.
    fn is_empty(&self) -> bool {
        self.data.is_empty() && self.principal.is_none()
    }

    /// The live record to store, expiring at `expires_at`.
    fn record(&self, expires_at: u64) -> SessionRecord {
        SessionRecord::new(self.data.clone(), expires_at)
            .with_principal(self.principal.clone())
            .with_created_at(self.created_at)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn append(headers: &mut HeaderMap, cookie: Option<HeaderValue>) {
    if let Some(cookie) = cookie {
        headers.append(header::SET_COOKIE, cookie);
    }
}

/// Why a session operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The session store failed; answered 503 with `Retry-After`.
    #[error(transparent)]
    Store(#[from] SessionStoreError),
    /// A value did not (de)serialize as the type asked for; answered 500.
    #[error("a session value could not be converted: {0}")]
    Value(String),
}

impl SessionError {
    /// The status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Value(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine-readable code in the problem document, one of
    /// [`codes`](crate::codes).
    pub fn code(&self) -> &'static str {
        self.typed_code().as_str()
    }

    fn typed_code(&self) -> ProblemCode {
        match self {
            Self::Store(error) if error.is_full() => crate::codes::SESSION_STORE_FULL,
            Self::Store(_) => crate::codes::SESSION_STORE_UNAVAILABLE,
            Self::Value(_) => crate::codes::SESSION_VALUE_INVALID,
        }
    }

    /// The `detail` a client is sent: what happened, never the store's own
    /// error text.
    pub fn public_detail(&self) -> &'static str {
        match self {
            Self::Store(_) => {
                "the session store is unavailable, so the request was not completed; retry later"
            }
            Self::Value(_) => "the server could not read this session",
        }
    }
}

impl ProblemDetails for SessionError {
    fn problem_status(&self) -> StatusCode {
        self.status()
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        Some(self.typed_code())
    }

    /// The public detail: the store's own text may name hosts.
    fn problem_detail(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.public_detail())
    }

    /// A store outage is worth retrying shortly.
    fn problem_retry_after(&self) -> Option<u32> {
        matches!(self, Self::Store(_)).then_some(1)
    }

    /// The error the client is not shown: an outage or a value that no
    /// longer fits its type, which the operators must see.
    fn log_for_operators(&self) {
        match self {
            Self::Store(error) => tracing::error!(%error, "session store failed"),
            Self::Value(error) => {
                tracing::error!(%error, "a session value could not be converted");
            }
        }
    }
}

/// Why the [`Session`] extractor failed: the session layer is not installed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SessionRejection {
    /// 500 `session_layer_missing`: sessions are off (`[session] enabled =
    /// false`) or the handler runs outside the app's router.
    #[error(
        "this handler takes a Session, but sessions are not enabled; set session.enabled = true"
    )]
    LayerMissing,
}

impl ProblemDetails for SessionRejection {
    fn problem_status(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }

    fn problem_code(&self) -> Option<ProblemCode> {
        match self {
            Self::LayerMissing => Some(crate::codes::SESSION_LAYER_MISSING),
        }
    }

    /// The app is misconfigured: every request to this handler fails until
    /// the operators enable sessions.
    fn log_for_operators(&self) {
        tracing::error!(error = %self, "session extractor rejected");
    }
}

autumn_base::problem_into_response!(SessionError, SessionRejection);

crate::extract::extension_extractor!(Session, SessionRejection::LayerMissing);

#[cfg(test)]
mod tests {
    use autumn_base::clock::SystemClock;

    use super::super::cookie::SameSite;
    use super::super::memory::MemorySessionStore;
    use super::*;

    fn session() -> Session {
        Session::new(
            Arc::new(MemorySessionStore::new(16)),
            Arc::new(SystemClock),
            Arc::new(CookieSettings {
                name: "autumn_session".into(),
                ttl: Duration::from_secs(60),
                absolute_ttl: None,
                same_site: SameSite::Lax,
                secure: false,
            }),
            None,
        )
    }

    #[tokio::test]
    async fn a_read_or_a_write_touches_the_session_and_nothing_else_does() {
        let read = session();
        assert!(read.untouched());
        assert!(!read.pending());
        let _: Option<String> = read.get("cart").await.expect("a memory store answers");
        assert!(!read.untouched(), "a read loads the session");

        let written = session();
        written.clone().insert("cart", 3).await.expect("saved");
        assert!(!written.untouched(), "through any clone");
        assert!(written.pending());
    }
}
