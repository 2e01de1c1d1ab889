//! What the Redis store costs: its throughput rounds run with the others (see
//! `layer.rs`); here are its setup and cleanup, and its client commands per
//! request, counted through MONITOR (client commands only: `INFO
//! commandstats` and `total_commands_processed` also count the calls Lua
//! scripts make).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use autumn_web::base::redact_passwords as redact;
use autumn_web::idempotency::{IdempotencyLayer, RedisIdempotencyStore};

use crate::harness::{HttpClient, orders_uri, router, send_key, serve};
use crate::redis_support::{Monitor, command_name, source};

/// The Redis part: a store under a prefix of this run's own, whose keys
/// are deleted (SCAN + DEL on the prefix) when it is dropped.
pub(crate) struct RedisBench {
    url: String,
    prefix: String,
    store: Arc<RedisIdempotencyStore>,
}

impl RedisBench {
    /// Connects to `TEST_REDIS_URL` (or the local default); `None`, with
    /// a line saying why, when Redis does not answer.
    pub(crate) async fn setup() -> Option<Self> {
        let url =
            std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let skip = |why: &dyn std::fmt::Display| {
            println!("\nredis: {why}; skipping the Redis store");
        };
        let prefix = format!("autumn-bench:{}", uuid::Uuid::new_v4().simple());
        let store = match RedisIdempotencyStore::new(&url, &prefix) {
            Ok(store) => store,
            Err(error) => {
                skip(&error);
                return None;
            }
        };
        if let Err(error) = store.ping().await {
            skip(&format!("not reachable ({error})"));
            return None;
        }
        println!(
            "\nredis: store at {} under key prefix {prefix}:",
            redact(&url)
        );
        Some(Self {
            url,
            prefix,
            store: Arc::new(store),
        })
    }

    pub(crate) fn layer(&self) -> IdempotencyLayer {
        IdempotencyLayer::new(self.store.clone())
    }

    /// Client commands per first-time request and per replay, seen by
    /// the server through MONITOR, on a store (and so a connection) of
    /// its own. Prints the breakdown; `None` when MONITOR is unavailable.
    pub(crate) async fn count(&self, client: &HttpClient, n: usize) -> Option<(f64, f64)> {
        let prefix = format!("{}:count", self.prefix);
        let store = match RedisIdempotencyStore::new(&self.url, &prefix) {
            Ok(store) => Arc::new(store),
            Err(error) => {
                println!("redis: not counted ({error})");
                return None;
            }
        };
        let uri = orders_uri(serve(router().layer(IdempotencyLayer::new(store))).await);
        // Connects (loading the scripts) and records the replayed key.
        send_key(client, &uri, "count-replay", false).await;
        let mut monitor = match Monitor::try_connect(&self.url).await {
            Ok(monitor) => monitor,
            Err(error) => {
                println!("redis: not counted (MONITOR: {error})");
                return None;
            }
        };
        for i in 0..n {
            send_key(client, &uri, &format!("count-first-{i}"), false).await;
        }
        let first = monitor.try_mark().await;
        for _ in 0..n {
            send_key(client, &uri, "count-replay", true).await;
        }
        let replay = monitor.try_mark().await;
        let (first, replay) = match (first, replay) {
            (Ok(first), Ok(replay)) => (first, replay),
            (Err(error), _) | (_, Err(error)) => {
                println!("redis: not counted (MONITOR: {error})");
                return None;
            }
        };
        let needle = format!("{prefix}:");
        let first = Tally::of(&first, &needle);
        let replay = Tally::of(&replay, &needle);
        let per = |count: u64| count as f64 / n as f64;
        let commands = |tally: &Tally| {
            tally
                .commands
                .iter()
                .map(|(name, count)| format!("{name} {:.2}", per(*count)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "redis (MONITOR, client commands of the store's connection): first-time \
             {:.2} [{}], replay {:.2} [{}]; left out: the calls its scripts make, {:.2} \
             and {:.2} per request (INFO commandstats and total_commands_processed \
             count those too)",
            per(first.total()),
            commands(&first),
            per(replay.total()),
            commands(&replay),
            per(first.script_internal),
            per(replay.script_internal),
        );
        Some((per(first.total()), per(replay.total())))
    }
}

impl Drop for RedisBench {
    fn drop(&mut self) {
        match delete_prefix(&self.url, &self.prefix) {
            Ok(deleted) => println!(
                "redis: deleted {deleted} keys matching {}:* (SCAN + DEL)",
                self.prefix
            ),
            Err(error) => println!(
                "redis: could not delete the keys matching {}:* ({error}); delete them by hand",
                self.prefix
            ),
        }
    }
}

/// What a batch's MONITOR lines hold.
struct Tally {
    /// Commands the store's connection sent, by name.
    commands: BTreeMap<String, u64>,
    /// Calls made by its scripts on its keys.
    script_internal: u64,
}

impl Tally {
    /// Counts the lines from the connections that touched `needle` (the
    /// store's key prefix): other clients of a shared Redis are left out.
    fn of(lines: &[String], needle: &str) -> Self {
        // `1700000000.123456 [0 127.0.0.1:54321] "EVALSHA" ...`, with
        // `[0 lua]` for calls made by a script.
        let name = |line: &str| match command_name(line) {
            "" => "?".to_owned(),
            name => name.to_ascii_uppercase(),
        };
        let ours: BTreeSet<&str> = lines
            .iter()
            .filter(|line| line.contains(needle))
            .filter_map(|line| source(line))
            .filter(|&source| source != "lua")
            .collect();
        let mut tally = Self {
            commands: BTreeMap::new(),
            script_internal: 0,
        };
        for line in lines {
            match source(line) {
                Some("lua") => {
                    tally.script_internal += u64::from(line.contains(needle));
                }
                Some(source) if ours.contains(source) => {
                    *tally.commands.entry(name(line)).or_default() += 1;
                }
                _ => {}
            }
        }
        tally
    }

    fn total(&self) -> u64 {
        self.commands.values().sum()
    }
}

/// Deletes every key under `prefix:`; returns how many. Blocking: it runs
/// from `Drop`, once, at the end.
fn delete_prefix(url: &str, prefix: &str) -> ::redis::RedisResult<u64> {
    let mut conn =
        ::redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(2))?;
    let pattern = format!("{prefix}:*");
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)?;
        if !keys.is_empty() {
            deleted += ::redis::cmd("DEL").arg(&keys).query::<u64>(&mut conn)?;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}
