//! [`RedisSessionStore`]: sessions in Redis, one key each.

use std::sync::LazyLock;

use autumn_base::redis::RedisConnection;
use redis::Script;

use super::id::SessionId;
use super::store::{SaveOutcome, SessionFuture, SessionRecord, SessionStore, SessionStoreError};

/// [`SessionStore::save_unless_retired`] in one step: KEYS the session's
/// key; ARGV the encoded record and its time to live in milliseconds.
/// Returns 1 when it wrote, 0 when the stored record is retired (left as it
/// is). A stored value that is not a record this build can read is
/// overwritten, as a plain save would.
const SAVE_UNLESS_RETIRED: &str = r"
local stored = redis.call('GET', KEYS[1])
if stored then
  local ok, record = pcall(cjson.decode, stored)
  if ok and type(record) == 'table' and record.retired == true then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

static SAVE_UNLESS_RETIRED_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(SAVE_UNLESS_RETIRED));

/// Adds a session to its principal's set: KEYS the set; ARGV the session's
/// storage key and its time to live in milliseconds. The set lives as long
/// as its longest-lived member may.
const INDEX: &str = r"
redis.call('SADD', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
";

static INDEX_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(INDEX));

/// Retires one session of a principal, keeping its time to live: KEYS the
/// session's key; ARGV the principal and now (app clock, milliseconds).
/// Returns 1 when it retired the session, 0 when there was nothing live of
/// that principal under the key (expired, retired, or signed in as someone
/// else): a stale member of the set.
const RETIRE_OF: &str = r#"
local stored = redis.call('GET', KEYS[1])
if not stored then return 0 end
local ok, record = pcall(cjson.decode, stored)
if not ok or type(record) ~= 'table' or record.retired == true
  or record.principal ~= ARGV[1] or tonumber(record.exp) <= tonumber(ARGV[2]) then
  return 0
end
local retired = '{"data":{},"exp":' .. string.format('%.0f', record.exp)
  .. ',"retired":true,"v":1}'
redis.call('SET', KEYS[1], retired, 'KEEPTTL')
return 1
"#;

static RETIRE_OF_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RETIRE_OF));

/// Sessions in Redis, shared by every replica of an app.
///
/// Each session is one Redis string, `{key_prefix}:{storage_key}` (the
/// [`SessionId::storage_key`] hash, never the id itself), holding the
/// [`SessionRecord::encode`]d record and set to expire in Redis when the
/// record does; a load also checks the record's expiry against the app
/// clock, so a record Redis has not dropped yet is never returned late.
/// Every operation is one command (`GET`, `SET .. PX`, `DEL`), and
/// [`save_unless_retired`](SessionStore::save_unless_retired) one `EVALSHA`
/// of a Lua script that reads the stored record and writes only when it is
/// not retired, so no other write comes between the two (it touches one
/// key: it runs on Redis Cluster too).
///
/// The store works on a [`RedisConnection`], normally the one the
/// idempotency store already uses: building it does not connect, and while
/// Redis is unreachable every operation fails fast with a
/// [`SessionStoreError`] naming the Redis (its password masked). Its script
/// is loaded when the connection is made (or on first use, when it already
/// was).
///
/// ```no_run
/// use autumn_core::session::{RedisSessionStore, SessionId, SessionRecord, SessionStore};
/// use autumn_base::redis::RedisConnection;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = RedisConnection::new("redis://127.0.0.1:6379")?;
/// let store = RedisSessionStore::new(redis, "myapp:session");
/// let id = SessionId::generate();
/// let now = 1_000;
/// store.save(&id, &SessionRecord::new(Default::default(), now + 60_000), now).await?;
/// assert!(store.load(&id, now).await?.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisSessionStore {
    connection: RedisConnection,
    prefix: String,
}

impl RedisSessionStore {
    /// A store on `connection` keeping its keys under `key_prefix:`. Does
    /// not connect.
    #[must_use]
    pub fn new(connection: RedisConnection, key_prefix: &str) -> Self {
        connection.load_on_connect(&[SAVE_UNLESS_RETIRED, INDEX, RETIRE_OF]);
        Self {
            connection,
            prefix: key_prefix.to_owned(),
        }
    }

    /// The connection the store uses.
    pub fn connection(&self) -> &RedisConnection {
        &self.connection
    }

    /// The Redis key `id`'s record lives under.
    fn redis_key(&self, id: &SessionId) -> String {
        format!("{}:{}", self.prefix, id.storage_key())
    }

    /// The Redis key of `principal`'s set of sessions: a hash of the
    /// principal, so any string is a valid key.
    fn principal_key(&self, principal: &str) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(principal.as_bytes());
        format!("{}:principal:{}", self.prefix, hex::encode(digest))
    }

    /// Puts a signed-in record's session in its principal's set, before the
    /// record is written: a session that exists is always in the set (a
    /// member whose record never came is pruned by the next
    /// `end_sessions_of`).
    async fn index(
        &self,
        id: &SessionId,
        record: &SessionRecord,
        ttl: u64,
    ) -> Result<(), SessionStoreError> {
        let Some(principal) = record.principal.as_deref().filter(|_| !record.retired) else {
            return Ok(());
        };
        let mut invocation = INDEX_SCRIPT.key(self.principal_key(principal));
        invocation.arg(id.storage_key()).arg(ttl);
        let invocation = &invocation;
        self.connection
            .run(|mut connection| async move {
                invocation.invoke_async::<i64>(&mut connection).await
            })
            .await
            .map_err(|error| self.error("index", &error))?;
        Ok(())
    }

    /// A Redis failure during `operation`, naming the Redis.
    fn error(&self, operation: &str, error: &redis::RedisError) -> SessionStoreError {
        // The URL is already masked; the error's own text may quote the
        // URL it failed on, so it is masked too.
        SessionStoreError::new(autumn_base::redact_passwords(&format!(
            "Redis at {} failed to {operation} a session: {error}",
            self.connection.url()
        )))
    }
}

impl std::fmt::Debug for RedisSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSessionStore")
            .field("url", &self.connection.url())
            .field("key_prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl SessionStore for RedisSessionStore {
    fn load<'a>(
        &'a self,
        id: &'a SessionId,
        now_millis: u64,
    ) -> SessionFuture<'a, Option<SessionRecord>> {
        Box::pin(async move {
            let key = &self.redis_key(id);
            let bytes: Option<Vec<u8>> = self
                .connection
                .run(|mut connection| async move {
                    redis::cmd("GET")
                        .arg(key)
                        .query_async(&mut connection)
                        .await
                })
                .await
                .map_err(|error| self.error("load", &error))?;
            match bytes {
                Some(bytes) => {
                    let record = SessionRecord::decode(&bytes)?;
                    Ok((record.expires_at_millis > now_millis).then_some(record))
                }
                None => Ok(None),
            }
        })
    }

    fn save<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, ()> {
        Box::pin(async move {
            let key = &self.redis_key(id);
            let bytes = &record.encode();
            // At least 1 ms: PX refuses 0, and a record already expired is
            // never loaded anyway (load checks the app clock).
            let ttl = record.expires_at_millis.saturating_sub(now_millis).max(1);
            self.index(id, record, ttl).await?;
            self.connection
                .run(|mut connection| async move {
                    redis::cmd("SET")
                        .arg(key)
                        .arg(bytes)
                        .arg("PX")
                        .arg(ttl)
                        .query_async::<()>(&mut connection)
                        .await
                })
                .await
                .map_err(|error| self.error("save", &error))
        })
    }

    fn save_unless_retired<'a>(
        &'a self,
        id: &'a SessionId,
        record: &'a SessionRecord,
        now_millis: u64,
    ) -> SessionFuture<'a, SaveOutcome> {
        Box::pin(async move {
            let mut invocation = SAVE_UNLESS_RETIRED_SCRIPT.key(self.redis_key(id));
            // At least 1 ms, as for `save`.
            let ttl = record.expires_at_millis.saturating_sub(now_millis).max(1);
            self.index(id, record, ttl).await?;
            invocation.arg(record.encode()).arg(ttl);
            let invocation = &invocation;
            let written: i64 = self
                .connection
                .run(|mut connection| async move { invocation.invoke_async(&mut connection).await })
                .await
                .map_err(|error| self.error("save", &error))?;
            Ok(if written == 1 {
                SaveOutcome::Written
            } else {
                SaveOutcome::Retired
            })
        })
    }

    fn delete<'a>(&'a self, id: &'a SessionId) -> SessionFuture<'a, ()> {
        Box::pin(async move {
            let key = &self.redis_key(id);
            self.connection
                .run(|mut connection| async move {
                    redis::cmd("DEL")
                        .arg(key)
                        .query_async::<()>(&mut connection)
                        .await
                })
                .await
                .map_err(|error| self.error("delete", &error))
        })
    }

    /// Reads the principal's set, then retires each member with one script
    /// on the member's own key, and drops from the set the members that
    /// were ended or held nothing live of the principal. Every command
    /// touches one key, so this runs on Redis Cluster too.
    fn end_sessions_of<'a>(
        &'a self,
        principal: &'a str,
        except: Option<&'a SessionId>,
        now_millis: u64,
    ) -> SessionFuture<'a, u64> {
        Box::pin(async move {
            let set = &self.principal_key(principal);
            let members: Vec<String> = self
                .connection
                .run(|mut connection| async move {
                    redis::cmd("SMEMBERS")
                        .arg(set)
                        .query_async(&mut connection)
                        .await
                })
                .await
                .map_err(|error| self.error("end", &error))?;
            let kept = except.map(SessionId::storage_key);
            let mut ended = 0;
            let mut gone = Vec::new();
            for member in members {
                if kept.as_ref() == Some(&member) {
                    continue;
                }
                let mut invocation = RETIRE_OF_SCRIPT.key(format!("{}:{member}", self.prefix));
                invocation.arg(principal).arg(now_millis);
                let invocation = &invocation;
                let retired: i64 =
                    self.connection
                        .run(|mut connection| async move {
                            invocation.invoke_async(&mut connection).await
                        })
                        .await
                        .map_err(|error| self.error("end", &error))?;
                ended += u64::from(retired == 1);
                gone.push(member);
            }
            if !gone.is_empty() {
                let gone = &gone;
                self.connection
                    .run(|mut connection| async move {
                        redis::cmd("SREM")
                            .arg(set)
                            .arg(gone)
                            .query_async::<()>(&mut connection)
                            .await
                    })
                    .await
                    .map_err(|error| self.error("end", &error))?;
            }
            Ok(ended)
        })
    }
}
