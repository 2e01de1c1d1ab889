//! Where the counts live: [`MemoryBuckets`] for one process, and (feature
//! `redis`) [`RedisBuckets`] for replicas sharing a Redis, so a limit of N
//! holds for the whole fleet, not per replica.

use std::collections::HashMap;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::Mutex;

use autumn_base::clock::SharedClock;

use super::gcra::{Decision, Rate, decide};

/// A decision's future.
pub(crate) type DecisionFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Decision, BucketError>> + Send + 'a>>;

/// Why a rule's count could not be read.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum BucketError {
    /// The memory backend counts as many clients as it may.
    #[error(
        "the rate-limit memory backend counts its {0} clients already (`rate_limit.max_clients`)"
    )]
    Full(usize),
    /// Redis could not be reached or refused the script.
    #[error("the rate-limit counts in Redis could not be read: {0}")]
    Unreachable(String),
}

/// The buckets of every rule, by bucket name (`rule:digest-of-client`).
pub(crate) trait Buckets: Send + Sync + 'static {
    /// Decides one request on `bucket` at `rate`: one round trip.
    fn decide<'a>(&'a self, bucket: &'a str, rate: Rate) -> DecisionFuture<'a>;

    /// `"memory"` or `"redis"`, for the metrics and the startup report.
    fn backend(&self) -> &'static str;
}

/// Shards of the memory backend: a decision locks one of them, briefly.
const SHARDS: usize = 16;

/// Buckets in this process's memory, each dropped once full again (its
/// TAT passed), at most `max_entries` live at once.
pub(crate) struct MemoryBuckets {
    shards: Vec<Mutex<HashMap<Box<str>, u64>>>,
    /// Picks a bucket's shard.
    hasher: std::collections::hash_map::RandomState,
    max_per_shard: usize,
    max_entries: usize,
    clock: SharedClock,
}

impl MemoryBuckets {
    pub(crate) fn new(max_entries: usize, clock: SharedClock) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            max_per_shard: max_entries.div_ceil(SHARDS).max(1),
            max_entries,
            clock,
        }
    }

    fn shard(&self, bucket: &str) -> &Mutex<HashMap<Box<str>, u64>> {
        // The modulo keeps the index below SHARDS, so the cast loses nothing.
        #[expect(
            clippy::cast_possible_truncation,
            reason = "reduced modulo SHARDS first"
        )]
        let index = (self.hasher.hash_one(bucket) % SHARDS as u64) as usize;
        &self.shards[index]
    }

    /// The decision, synchronously: no await holds the lock.
    fn decide_now(&self, bucket: &str, rate: Rate) -> Result<Decision, BucketError> {
        let now = self.clock.now_millis();
        // A poisoned shard is still a map of numbers.
        let mut shard = self
            .shard(bucket)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tat = shard.get(bucket).copied().filter(|tat| *tat > now);
        if tat.is_none() && shard.len() >= self.max_per_shard {
            // Full buckets are worth nothing: a missing one is the same.
            shard.retain(|_, tat| *tat > now);
            if shard.len() >= self.max_per_shard {
                return Err(BucketError::Full(self.max_entries));
            }
        }
        let (decision, next) = decide(rate, tat, now);
        if decision.allowed {
            // A client already counted keeps its name: no allocation.
            match shard.get_mut(bucket) {
                Some(kept) => *kept = next,
                None => {
                    shard.insert(bucket.into(), next);
                }
            }
        }
        Ok(decision)
    }
}

impl Buckets for MemoryBuckets {
    fn decide<'a>(&'a self, bucket: &'a str, rate: Rate) -> DecisionFuture<'a> {
        let decided = self.decide_now(bucket, rate);
        Box::pin(std::future::ready(decided))
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}

#[cfg(feature = "redis")]
pub(crate) use redis_buckets::RedisBuckets;

#[cfg(feature = "redis")]
mod redis_buckets {
    use std::sync::LazyLock;

    use autumn_base::clock::{SharedClock, store_time_override};
    use autumn_base::redis::RedisConnection;
    use redis::Script;

    use super::{BucketError, Buckets, Decision, DecisionFuture, Rate};

    /// One decision, the same arithmetic as `gcra::decide`: KEYS the
    /// bucket; ARGV the interval and the tolerance in milliseconds, and
    /// now (empty: Redis's own time, so no replica's clock decides).
    /// Returns allowed (1 or 0), remaining, retry-after and reset in
    /// milliseconds. One key, so a Redis Cluster runs it on its slot.
    const DECIDE: &str = r"
local now = tonumber(ARGV[3])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local ahead = tat - now
if ahead > tolerance then
  return {0, 0, ahead - tolerance, ahead}
end
local new_tat = tat + interval
local used = new_tat - now
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', string.format('%.0f', used))
return {1, math.floor((tolerance + interval - used) / interval), 0, used}
";

    static DECIDE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(DECIDE));

    /// Buckets in Redis, one string each under `{prefix}:{bucket}`, set to
    /// expire when the bucket is full again.
    pub(crate) struct RedisBuckets {
        connection: RedisConnection,
        prefix: String,
        clock: SharedClock,
    }

    impl RedisBuckets {
        pub(crate) fn new(connection: RedisConnection, prefix: &str, clock: SharedClock) -> Self {
            connection.load_on_connect(&[DECIDE]);
            Self {
                connection,
                prefix: prefix.to_owned(),
                clock,
            }
        }
    }

    impl Buckets for RedisBuckets {
        fn decide<'a>(&'a self, bucket: &'a str, rate: Rate) -> DecisionFuture<'a> {
            Box::pin(async move {
                let now = store_time_override(&*self.clock)
                    .map_or_else(String::new, |now| now.to_string());
                let mut invocation = DECIDE_SCRIPT.key(format!("{}:{bucket}", self.prefix));
                invocation
                    .arg(rate.interval_ms)
                    .arg(rate.tolerance_ms)
                    .arg(now);
                let invocation = &invocation;
                let answer: Vec<u64> =
                    self.connection
                        .run(|mut connection| async move {
                            invocation.invoke_async(&mut connection).await
                        })
                        .await
                        .map_err(|error| BucketError::Unreachable(error.to_string()))?;
                match answer[..] {
                    [allowed, remaining, retry_after_ms, reset_ms] => Ok(Decision {
                        allowed: allowed == 1,
                        remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
                        retry_after_ms,
                        reset_ms,
                    }),
                    _ => Err(BucketError::Unreachable(format!(
                        "the rate-limit script answered {answer:?}"
                    ))),
                }
            })
        }

        fn backend(&self) -> &'static str {
            "redis"
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use autumn_base::clock::ManualClock;

    use super::*;

    #[test]
    fn a_full_memory_backend_forgets_full_buckets_before_refusing() {
        let clock = Arc::new(ManualClock::starting_at(0));
        // Room for one bucket a shard.
        let buckets = MemoryBuckets::new(SHARDS, clock.clone());
        let rate = Rate::new(1, 1, 1);
        let names = (0..).map(|n| format!("r:{n}"));
        let mut refused = None;
        for name in names.take(SHARDS * 8) {
            match buckets.decide_now(&name, rate) {
                Ok(decision) => assert!(decision.allowed),
                Err(error) => {
                    refused = Some((name, error));
                    break;
                }
            }
        }
        let (name, error) = refused.expect("a shard fills up before 128 clients");
        assert!(matches!(error, BucketError::Full(16)), "{error}");
        // A second later every bucket is full again, so there is room.
        clock.advance(std::time::Duration::from_secs(1));
        assert!(buckets.decide_now(&name, rate).expect("room").allowed);
    }
}
