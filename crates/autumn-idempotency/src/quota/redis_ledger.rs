//! [`RedisQuotaLedger`]: each caller's counts in Redis, shared by every
//! replica, so a caller holds its quota once for the whole fleet.
//!
//! A caller's counts are two keys with the same hash tag (one Redis
//! Cluster slot), `{prefix}:{subject}:i` and `{prefix}:{subject}:b`:
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `:i` | sorted set | each counted item, scored by when its count ends (ms, Redis's clock) |
//! | `:b` | hash | each recorded item's bytes, and their sum under `#` |
//!
//! Every decision is one script on those two keys: it forgets the counts
//! that ended, then decides. Both keys expire with their last count, so an
//! idle caller leaves nothing behind.

use std::sync::LazyLock;
use std::time::Duration;

use autumn_base::clock::{SharedClock, SystemClock, store_time_override};
use autumn_base::redis::RedisConnection;
use redis::Script;

use super::{QuotaLedger, QuotaLimits, Taken};
use crate::store::{IdempotencyFuture, StoreError};

/// What every script starts with: `now` (ARGV[1], else Redis's own clock),
/// forgetting the counts that ended, and keeping the keys as long as their
/// longest count (`keep`).
macro_rules! script {
    ($body:literal) => {
        concat!(
            r"
local items, sizes = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
if now == nil then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local ended = redis.call('ZRANGEBYSCORE', items, '-inf', now)
if #ended > 0 then
  local freed = 0
  for first = 1, #ended, 1000 do
    local last = math.min(first + 999, #ended)
    local chunk = {unpack(ended, first, last)}
    for _, size in ipairs(redis.call('HMGET', sizes, unpack(chunk))) do
      freed = freed + (tonumber(size) or 0)
    end
    redis.call('HDEL', sizes, unpack(chunk))
  end
  redis.call('ZREMRANGEBYSCORE', items, '-inf', now)
  if freed > 0 then redis.call('HINCRBY', sizes, '#', -freed) end
end
local function keep(hold)
  if redis.call('PTTL', items) < hold then redis.call('PEXPIRE', items, hold) end
  if redis.call('EXISTS', sizes) == 1 and redis.call('PTTL', sizes) < hold then
    redis.call('PEXPIRE', sizes, hold)
  end
end
",
            $body
        )
    };
}

/// ARGV: now, hold (ms), max records, max bytes, item. Returns
/// `{1, 0}` when counted, `{0, retry_after_ms}` when over.
const TAKE: &str = script!(
    r"
local hold, max_records, max_bytes, item = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local counted = redis.call('ZSCORE', items, item)
if counted then
  if tonumber(counted) < now + hold then redis.call('ZADD', items, now + hold, item) end
  keep(hold)
  return {1, 0}
end
local bytes = tonumber(redis.call('HGET', sizes, '#')) or 0
if redis.call('ZCARD', items) >= max_records or bytes >= max_bytes then
  local first = redis.call('ZRANGE', items, 0, 0, 'WITHSCORES')
  local wait = 0
  if first[2] then wait = tonumber(first[2]) - now end
  return {0, wait}
end
redis.call('ZADD', items, now + hold, item)
keep(hold)
return {1, 0}
"
);

/// ARGV: now, hold (ms), item, bytes.
const SETTLE: &str = script!(
    r"
local hold, item, bytes = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
redis.call('ZADD', items, now + hold, item)
local before = tonumber(redis.call('HGET', sizes, item)) or 0
if bytes ~= before then
  if bytes > 0 then redis.call('HSET', sizes, item, bytes) else redis.call('HDEL', sizes, item) end
  redis.call('HINCRBY', sizes, '#', bytes - before)
end
keep(hold)
return 1
"
);

/// ARGV: now, item.
const GIVE_BACK: &str = script!(
    r"
local item = ARGV[2]
if redis.call('ZREM', items, item) == 1 then
  local size = tonumber(redis.call('HGET', sizes, item)) or 0
  if size > 0 then
    redis.call('HDEL', sizes, item)
    redis.call('HINCRBY', sizes, '#', -size)
  end
end
return 1
"
);

static TAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TAKE));
static SETTLE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SETTLE));
static GIVE_BACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(GIVE_BACK));

/// Each caller's counts in Redis: one round trip per decision, the same
/// for every replica, by Redis's clock.
///
/// ```no_run
/// use autumn_base::redis::RedisConnection;
/// use autumn_idempotency::quota::RedisQuotaLedger;
///
/// let connection = RedisConnection::new("redis://127.0.0.1:6379")?;
/// let ledger = RedisQuotaLedger::new(connection, "myapp:quota");
/// # Ok::<(), autumn_base::redis::RedisError>(())
/// ```
pub struct RedisQuotaLedger {
    connection: RedisConnection,
    prefix: String,
    clock: SharedClock,
}

impl RedisQuotaLedger {
    /// Counts under keys starting with `prefix`, on `connection`.
    pub fn new(connection: RedisConnection, prefix: &str) -> Self {
        connection.load_on_connect(&[TAKE, SETTLE, GIVE_BACK]);
        Self {
            connection,
            prefix: prefix.to_owned(),
            clock: std::sync::Arc::new(SystemClock),
        }
    }

    /// Decides by `clock` when it overrides the store's time (a test's
    /// `ManualClock`); otherwise Redis's own clock decides.
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    fn now(&self) -> String {
        store_time_override(&*self.clock).map_or_else(String::new, |now| now.to_string())
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        subject: &str,
        args: &[String],
    ) -> Result<T, StoreError> {
        let mut invocation = script.key(format!("{}:{{{subject}}}:i", self.prefix));
        invocation.key(format!("{}:{{{subject}}}:b", self.prefix));
        invocation.arg(self.now());
        for arg in args {
            invocation.arg(arg);
        }
        let invocation = &invocation;
        self.connection
            .run(|mut connection| async move { invocation.invoke_async(&mut connection).await })
            .await
            .map_err(StoreError::new)
    }
}

impl std::fmt::Debug for RedisQuotaLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQuotaLedger")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn millis(duration: Duration) -> String {
    duration.as_millis().max(1).to_string()
}

impl QuotaLedger for RedisQuotaLedger {
    fn take<'a>(
        &'a self,
        subject: &'a str,
        item: &'a str,
        hold: Duration,
        limits: QuotaLimits,
    ) -> IdempotencyFuture<'a, Taken> {
        Box::pin(async move {
            let answer: Vec<i64> = self
                .run(
                    &TAKE_SCRIPT,
                    subject,
                    &[
                        millis(hold),
                        limits.max_records.to_string(),
                        limits.max_bytes.to_string(),
                        item.to_owned(),
                    ],
                )
                .await?;
            match answer[..] {
                [1, _] => Ok(Taken::Counted),
                [0, wait] => Ok(Taken::Over {
                    retry_after: Duration::from_millis(u64::try_from(wait).unwrap_or(0)),
                }),
                _ => Err(StoreError::new(format!(
                    "the quota script answered {answer:?}"
                ))),
            }
        })
    }

    fn settle<'a>(
        &'a self,
        subject: &'a str,
        item: &'a str,
        bytes: u64,
        hold: Duration,
    ) -> IdempotencyFuture<'a, ()> {
        Box::pin(async move {
            let _: i64 = self
                .run(
                    &SETTLE_SCRIPT,
                    subject,
                    &[millis(hold), item.to_owned(), bytes.to_string()],
                )
                .await?;
            Ok(())
        })
    }

    fn give_back<'a>(&'a self, subject: &'a str, item: &'a str) -> IdempotencyFuture<'a, ()> {
        Box::pin(async move {
            let _: i64 = self
                .run(&GIVE_BACK_SCRIPT, subject, &[item.to_owned()])
                .await?;
            Ok(())
        })
    }

    fn backend(&self) -> &'static str {
        "redis"
    }
}
