//! [`RedisConnection`]: one lazily made, reconnecting connection to Redis
//! (one server, or a Redis Cluster), shared by every store of an app that
//! uses that Redis.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::RedisError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use tokio::sync::OnceCell;

use super::error::RedisError as ConnectionError;
use super::tls::{RedisTls, ensure_crypto_provider};
use super::url::{RedisTarget, is_tls, parse as parse_url};
use crate::redact::redact_passwords as redact;

/// How long connecting to Redis may take before the attempt gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one command may wait for its answer.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Reconnection attempts after the first one fails, per connection: none,
/// so that a request waiting on a reconnect waits [`CONNECT_TIMEOUT`] at
/// most, as documented; the next command after a failed attempt makes
/// another.
const CONNECT_RETRIES: usize = 0;
/// How many times the cluster client sends a command again after a node
/// failed to answer (or answered `MOVED`/`TRYAGAIN`/`CLUSTERDOWN`), within
/// [`RESPONSE_TIMEOUT`] overall: enough to follow a slot to its new owner
/// after a failover, few enough that a request fails within the timeout
/// rather than queueing behind an outage.
const CLUSTER_RETRIES: u32 = 3;

/// A live connection: to one Redis, or to a Redis Cluster. Cheap to clone;
/// clones share the underlying sockets. Run commands on it as on any
/// [`redis::aio::ConnectionLike`].
///
/// On a cluster, a command goes to the master that owns its key's slot
/// (following `MOVED` after a failover or resharding), so a command or Lua
/// script must touch keys of one slot only; every framework store's does.
#[derive(Clone)]
#[non_exhaustive]
pub enum RedisLink {
    /// One Redis server (or a proxy that looks like one).
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for RedisLink {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}

impl std::fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "RedisLink::Single",
            Self::Cluster(_) => "RedisLink::Cluster",
        })
    }
}

/// What a [`RedisConnection`] connects with.
enum Client {
    // Both boxed: with TLS parameters the single client is large too, and
    // the enum is only ever read through a reference.
    Single(Box<redis::Client>),
    Cluster(Box<ClusterClient>),
}

/// A connection to one Redis or to a Redis Cluster, made on first use and
/// shared by its clones.
///
/// Cloning is cheap and every clone uses the same underlying connection (a
/// reconnecting [`ConnectionManager`], which multiplexes commands, or a
/// [`ClusterConnection`], which keeps one such socket per node): the
/// idempotency store and the session store of an app hand each other a clone
/// rather than each opening their own.
///
/// Building it does not connect. The first command connects, with every
/// caller that arrives meanwhile waiting for that one attempt and sharing
/// its outcome, so with Redis unreachable requests fail fast rather than
/// each spending a whole connect timeout (2 s) in turn. Once made, the
/// connection re-makes itself when Redis comes back after an outage; on a
/// cluster it follows slots to their new master after a failover.
///
/// ```no_run
/// use autumn_base::redis::{RedisConnection, RedisError};
///
/// # async fn launch() -> Result<(), RedisError> {
/// let redis = RedisConnection::new("redis://127.0.0.1:6379")?;
/// redis.ping().await?; // fail at launch, not on the first request
/// // Hand clones to the stores: they share the one connection.
/// let for_sessions = redis.clone();
/// # let _ = for_sessions;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisConnection {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// The URL with any password masked: safe to log.
    url: String,
    /// Whether the URL asks for TLS (`rediss://`, `rediss+cluster://`).
    tls: bool,
    manager: OnceCell<RedisLink>,
    /// Held while a first connection is attempted; holds the last failed
    /// attempt's error.
    connecting: tokio::sync::Mutex<String>,
    /// How many first-connection attempts have failed.
    connect_failures: AtomicU64,
    /// Lua scripts to load as part of connecting (see
    /// [`RedisConnection::load_on_connect`]).
    scripts: Mutex<Vec<&'static str>>,
}

impl RedisConnection {
    /// A connection to the Redis at `url`: one server
    /// (`redis://[user:password@]host:port[/db]`, `rediss://` for TLS, or
    /// `redis+unix:///path`), or a Redis Cluster given by one or more of its
    /// nodes (`redis+cluster://[user:password@]host1:port1,host2:port2`,
    /// `rediss+cluster://` for TLS to every node; the client learns the
    /// others from them). A `user` is an ACL user (`AUTH user password`);
    /// without one the password is the default user's. Over TLS the
    /// server's certificate is verified against the built-in webpki roots,
    /// and its name against the URL's host; see
    /// [`with_tls`](Self::with_tls) for a private CA or a client
    /// certificate. Does not connect.
    ///
    /// ```
    /// use autumn_base::redis::RedisConnection;
    ///
    /// // Nothing listens there: building the connection still succeeds.
    /// assert!(RedisConnection::new("redis://127.0.0.1:1").is_ok());
    /// assert!(RedisConnection::new("redis+cluster://127.0.0.1:1,127.0.0.1:2").is_ok());
    /// assert!(RedisConnection::new("rediss://app:secret@127.0.0.1:6380").is_ok_and(|c| c.is_tls()));
    /// let error = RedisConnection::new("http://:secret@localhost").unwrap_err();
    /// assert!(!error.to_string().contains("secret"));
    /// ```
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidUrl`](ConnectionError::InvalidUrl) naming the
    /// URL (its password masked) when it is not a Redis URL.
    pub fn new(url: &str) -> Result<Self, ConnectionError> {
        Self::with_tls(url, &RedisTls::new())
    }

    /// [`new`](Self::new), trusting and presenting the files of `tls`: a
    /// CA file replaces the built-in roots; a client certificate and key are
    /// presented to a server that asks for them. The files are read and
    /// checked here, so a missing or malformed one fails now, naming it.
    ///
    /// ```no_run
    /// use autumn_base::redis::{RedisConnection, RedisTls};
    ///
    /// # fn build() -> Result<(), autumn_base::redis::RedisError> {
    /// let tls = RedisTls::new().with_ca_file("/etc/redis/ca.pem");
    /// let redis = RedisConnection::with_tls("rediss://cache.internal:6380", &tls)?;
    /// # let _ = redis;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidUrl`](ConnectionError::InvalidUrl) when `url` is
    /// not a Redis URL;
    /// [`RedisError::TlsFile`](ConnectionError::TlsFile) naming a file that
    /// cannot be read or parsed;
    /// [`RedisError::TlsIncomplete`](ConnectionError::TlsIncomplete) for a
    /// certificate without its key (or the reverse);
    /// [`RedisError::TlsWithoutRediss`](ConnectionError::TlsWithoutRediss)
    /// when files are given for a URL that does not use TLS.
    pub fn with_tls(url: &str, tls: &RedisTls) -> Result<Self, ConnectionError> {
        let redacted = redact(url);
        let secure = is_tls(url);
        if !tls.is_empty() && !secure {
            return Err(ConnectionError::TlsWithoutRediss { url: redacted });
        }
        let certificates = tls.load()?;
        if secure {
            ensure_crypto_provider();
        }
        let client = open(url, certificates).map_err(|reason| ConnectionError::InvalidUrl {
            url: redacted.clone(),
            reason,
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                url: redacted,
                tls: secure,
                manager: OnceCell::new(),
                connecting: tokio::sync::Mutex::new(String::new()),
                connect_failures: AtomicU64::new(0),
                scripts: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The URL, with any password masked: what error messages and logs name.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// Checks that `url` is a Redis URL [`new`](Self::new) accepts, without
    /// building anything: the launch check of `idempotency.redis.url`. The
    /// error says why, and never contains the password.
    ///
    /// ```
    /// use autumn_base::redis::RedisConnection;
    ///
    /// assert!(RedisConnection::check_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7000").is_ok());
    /// let error = RedisConnection::check_url("redis+cluster://:secret@").unwrap_err();
    /// assert!(error.contains("no node"), "{error}");
    /// assert!(!error.contains("secret"));
    /// ```
    ///
    /// # Errors
    ///
    /// Why `url` is not a usable Redis URL.
    pub fn check_url(url: &str) -> Result<(), String> {
        if is_tls(url) {
            ensure_crypto_provider();
        }
        open(url, None).map(drop).map_err(|error| redact(&error))
    }

    /// Whether the connection is made over TLS (a `rediss://` or
    /// `rediss+cluster://` URL).
    pub fn is_tls(&self) -> bool {
        self.inner.tls
    }

    /// Whether this connects to a Redis Cluster (a `redis+cluster://` URL).
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.client, Client::Cluster(_))
    }

    /// Whether the connection has been made (it is made on first use).
    pub fn is_connected(&self) -> bool {
        self.inner.manager.initialized()
    }

    /// Has `scripts` loaded (`SCRIPT LOAD`) as part of making the
    /// connection, so that the first call of each is one `EVALSHA`. Scripts
    /// registered after the connection was made, or lost by Redis later (a
    /// restart), are loaded on first use by [`redis::Script`] instead.
    pub fn load_on_connect(&self, scripts: &[&'static str]) {
        // A poisoned list is still a list of scripts.
        let mut registered = self
            .inner
            .scripts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for script in scripts {
            if !registered.contains(script) {
                registered.push(script);
            }
        }
    }

    /// The connection, made on first use (cheap to clone; commands on clones
    /// are multiplexed on one socket per server).
    ///
    /// One attempt at a time, and every caller that waited for an attempt
    /// shares its outcome. The attempt as a whole (connecting and loading
    /// the scripts) is bounded by the connect timeout.
    ///
    /// # Errors
    ///
    /// The [`RedisError`] of a failed attempt.
    pub async fn link(&self) -> Result<RedisLink, RedisError> {
        let inner = &*self.inner;
        if let Some(manager) = inner.manager.get() {
            return Ok(manager.clone());
        }
        let failures_before = inner.connect_failures.load(Ordering::Acquire);
        let mut last_failure = inner.connecting.lock().await;
        if let Some(manager) = inner.manager.get() {
            return Ok(manager.clone());
        }
        if inner.connect_failures.load(Ordering::Acquire) != failures_before {
            // An attempt ended while we waited for it: its answer is ours.
            return Err(shared_failure(&last_failure));
        }
        let attempt = match tokio::time::timeout(CONNECT_TIMEOUT, self.connect()).await {
            Ok(attempt) => attempt,
            Err(_elapsed) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection to Redis within {CONNECT_TIMEOUT:?}"),
            ))),
        };
        match attempt {
            Ok(manager) => {
                // Only this task sets it, under the lock: it cannot be set.
                let _ = inner.manager.set(manager.clone());
                Ok(manager)
            }
            Err(error) => {
                *last_failure = error.to_string();
                inner.connect_failures.fetch_add(1, Ordering::Release);
                Err(error)
            }
        }
    }

    /// One connection attempt: the connection, then the registered scripts.
    async fn connect(&self) -> Result<RedisLink, RedisError> {
        let scripts = self
            .inner
            .scripts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match &self.inner.client {
            Client::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(CONNECT_RETRIES)
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(Duration::from_millis(200));
                let mut manager =
                    ConnectionManager::new_with_config((**client).clone(), config).await?;
                if !scripts.is_empty() {
                    let mut load = redis::pipe();
                    for code in scripts {
                        load.cmd("SCRIPT").arg("LOAD").arg(code);
                    }
                    let _hashes: Vec<String> = load.query_async(&mut manager).await?;
                }
                Ok(RedisLink::Single(manager))
            }
            Client::Cluster(client) => {
                let mut connection = client.get_async_connection().await?;
                // The cluster client sends `SCRIPT LOAD` to every node,
                // replicas included, so a replica promoted by a failover
                // already has them. One command per script: a cluster
                // pipeline cannot hold commands bound for every node.
                for code in scripts {
                    let _hash: String = redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(code)
                        .query_async(&mut connection)
                        .await?;
                }
                Ok(RedisLink::Cluster(connection))
            }
        }
    }

    /// Runs `attempt` on the connection, once more when the first try could
    /// not even connect (nothing reached Redis, so nothing ran twice): the
    /// reconnecting manager hands out its last failed attempt once after
    /// Redis is back.
    ///
    /// ```no_run
    /// # async fn get() -> Result<(), Box<dyn std::error::Error>> {
    /// use autumn_base::redis::RedisConnection;
    ///
    /// let redis = RedisConnection::new("redis://127.0.0.1:6379")?;
    /// let value: Option<Vec<u8>> = redis
    ///     .run(|mut connection| async move {
    ///         redis::cmd("GET").arg("some-key").query_async(&mut connection).await
    ///     })
    ///     .await?;
    /// # let _ = value;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The [`RedisError`] of connecting or of `attempt`.
    pub async fn run<T, F, Fut>(&self, attempt: F) -> Result<T, RedisError>
    where
        F: Fn(RedisLink) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let once = || async { attempt(self.link().await?).await };
        match once().await {
            Err(error) if error.is_connection_refusal() => once().await,
            result => result,
        }
    }

    /// Connects (when not yet connected, loading the registered scripts)
    /// and asks Redis for a `PONG`: the launch health check. Its error names
    /// the URL, with any password masked.
    ///
    /// ```no_run
    /// # async fn check() -> Result<(), autumn_base::redis::RedisError> {
    /// use autumn_base::redis::RedisConnection;
    ///
    /// RedisConnection::new("redis://127.0.0.1:6379")?.ping().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`RedisError::NoAnswer`](ConnectionError::NoAnswer) when Redis
    /// cannot be reached or does not answer,
    /// [`RedisError::AuthenticationFailed`](ConnectionError::AuthenticationFailed)
    /// when it refuses the URL's user and password,
    /// [`RedisError::UnexpectedPong`](ConnectionError::UnexpectedPong) when
    /// it answers something else.
    pub async fn ping(&self) -> Result<(), ConnectionError> {
        let pong: String =
            self.run(|mut connection| async move {
                redis::cmd("PING").query_async(&mut connection).await
            })
            .await
            .map_err(|error| {
                // The client drops the server's reason (`WRONGPASS ...`):
                // say what it means instead of "authentication failed".
                if error.kind() == redis::ErrorKind::AuthenticationFailed {
                    ConnectionError::AuthenticationFailed {
                        url: self.url().to_owned(),
                    }
                } else {
                    ConnectionError::NoAnswer {
                        url: self.url().to_owned(),
                        command: "PING",
                        error,
                    }
                }
            })?;
        if pong == "PONG" {
            Ok(())
        } else {
            Err(ConnectionError::UnexpectedPong {
                url: self.url().to_owned(),
                answer: pong,
            })
        }
    }

    /// The health check: on one server, [`ping`](Self::ping); on a Redis
    /// Cluster, `PING` and then the cluster's own view of itself, so that a
    /// master that is down with no replica taking over shows here rather
    /// than only as failing requests for the keys of its slots.
    ///
    /// On a cluster it asks one node for the slot map (`CLUSTER SLOTS`),
    /// then asks `CLUSTER INFO` of each master in it at once, routed by one
    /// of the master's slots (a master the client has lost is asked through
    /// another node instead). One node's view can lag behind the others',
    /// so the check fails as soon as any master that answers reports a
    /// `cluster_state` other than `ok`. A master that does not answer is not
    /// a failure by itself: the cluster decides, within its node timeout,
    /// whether that node is gone, and then reports `fail` until a replica
    /// takes over. The error names the URL (password masked) and the state.
    ///
    /// ```no_run
    /// # async fn check() -> Result<(), autumn_base::redis::RedisError> {
    /// use autumn_base::redis::RedisConnection;
    ///
    /// RedisConnection::new("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")?
    ///     .health_check()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`RedisError`](ConnectionError) when Redis cannot be reached or
    /// does not answer, or when a cluster reports that it is not serving
    /// every slot.
    pub async fn health_check(&self) -> Result<(), ConnectionError> {
        self.ping().await?;
        if !self.is_cluster() {
            return Ok(());
        }
        let did_not_answer = |command: &'static str, error: RedisError| ConnectionError::NoAnswer {
            url: self.url().to_owned(),
            command,
            error,
        };
        let slots = self
            .run(|mut connection| async move {
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async::<redis::Value>(&mut connection)
                    .await
            })
            .await
            .map_err(|error| did_not_answer("CLUSTER SLOTS", error))?;
        let RedisLink::Cluster(connection) = self
            .link()
            .await
            .map_err(|error| did_not_answer("CLUSTER INFO", error))?
        else {
            return Ok(());
        };
        let asks = one_slot_per_master(&slots).into_iter().map(|slot| {
            let mut connection = connection.clone();
            async move {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(slot, SlotAddr::Master),
                ));
                let mut command = redis::cmd("CLUSTER");
                command.arg("INFO");
                let info = connection.route_command(command, routing).await?;
                Ok(redis::from_redis_value::<String>(info)?)
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        cluster_verdict(self.url(), answers)
    }
}

/// One slot of each master in a `CLUSTER SLOTS` answer (a master may own
/// several ranges), to route a command to every master by. Masters are told
/// apart by node id, or by address where the answer has no id.
fn one_slot_per_master(slots: &redis::Value) -> Vec<u16> {
    let redis::Value::Array(ranges) = slots else {
        return Vec::new();
    };
    let mut seen: Vec<&redis::Value> = Vec::new();
    let mut chosen = Vec::new();
    for range in ranges {
        let redis::Value::Array(fields) = range else {
            continue;
        };
        let (Some(redis::Value::Int(start)), Some(redis::Value::Array(master))) =
            (fields.first(), fields.get(2))
        else {
            continue;
        };
        let Ok(start) = u16::try_from(*start) else {
            continue;
        };
        let identity = master.get(2).unwrap_or(&fields[2]);
        if !seen.contains(&identity) {
            seen.push(identity);
            chosen.push(start);
        }
    }
    chosen
}

/// The health of a cluster from its masters' `CLUSTER INFO` answers: down
/// when any master that answered reports a state other than `ok`, or when
/// none answered.
fn cluster_verdict(
    url: &str,
    answers: Vec<Result<String, RedisError>>,
) -> Result<(), ConnectionError> {
    let asked = answers.len();
    let mut states: Vec<String> = Vec::new();
    let mut not_ok = 0;
    let mut silent: Vec<RedisError> = Vec::new();
    for answer in answers {
        match answer {
            Ok(info) => {
                let state = info
                    .lines()
                    .find_map(|line| line.trim().strip_prefix("cluster_state:"))
                    .unwrap_or("unknown");
                if state != "ok" {
                    not_ok += 1;
                    let state = format!("cluster_state:{state}");
                    if !states.contains(&state) {
                        states.push(state);
                    }
                }
            }
            Err(error) => silent.push(error),
        }
    }
    if not_ok > 0 {
        return Err(ConnectionError::ClusterDown {
            url: url.to_owned(),
            states,
            not_ok,
            answered: asked - silent.len(),
            unanswered: silent.len(),
        });
    }
    if !silent.is_empty() && silent.len() == asked {
        let mut silent = silent;
        let error = silent.swap_remove(0);
        return Err(ConnectionError::ClusterSilent {
            url: url.to_owned(),
            error,
        });
    }
    Ok(())
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("url", &self.inner.url)
            .field("cluster", &self.is_cluster())
            .field("tls", &self.is_tls())
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

/// The error of a connection attempt another caller made, for those that
/// waited on it. Not a refusal, so nobody tries again at once.
fn shared_failure(message: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("connecting to Redis failed: {message}"),
    ))
}

/// The client for `url`, one server or a cluster, with `certificates` for
/// TLS when given. Builds nothing that connects. The error may hold the
/// URL's password: redact it.
fn open(url: &str, certificates: Option<redis::TlsCertificates>) -> Result<Client, String> {
    match parse_url(url)? {
        RedisTarget::Single => match certificates {
            Some(certificates) => redis::Client::build_with_tls(url, certificates),
            None => redis::Client::open(url),
        }
        .map(|client| Client::Single(Box::new(client)))
        .map_err(|error| error.to_string()),
        RedisTarget::Cluster(nodes) => {
            let mut builder = ClusterClient::builder(nodes)
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(CLUSTER_RETRIES)
                .min_retry_wait(20)
                .max_retry_wait(200);
            if let Some(certificates) = certificates {
                builder = builder.certs(certificates);
            }
            builder
                .build()
                .map(|client| Client::Cluster(Box::new(client)))
                .map_err(|error| error.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(state: &str) -> Result<String, RedisError> {
        Ok(format!(
            "cluster_enabled:1\r\ncluster_state:{state}\r\ncluster_slots_assigned:16384\r\n"
        ))
    }

    fn silent() -> Result<String, RedisError> {
        Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        )))
    }

    const URL: &str = "redis+cluster://:***@10.0.0.1:7000";

    #[test]
    fn a_cluster_whose_masters_all_say_ok_is_healthy() {
        assert!(cluster_verdict(URL, vec![info("ok"), info("ok"), info("ok")]).is_ok());
    }

    #[test]
    fn one_master_reporting_fail_is_enough_and_the_error_names_url_and_state() {
        let error = cluster_verdict(URL, vec![info("ok"), info("fail"), silent()])
            .expect_err("one view of fail")
            .to_string();
        assert!(
            error.contains(&format!("Redis Cluster at {URL}")),
            "{error}"
        );
        assert!(error.contains("cluster_state:fail"), "{error}");
        assert!(error.contains("1 of 2 answers"), "{error}");
        assert!(error.contains("1 unanswered"), "{error}");
    }

    #[test]
    fn a_silent_master_alone_leaves_the_verdict_to_the_cluster() {
        assert!(cluster_verdict(URL, vec![info("ok"), silent()]).is_ok());
    }

    #[test]
    fn no_answer_at_all_is_down() {
        let error = cluster_verdict(URL, vec![silent(), silent()])
            .expect_err("nobody answered")
            .to_string();
        assert!(
            error.contains("no master of the Redis Cluster at"),
            "{error}"
        );
        assert!(error.contains("refused"), "{error}");
    }

    #[test]
    fn an_answer_without_a_state_is_not_ok() {
        let error = cluster_verdict(URL, vec![Ok("cluster_enabled:1".to_owned())])
            .expect_err("no state")
            .to_string();
        assert!(error.contains("cluster_state:unknown"), "{error}");
    }

    #[test]
    fn one_slot_is_chosen_per_master_even_when_a_master_owns_several_ranges() {
        use redis::Value::{Array, BulkString, Int};
        let node = |port: i64, id: &str| {
            Array(vec![
                BulkString(b"127.0.0.1".to_vec()),
                Int(port),
                BulkString(id.as_bytes().to_vec()),
            ])
        };
        let slots = Array(vec![
            Array(vec![Int(0), Int(99), node(7000, "a"), node(7003, "d")]),
            Array(vec![Int(100), Int(199), node(7001, "b")]),
            Array(vec![Int(200), Int(16383), node(7000, "a")]),
        ]);
        assert_eq!(one_slot_per_master(&slots), vec![0, 100]);
        assert!(one_slot_per_master(&redis::Value::Nil).is_empty());
    }
}
