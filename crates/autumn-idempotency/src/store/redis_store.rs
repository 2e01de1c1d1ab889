//! The Redis store: one Redis key per storage key, owner-checked Lua scripts.
//!
//! Each storage key lives in one Redis hash, `{key_prefix}:{storage_key}`:
//!
//! | field | holds |
//! | --- | --- |
//! | `lo` | the lock's owner |
//! | `le` | when the lock expires (ms since the epoch, Redis's clock) |
//! | `lt` | when the lock was taken (ms since the epoch, Redis's clock); absent in a hash written before it was kept |
//! | `r`  | the record ([`IdempotencyRecord::encode`]d) |
//! | `h`  | the fingerprint of the request that made the record |
//! | `ro` | the owner that wrote the record |
//! | `re` | when the record expires (ms since the epoch, Redis's clock) |
//!
//! Whether a lock or record is live is decided inside the script, by
//! comparing those deadlines with Redis's own `TIME`: every replica asks the
//! same clock, so one whose host clock runs ahead cannot take over a live
//! lock. Scripts take TTLs, never deadlines, and write `now + ttl`. A store
//! built with a clock that overrides the store's time (a test's
//! `ManualClock`) passes that clock's `now` as the scripts' first argument
//! instead, so tests expire things by moving the clock. (`TIME` before a
//! write is allowed since scripts replicate their effects, not themselves:
//! the default from Redis 5, the only way from Redis 7 and in Valkey.)
//!
//! Every script that writes also sets `PEXPIRE` on the key to the longest
//! remaining lifetime of what is still live (or deletes the key when nothing
//! is), so Redis drops dead keys by itself.
//!
//! Every operation is one command, an `EVALSHA` of a script that touches
//! only its own key (cluster-safe); `evict` is a `DEL`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{FromRedisValue, RedisError, Script, ScriptInvocation};

use super::{Claim, IdempotencyFuture, IdempotencyStore, KeyState, StoreError, StoreOperation};
use crate::record::{IdempotencyEntry, IdempotencyRecord};
use autumn_base::clock::{SharedClock, SystemClock, store_time_override};
use autumn_base::redis::RedisConnection;
/// No lock or record outlives this (100 years): it keeps every deadline
/// exactly representable in Lua's doubles.
const MAX_TTL_MILLIS: u64 = 100 * 365 * 24 * 3600 * 1000;

/// What every script starts with: the key, `now`, and the bookkeeping.
/// `ARGV[1]` is the time to decide by when a test clock imposes one, else
/// empty: then Redis's own clock decides.
macro_rules! script {
    ($body:literal) => {
        concat!(
            r"
local key = KEYS[1]
local now = tonumber(ARGV[1])
if now == nil then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
-- A time as it is stored: whole milliseconds, never in exponent form.
local function ms(t) return string.format('%.0f', t) end
-- Milliseconds a deadline has left, 0 when absent or past.
local function left(deadline)
  local d = tonumber(deadline)
  if d ~= nil and d > now then return d - now end
  return 0
end
-- Drops what is dead (the whole key when nothing lives) and lets Redis
-- expire the key when its last live part does.
local function settle(lock_left, record_left)
  if lock_left <= 0 and record_left <= 0 then
    redis.call('DEL', key)
    return
  end
  if lock_left <= 0 then redis.call('HDEL', key, 'lo', 'le', 'lt') end
  if record_left <= 0 then redis.call('HDEL', key, 'r', 'h', 'ro', 're') end
  redis.call('PEXPIRE', key, ms(math.max(lock_left, record_left)))
end
",
            $body
        )
    };
}

/// ARGV: now, owner, lock TTL (ms). Returns `{0}` in flight, `{1, record,
/// fingerprint}` completed, `{2}` acquired (padded with nils to three).
const CLAIM: &str = script!(
    r"
local f = redis.call('HMGET', key, 'le', 're', 'r', 'h')
if left(f[1]) > 0 then return {0, false, false} end
if left(f[2]) > 0 then return {1, f[3], f[4]} end
if f[1] or f[2] then redis.call('DEL', key) end
local lock_left = tonumber(ARGV[3])
if lock_left > 0 then
  redis.call('HSET', key, 'lo', ARGV[2], 'le', ms(now + lock_left), 'lt', ms(now))
  redis.call('PEXPIRE', key, ms(lock_left))
end
return {2, false, false}
"
);

/// ARGV: now, owner, record TTL (ms), record, body hash, "1" to also unlock.
/// Returns 1 when recorded.
const SET: &str = script!(
    r"
local f = redis.call('HMGET', key, 'lo', 'le', 'ro', 're')
local lock_left = left(f[2])
if lock_left > 0 and f[1] ~= ARGV[2] then return 0 end
if left(f[4]) > 0 and f[3] ~= ARGV[2] then return 0 end
local record_left = tonumber(ARGV[3])
if ARGV[6] == '1' then lock_left = 0 end
if record_left > 0 then
  redis.call('HSET', key, 'r', ARGV[4], 'h', ARGV[5], 'ro', ARGV[2], 're', ms(now + record_left))
end
settle(lock_left, record_left)
return 1
"
);

/// ARGV: now, owner, lock TTL (ms). Returns 1 when locked.
const TRY_LOCK: &str = script!(
    r"
local f = redis.call('HMGET', key, 'le', 're')
if left(f[1]) > 0 or left(f[2]) > 0 then return 0 end
if f[1] or f[2] then redis.call('DEL', key) end
local lock_left = tonumber(ARGV[3])
if lock_left > 0 then
  redis.call('HSET', key, 'lo', ARGV[2], 'le', ms(now + lock_left), 'lt', ms(now))
  redis.call('PEXPIRE', key, ms(lock_left))
end
return 1
"
);

/// ARGV: now, owner. Compare-and-delete of the lock.
const UNLOCK: &str = script!(
    r"
local f = redis.call('HMGET', key, 'lo', 'le', 're')
if not (f[1] or f[2] or f[3]) then return 0 end
local lock_left = left(f[2])
local released = 0
if f[1] == ARGV[2] then
  lock_left = 0
  released = 1
end
settle(lock_left, left(f[3]))
return released
"
);

/// ARGV: now, owner, lock TTL (ms). Returns 1 when renewed.
const RENEW_LOCK: &str = script!(
    r"
local f = redis.call('HMGET', key, 'lo', 'le', 're')
if f[1] ~= ARGV[2] or left(f[2]) <= 0 then return 0 end
local lock_left = tonumber(ARGV[3])
if lock_left > 0 then redis.call('HSET', key, 'le', ms(now + lock_left)) end
settle(lock_left, left(f[3]))
return 1
"
);

/// ARGV: now. Returns the time it judged by, then the lock deadline, record
/// deadline, record, fingerprint and when the lock was taken (nil when
/// absent): what `get` and `inspect` read, with the `now` to compare them
/// with. Writes nothing.
const READ: &str = script!(
    r"
local f = redis.call('HMGET', key, 'le', 're', 'r', 'h', 'lt')
return {now, f[1], f[2], f[3], f[4], f[5]}
"
);

struct Scripts {
    claim: Script,
    set: Script,
    try_lock: Script,
    unlock: Script,
    renew_lock: Script,
    read: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    claim: Script::new(CLAIM),
    set: Script::new(SET),
    try_lock: Script::new(TRY_LOCK),
    unlock: Script::new(UNLOCK),
    renew_lock: Script::new(RENEW_LOCK),
    read: Script::new(READ),
});

/// An [`IdempotencyStore`] in Redis, shared by every replica of an app.
///
/// Each storage key is one Redis hash under `{key_prefix}:{storage_key}`;
/// every operation is one command (a Lua script touching only that key, so
/// it works on Redis Cluster too), and a first-time request costs two
/// commands, a replay one. Lock and record expiry follow Redis's own clock
/// (`TIME`), so replicas whose clocks disagree still agree on what is live;
/// Redis also expires each key by itself once nothing in it is live, so
/// memory stays bounded.
///
/// Building the store does not connect: the connection is made on first use
/// (see [`ping`](Self::ping) for a launch check) and re-made whenever Redis
/// comes back after an outage. While Redis is unreachable every operation
/// fails fast with a [`StoreError`], and the middleware fails closed. The
/// connection is a [`RedisConnection`], which other stores of the app (the
/// session store) can share: see [`from_connection`](Self::from_connection).
///
/// ```no_run
/// use std::sync::Arc;
/// use autumn_idempotency::{IdempotencyLayer, IdempotencyStore, RedisIdempotencyStore};
///
/// # async fn launch() -> Result<(), autumn_idempotency::StoreError> {
/// let store = RedisIdempotencyStore::new("redis://127.0.0.1:6379", "myapp:idem")?;
/// store.ping().await?; // fail at launch, not on the first request
/// let store: Arc<dyn IdempotencyStore> = Arc::new(store);
/// let layer = IdempotencyLayer::new(store);
/// # let _ = layer;
/// # Ok(())
/// # }
/// ```
pub struct RedisIdempotencyStore {
    connection: RedisConnection,
    prefix: String,
    clock: SharedClock,
}

impl RedisIdempotencyStore {
    /// A store on the Redis at `url` (`redis://[user:password@]host:port[/db]`),
    /// keeping its keys under `key_prefix:`. Does not connect.
    ///
    /// ```
    /// use autumn_idempotency::RedisIdempotencyStore;
    ///
    /// // Nothing listens there: building the store still succeeds.
    /// let store = RedisIdempotencyStore::new("redis://127.0.0.1:1", "myapp:idem");
    /// assert!(store.is_ok());
    /// assert!(RedisIdempotencyStore::new("http://:secret@localhost", "p").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// A [`StoreError`] naming the URL (its password masked) when it is not a
    /// Redis URL.
    pub fn new(url: &str, key_prefix: &str) -> Result<Self, StoreError> {
        Ok(Self::from_connection(
            RedisConnection::new(url)?,
            key_prefix,
        ))
    }

    /// A store on `connection`, shared with whatever else uses it, keeping
    /// its keys under `key_prefix:`. Its scripts are loaded when the
    /// connection is made (or on first use, when it already was). Does not
    /// connect.
    ///
    /// ```
    /// use autumn_base::redis::RedisConnection;
    /// use autumn_idempotency::RedisIdempotencyStore;
    ///
    /// # fn main() -> Result<(), autumn_idempotency::StoreError> {
    /// let redis = RedisConnection::new("redis://127.0.0.1:6379")?;
    /// let store = RedisIdempotencyStore::from_connection(redis.clone(), "myapp:idem");
    /// assert_eq!(store.connection().url(), redis.url());
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_connection(connection: RedisConnection, key_prefix: &str) -> Self {
        connection.load_on_connect(&[CLAIM, SET, TRY_LOCK, UNLOCK, RENEW_LOCK, READ]);
        Self {
            connection,
            prefix: key_prefix.to_owned(),
            clock: std::sync::Arc::new(SystemClock),
        }
    }

    /// The connection the store uses: clone it to share it.
    pub fn connection(&self) -> &RedisConnection {
        &self.connection
    }

    /// The same store built with `clock`. Expiry follows Redis's clock
    /// unless `clock` [overrides the store's
    /// time](autumn_base::clock::Clock::overrides_store_time), as a test's
    /// [`ManualClock`](autumn_base::clock::ManualClock) does: then it
    /// follows `clock`, so tests expire locks and records without sleeping.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use autumn_idempotency::RedisIdempotencyStore;
    /// use autumn_base::clock::ManualClock;
    ///
    /// # fn main() -> Result<(), autumn_idempotency::StoreError> {
    /// let store = RedisIdempotencyStore::new("redis://127.0.0.1:6379", "test")?
    ///     .with_clock(Arc::new(ManualClock::new()));
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Connects (when not yet connected, loading the scripts) and asks Redis
    /// for a `PONG`: the launch health check. Its error names the URL, with
    /// any password masked.
    ///
    /// ```no_run
    /// # async fn check() -> Result<(), autumn_idempotency::StoreError> {
    /// use autumn_idempotency::RedisIdempotencyStore;
    ///
    /// RedisIdempotencyStore::new("redis://127.0.0.1:6379", "myapp:idem")?
    ///     .ping()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when Redis cannot be reached or does not answer.
    pub async fn ping(&self) -> Result<(), StoreError> {
        Ok(self.connection.ping().await?)
    }

    /// How far this store's clock (the app clock, see
    /// [`with_clock`](Self::with_clock)) is ahead of Redis's, in
    /// milliseconds; negative when behind. Measured with one `TIME`, against
    /// the middle of the round trip.
    ///
    /// Expiry follows Redis's clock, so the offset decides nothing.
    ///
    /// ```no_run
    /// # #[allow(deprecated)]
    /// # async fn check() -> Result<(), autumn_idempotency::StoreError> {
    /// use autumn_idempotency::RedisIdempotencyStore;
    ///
    /// let store = RedisIdempotencyStore::new("redis://127.0.0.1:6379", "myapp:idem")?;
    /// let ahead = store.clock_offset_millis().await?;
    /// println!("this process runs {ahead} ms ahead of Redis");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when Redis cannot be reached or does not answer.
    #[deprecated(
        note = "lock and record expiry follow Redis's own clock, so no replica's offset matters; nothing replaces it"
    )]
    pub async fn clock_offset_millis(&self) -> Result<i64, StoreError> {
        let before = self.clock.now_millis();
        let (secs, micros): (u64, u64) =
            self.connection
                .run(|mut connection| async move {
                    redis::cmd("TIME").query_async(&mut connection).await
                })
                .await
                .map_err(|error| {
                    StoreError::new(format!(
                        "Redis at {} did not answer TIME: {error}",
                        self.connection.url()
                    ))
                })?;
        let after = self.clock.now_millis();
        let app = before / 2 + after / 2;
        let redis = secs.saturating_mul(1000).saturating_add(micros / 1000);
        let offset = i128::from(app) - i128::from(redis);
        Ok(i64::try_from(offset).unwrap_or(if offset < 0 { i64::MIN } else { i64::MAX }))
    }

    /// Runs one script: one `EVALSHA`. When Redis lost its scripts
    /// (`NOSCRIPT`, e.g. after a restart), [`Script`] loads it and runs it
    /// again, and the next call is one `EVALSHA` again.
    async fn invoke<T: FromRedisValue>(
        &self,
        operation: StoreOperation,
        invocation: ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let invocation = &invocation;
        self.connection
            .run(|mut connection| async move { invocation.invoke_async(&mut connection).await })
            .await
            .map_err(|error| StoreError::new(error).during(operation))
    }

    /// [`invoke`](Self::invoke) for a write that is safe to send twice (it
    /// is owner-checked: recording the same owner's response again, or
    /// releasing a lock already released, changes nothing): sent once more
    /// when the connection failed under it.
    ///
    /// After Redis restarts or drops the connection, the first command over
    /// the old connection fails, and the manager reconnects only then. For
    /// the record write that first command is the one that matters: losing
    /// it loses the response and, once the lock lapses, runs the handler a
    /// second time.
    async fn invoke_twice_if_dropped<T: FromRedisValue>(
        &self,
        operation: StoreOperation,
        invocation: ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let invocation = &invocation;
        let attempt =
            |mut connection| async move { invocation.invoke_async(&mut connection).await };
        match self.connection.run(attempt).await {
            Err(error) if is_connection_level(&error) => {
                tracing::debug!(%error, ?operation, "Redis connection failed; sending the write again");
                self.connection.run(attempt).await
            }
            result => result,
        }
        .map_err(|error| StoreError::new(error).during(operation))
    }

    fn redis_key(&self, key: &str) -> String {
        format!("{}:{key}", self.prefix)
    }

    /// Every script's first argument: the time of a clock that overrides
    /// the store's (a test's), or empty for Redis's own.
    fn now_arg(&self) -> String {
        store_time_override(&*self.clock).map_or_else(String::new, |now| now.to_string())
    }
}

/// What the read script answers: the time it judged by, lock deadline,
/// record deadline, record, fingerprint, when the lock was taken.
type Fields = (
    u64,
    Option<u64>,
    Option<u64>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<u64>,
);

/// Whether `error` came from the connection (dropped, reset, timed out,
/// refused) rather than from Redis answering.
fn is_connection_level(error: &RedisError) -> bool {
    error.is_io_error() || error.is_connection_dropped() || error.is_timeout()
}

/// `ttl` in milliseconds, capped at [`MAX_TTL_MILLIS`].
fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).map_or(MAX_TTL_MILLIS, |ttl| ttl.min(MAX_TTL_MILLIS))
}

fn decode(
    record: Option<Vec<u8>>,
    fingerprint: Option<Vec<u8>>,
) -> Result<(IdempotencyRecord, Vec<u8>), StoreError> {
    match (record, fingerprint) {
        (Some(record), Some(fingerprint)) => Ok((
            IdempotencyRecord::decode(&record).map_err(StoreError::new)?,
            fingerprint,
        )),
        _ => Err(StoreError::new(
            "a live Redis idempotency record lacks its response or fingerprint",
        )),
    }
}

impl std::fmt::Debug for RedisIdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisIdempotencyStore")
            .field("url", &self.connection.url())
            .field("key_prefix", &self.prefix)
            .field("connected", &self.connection.is_connected())
            .finish_non_exhaustive()
    }
}

impl RedisIdempotencyStore {
    /// The key's deadlines, record, fingerprint and when its lock was taken,
    /// with the time to judge them by, in one script.
    async fn fields(&self, key: &str) -> Result<Fields, StoreError> {
        let mut invocation = SCRIPTS.read.key(self.redis_key(key));
        invocation.arg(self.now_arg());
        self.invoke(StoreOperation::Get, invocation).await
    }
}

impl IdempotencyStore for RedisIdempotencyStore {
    fn get<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<IdempotencyEntry>> {
        Box::pin(async move {
            let (now, lock_deadline, record_deadline, record, fingerprint, _) =
                self.fields(key).await?;
            let locked = lock_deadline.is_some_and(|d| d > now);
            if record_deadline.is_some_and(|d| d > now) {
                let (record, fingerprint) =
                    decode(record, fingerprint).map_err(|e| e.during(StoreOperation::Get))?;
                return Ok(Some(
                    IdempotencyEntry::completed(record, fingerprint).locked(locked),
                ));
            }
            Ok(locked.then(IdempotencyEntry::in_flight))
        })
    }

    /// One script, as [`get`](Self::get), keeping the deadlines and when
    /// the lock was taken.
    fn inspect<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<KeyState>> {
        Box::pin(async move {
            let (now, lock_deadline, record_deadline, record, fingerprint, taken) =
                self.fields(key).await?;
            let mut state = KeyState::observed(now);
            if let Some(deadline) = lock_deadline.filter(|&d| d > now) {
                state = state.locked_until(Some(deadline)).lock_taken(taken);
            }
            if let Some(deadline) = record_deadline.filter(|&d| d > now) {
                let (record, _) = decode(record, fingerprint)?;
                state = state.recorded(record, Some(deadline));
            }
            Ok((state.locked || state.record.is_some()).then_some(state))
        })
    }

    /// `DEL` of the key's one hash.
    fn evict<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, bool> {
        Box::pin(async move {
            let redis_key = self.redis_key(key);
            let redis_key = &redis_key;
            let removed: u64 = self
                .connection
                .run(|mut connection| async move {
                    redis::cmd("DEL")
                        .arg(redis_key)
                        .query_async(&mut connection)
                        .await
                })
                .await
                .map_err(StoreError::new)?;
            Ok(removed > 0)
        })
    }

    fn set<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        // A zero TTL would expire at once and let a duplicate in.
        if let Err(error) = super::check_ttl(ttl, StoreOperation::Set) {
            return Box::pin(std::future::ready(Err(error)));
        }
        Box::pin(self.record(key, owner, record, fingerprint, ttl, false))
    }

    fn try_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        // A zero TTL would expire at once and let a duplicate in.
        if let Err(error) = super::check_ttl(ttl, StoreOperation::TryLock) {
            return Box::pin(std::future::ready(Err(error)));
        }
        Box::pin(async move {
            let mut invocation = SCRIPTS.try_lock.key(self.redis_key(key));
            invocation
                .arg(self.now_arg())
                .arg(owner)
                .arg(ttl_millis(ttl));
            let locked: i64 = self.invoke(StoreOperation::TryLock, invocation).await?;
            Ok(locked == 1)
        })
    }

    fn unlock<'a>(&'a self, key: &'a str, owner: &'a str) -> IdempotencyFuture<'a, ()> {
        Box::pin(async move {
            let mut invocation = SCRIPTS.unlock.key(self.redis_key(key));
            invocation.arg(self.now_arg()).arg(owner);
            let _released: i64 = self
                .invoke_twice_if_dropped(StoreOperation::Unlock, invocation)
                .await?;
            Ok(())
        })
    }

    fn renew_lock<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        // A zero TTL would expire at once and let a duplicate in.
        if let Err(error) = super::check_ttl(ttl, StoreOperation::RenewLock) {
            return Box::pin(std::future::ready(Err(error)));
        }
        Box::pin(async move {
            let mut invocation = SCRIPTS.renew_lock.key(self.redis_key(key));
            invocation
                .arg(self.now_arg())
                .arg(owner)
                .arg(ttl_millis(ttl));
            let renewed: i64 = self.invoke(StoreOperation::RenewLock, invocation).await?;
            Ok(renewed == 1)
        })
    }

    /// Looks up and locks in one script: one command.
    fn claim<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        in_flight_ttl: Duration,
    ) -> IdempotencyFuture<'a, Claim> {
        // A zero TTL would expire at once and let a duplicate in.
        if let Err(error) = super::check_ttl(in_flight_ttl, StoreOperation::Get) {
            return Box::pin(std::future::ready(Err(error)));
        }
        Box::pin(async move {
            let mut invocation = SCRIPTS.claim.key(self.redis_key(key));
            invocation
                .arg(self.now_arg())
                .arg(owner)
                .arg(ttl_millis(in_flight_ttl));
            let (state, record, fingerprint): (i64, Option<Vec<u8>>, Option<Vec<u8>>) =
                self.invoke(StoreOperation::Get, invocation).await?;
            match state {
                0 => Ok(Claim::InFlight),
                1 => {
                    let (record, fingerprint) =
                        decode(record, fingerprint).map_err(|e| e.during(StoreOperation::Get))?;
                    Ok(Claim::Completed {
                        record,
                        fingerprint,
                    })
                }
                2 => Ok(Claim::Acquired),
                other => Err(StoreError::new(format!(
                    "unexpected answer {other} from the Redis claim script"
                ))
                .during(StoreOperation::Get)),
            }
        })
    }

    /// Records and unlocks in one script: one command. The lock is kept when
    /// the record could not be written.
    fn finish<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
    ) -> IdempotencyFuture<'a, bool> {
        // A zero TTL would expire at once and let a duplicate in.
        if let Err(error) = super::check_ttl(ttl, StoreOperation::Set) {
            return Box::pin(std::future::ready(Err(error)));
        }
        Box::pin(self.record(key, owner, record, fingerprint, ttl, true))
    }
}

impl RedisIdempotencyStore {
    /// `set`, or `finish` when `and_unlock`.
    async fn record(
        &self,
        key: &str,
        owner: &str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
        and_unlock: bool,
    ) -> Result<bool, StoreError> {
        let mut invocation = SCRIPTS.set.key(self.redis_key(key));
        invocation
            .arg(self.now_arg())
            .arg(owner)
            .arg(ttl_millis(ttl))
            .arg(record.encode())
            .arg(fingerprint)
            .arg(if and_unlock { "1" } else { "0" });
        let stored: i64 = self
            .invoke_twice_if_dropped(StoreOperation::Set, invocation)
            .await?;
        Ok(stored == 1)
    }
}

#[cfg(test)]
mod tests {
    use autumn_base::redact_passwords as redact;

    #[test]
    fn passwords_never_reach_an_error_message() {
        assert_eq!(
            redact("redis://user:secret@host:6379/2"),
            "redis://user:***@host:6379/2"
        );
        assert_eq!(redact("redis://:secret@host"), "redis://:***@host");
        // A lone user info is a user name, not a password: it stays.
        assert_eq!(redact("redis://app@host"), "redis://app@host");
        assert_eq!(
            redact("redis+unix:///tmp/r.sock?db=1&pass=secret"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("not a url"), "not a url");
    }
}
