//! What the PostgreSQL store costs: its throughput rounds run with the others
//! (see `layer.rs`); here are its setup and cleanup, and its statements per
//! request, counted through a loopback proxy that parses the frontend
//! protocol (every Execute is a statement, every Sync or simple Query a round
//! trip), which other sessions on the same database cannot disturb, unlike
//! `pg_stat_database` counters.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use autumn_web::base::redact_passwords as redact;
use autumn_web::db::{DbPool, FRAMEWORK_MIGRATIONS};
use autumn_web::idempotency::{DbIdempotencyStore, IdempotencyLayer};
use autumn_web::reexports::diesel_async::{
    AsyncConnection as _, AsyncPgConnection, SimpleAsyncConnection as _,
};

use crate::harness::{HttpClient, orders_uri, router, send_key, serve};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The PostgreSQL part: a store in a schema of this run's own, dropped
/// (with everything in it) when this is dropped.
pub(crate) struct PgBench {
    /// The URL whose connections use the schema.
    url: String,
    store: Arc<DbIdempotencyStore>,
    /// Dropped last: drops the schema.
    _schema: Schema,
}

impl PgBench {
    /// Creates the schema on `TEST_DATABASE_URL` (or the local default)
    /// and migrates it; `None`, with a line saying why, when PostgreSQL
    /// does not answer.
    pub(crate) async fn setup(pool_size: usize) -> Option<Self> {
        let base = std::env::var("TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let skip = |why: &dyn std::fmt::Display| {
            println!(
                "\npostgres: {why} (at {}); skipping the PostgreSQL store",
                redact(&base)
            );
        };
        let connect = tokio::time::timeout(CONNECT_TIMEOUT, AsyncPgConnection::establish(&base));
        let mut admin = match connect.await {
            Ok(Ok(conn)) => conn,
            Ok(Err(error)) => {
                skip(&format!("not reachable ({error})"));
                return None;
            }
            Err(_) => {
                skip(&"no answer within 5 s");
                return None;
            }
        };
        let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
        if let Err(error) = admin.batch_execute(&format!("CREATE SCHEMA {name}")).await {
            skip(&format!("cannot create schema {name} ({error})"));
            return None;
        }
        drop(admin);
        let schema = Schema {
            base: base.clone(),
            name,
        };
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!(
            "{base}{separator}options=-c%20search_path%3D{}",
            schema.name
        );
        let pool = match DbPool::new(&url, pool_size, CONNECT_TIMEOUT) {
            Ok(pool) => pool,
            Err(error) => {
                skip(&error);
                return None;
            }
        };
        if let Err(error) = FRAMEWORK_MIGRATIONS.run(&pool).await {
            skip(&error);
            return None;
        }
        println!(
            "\npostgres: store at {} in schema {} (pool of {pool_size})",
            redact(&base),
            schema.name
        );
        Some(Self {
            url,
            store: Arc::new(DbIdempotencyStore::new(pool)),
            _schema: schema,
        })
    }

    pub(crate) fn layer(&self) -> IdempotencyLayer {
        IdempotencyLayer::new(self.store.clone())
    }

    /// Statements per first-time request and per replay, as PostgreSQL
    /// receives them: a store of its own, with a pool of one connection
    /// that goes through a counting proxy. Prints the breakdown.
    pub(crate) async fn count(&self, client: &HttpClient, n: usize) -> Option<(f64, f64)> {
        let proxy = match Proxy::start(&self.url) {
            Ok(proxy) => proxy,
            Err(error) => {
                println!("postgres: not counted ({error})");
                return None;
            }
        };
        let store = match DbPool::new(&proxy.url, 1, CONNECT_TIMEOUT) {
            Ok(pool) => Arc::new(DbIdempotencyStore::new(pool)),
            Err(error) => {
                println!("postgres: not counted ({error})");
                return None;
            }
        };
        let uri = orders_uri(serve(router().layer(IdempotencyLayer::new(store))).await);
        // Connects, and records the replayed key; a second request has
        // every per-connection cache warm.
        send_key(client, &uri, "count-replay", false).await;
        send_key(client, &uri, "count-warm", false).await;
        // A dropped statement's Close is sent without waiting for it: let
        // the last one through before each reading.
        let settle = || tokio::time::sleep(Duration::from_millis(200));
        settle().await;
        let start = proxy.snapshot();
        for i in 0..n {
            send_key(client, &uri, &format!("count-first-{i}"), false).await;
        }
        settle().await;
        let after_first = proxy.snapshot();
        for _ in 0..n {
            send_key(client, &uri, "count-replay", true).await;
        }
        settle().await;
        let after_replay = proxy.snapshot();
        let first = after_first.since(&start);
        let replay = after_replay.since(&after_first);
        let per = |count: u64| count as f64 / n as f64;
        for (what, wire) in [("first-time", &first), ("replay", &replay)] {
            let statements = wire
                .statements
                .iter()
                .map(|(sql, count)| format!("{:.2} x `{sql}`", per(*count)))
                .collect::<Vec<_>>()
                .join(", ");
            println!(
                "postgres (wire proxy) {what}: {:.2} statements [{statements}]; \
                 {:.2} round trips waited on ({:.2} of them only to prepare), \
                 {:.2} Close+Sync not waited on",
                per(wire.total()),
                per(wire.round_trips),
                per(wire.prepares),
                per(wire.closes),
            );
        }
        Some((per(first.total()), per(replay.total())))
    }
}

/// A schema of the run's own, dropped with everything in it on drop.
struct Schema {
    base: String,
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        // Drop cannot await: a runtime of its own, on a thread of its own.
        let dropped = std::thread::spawn(move || -> Result<(), String> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())?;
            runtime.block_on(async {
                let connect = AsyncPgConnection::establish(&base);
                let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, connect)
                    .await
                    .map_err(|_| "no answer within 5 s".to_owned())?
                    .map_err(|error| error.to_string())?;
                conn.batch_execute(&format!(
                    "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS {name} CASCADE"
                ))
                .await
                .map_err(|error| error.to_string())
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the cleanup thread panicked".to_owned()));
        match dropped {
            Ok(()) => println!("postgres: dropped schema {} (CASCADE)", self.name),
            Err(error) => println!(
                "postgres: could not drop schema {} ({error}); drop it by hand",
                self.name
            ),
        }
    }
}

/// What a connection sent, counted by message as PostgreSQL received it.
#[derive(Debug, Clone, Default)]
struct Wire {
    /// Executed statements by (shortened) SQL: each Execute, and each
    /// simple Query.
    statements: BTreeMap<String, u64>,
    /// Syncs (and simple Queries) the client waits for.
    round_trips: u64,
    /// Of those, the ones that only prepare (Parse/Describe, no Execute).
    prepares: u64,
    /// Close + Sync batches, sent when a prepared statement is dropped,
    /// without waiting for the answer.
    closes: u64,
}

impl Wire {
    fn total(&self) -> u64 {
        self.statements.values().sum()
    }

    fn since(&self, earlier: &Self) -> Self {
        let mut statements = self.statements.clone();
        for (sql, count) in &mut statements {
            *count -= earlier.statements.get(sql).copied().unwrap_or(0);
        }
        statements.retain(|_, count| *count > 0);
        Self {
            statements,
            round_trips: self.round_trips - earlier.round_trips,
            prepares: self.prepares - earlier.prepares,
            closes: self.closes - earlier.closes,
        }
    }
}

/// A loopback TCP proxy in front of PostgreSQL that parses what clients
/// send (the frontend protocol, without TLS: the pool does not ask for
/// it) and forwards every byte untouched.
struct Proxy {
    /// The URL, pointed at the proxy.
    url: String,
    counts: Arc<Mutex<Wire>>,
}

impl Proxy {
    fn start(url: &str) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let (upstream, url) = through(url, listener.local_addr()?)
            .ok_or_else(|| io::Error::other("the database URL names no TCP host to proxy to"))?;
        let counts = Arc::new(Mutex::new(Wire::default()));
        let shared = Arc::clone(&counts);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (upstream, counts) = (upstream.clone(), Arc::clone(&shared));
                std::thread::spawn(move || relay(client, &upstream, &counts));
            }
        });
        Ok(Self { url, counts })
    }

    fn snapshot(&self) -> Wire {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// `(host:port of the server, url with the proxy as its host)`.
fn through(url: &str, proxy: SocketAddr) -> Option<(String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => (format!("{userinfo}@"), host),
        None => (String::new(), authority),
    };
    if host.is_empty() || host.contains(',') {
        return None;
    }
    let has_port = host.rsplit_once(':').is_some_and(|(h, p)| {
        !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_digit())
            && (!h.starts_with('[') || h.ends_with(']'))
    });
    let upstream = if has_port {
        host.to_owned()
    } else {
        format!("{host}:5432")
    };
    Some((upstream, format!("{scheme}://{userinfo}{proxy}{tail}")))
}

/// Forwards one client connection, counting what it sends before
/// forwarding it (so a count is in before its answer can be).
fn relay(client: TcpStream, upstream: &str, counts: &Mutex<Wire>) -> io::Result<()> {
    let server = TcpStream::connect(upstream)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut from_server, mut to_client) = (server.try_clone()?, client.try_clone()?);
    std::thread::spawn(move || {
        let _ = io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Both);
    });
    let (mut from_client, mut to_server) = (client, server);
    let mut frontend = Frontend::default();
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let read = from_client.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        frontend.feed(&buffer[..read], counts);
        to_server.write_all(&buffer[..read])?;
    }
    to_server.shutdown(Shutdown::Both)
}

/// The frontend protocol, one connection's worth.
#[derive(Default)]
struct Frontend {
    /// Bytes of a message not yet complete.
    pending: Vec<u8>,
    /// Past the startup packet (messages have a type byte from then on).
    started: bool,
    /// Prepared statements by name: their shortened SQL.
    prepared: HashMap<String, String>,
    /// The statement the last Bind bound.
    bound: String,
    /// Since the last Sync.
    batch: Batch,
}

#[derive(Default)]
struct Batch {
    prepare: bool,
    close: bool,
    executes: Vec<String>,
}

impl Frontend {
    fn feed(&mut self, bytes: &[u8], counts: &Mutex<Wire>) {
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend_from_slice(bytes);
        let mut at = 0;
        loop {
            let rest = &pending[at..];
            let length = |from: usize| {
                rest.get(from..from + 4).map(|b| {
                    usize::try_from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                        .unwrap_or(usize::MAX)
                })
            };
            if self.started {
                // Type byte, then a length that counts itself.
                let Some(len) = length(1).map(|len| len.saturating_add(1).max(5)) else {
                    break;
                };
                if rest.len() < len {
                    break;
                }
                self.message(rest[0], &rest[5..len], counts);
                at += len;
            } else {
                // Length (counting itself), then a code: SSLRequest and
                // GSSENCRequest are followed by the real startup packet.
                let (Some(len), Some(code)) = (length(0), length(4)) else {
                    break;
                };
                if rest.len() < len.max(8) {
                    break;
                }
                self.started = !matches!(code, 80_877_103 | 80_877_104);
                at += len.max(8);
            }
        }
        pending.drain(..at);
        self.pending = pending;
    }

    fn message(&mut self, tag: u8, body: &[u8], counts: &Mutex<Wire>) {
        let mut strings = body
            .split(|&b| b == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned());
        let mut next = || strings.next().unwrap_or_default();
        match tag {
            b'P' => {
                let (name, sql) = (next(), next());
                self.prepared.insert(name, shorten(&sql));
                self.batch.prepare = true;
            }
            b'B' => {
                let (_portal, name) = (next(), next());
                self.bound = self
                    .prepared
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| "?".to_owned());
            }
            b'D' => self.batch.prepare = true,
            b'E' => self.batch.executes.push(self.bound.clone()),
            b'C' => self.batch.close = true,
            b'S' => {
                let batch = std::mem::take(&mut self.batch);
                let mut wire = counts.lock().unwrap_or_else(PoisonError::into_inner);
                if !batch.executes.is_empty() {
                    wire.round_trips += 1;
                    for sql in batch.executes {
                        *wire.statements.entry(sql).or_default() += 1;
                    }
                } else if batch.prepare {
                    wire.round_trips += 1;
                    wire.prepares += 1;
                } else if batch.close {
                    wire.closes += 1;
                } else {
                    wire.round_trips += 1;
                }
            }
            b'Q' => {
                let sql = shorten(&next());
                let mut wire = counts.lock().unwrap_or_else(PoisonError::into_inner);
                wire.round_trips += 1;
                *wire.statements.entry(sql).or_default() += 1;
            }
            _ => {}
        }
    }
}

/// SQL on one line, cut to a readable length.
fn shorten(sql: &str) -> String {
    let line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(44) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}
