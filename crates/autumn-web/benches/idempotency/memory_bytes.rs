//! What the in-memory store holds per recorded response, and that expiry
//! keeps it flat. Run first, on the main thread before any runtime thread
//! exists, so the process heap is as quiet as it gets.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use autumn_web::clock::ManualClock;
use autumn_web::idempotency::key::storage_key;
use autumn_web::idempotency::{
    Claim, IdempotencyFuture, IdempotencyRecord, IdempotencyStore as _, MemoryIdempotencyStore,
};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, StatusCode};

use crate::harness::BYTES_PER_RECORD_TARGET;

/// Drives a store future that the memory store completes without waiting.
fn ready<T>(mut future: IdempotencyFuture<'_, T>) -> T {
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(result) => result.expect("the memory store does not fail"),
        Poll::Pending => panic!("the memory store answered Pending"),
    }
}

/// Resident set size in bytes, from `/proc/self/status`.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Records one small response under `key` the way the layer does: lock,
/// record, unlock (the layer's `finish` both records and unlocks).
fn record_one(store: &MemoryIdempotencyStore, key: &str, i: usize) {
    let owner = format!("{i:032x}");
    assert!(
        ready(store.try_lock(key, &owner, Duration::from_secs(60))),
        "fresh key locks"
    );
    // A fresh allocation per record, as the layer's collected response body.
    let body = Bytes::from(
        format!(r#"{{"id":"ord_{i:010}","status":"created","sku":"ABC-123"}}"#).into_bytes(),
    );
    let record = IdempotencyRecord::new(
        StatusCode::CREATED,
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body,
    );
    let mut body_hash = vec![0u8; 32];
    body_hash[..8].copy_from_slice(&(i as u64).to_le_bytes());
    assert!(
        ready(store.set(key, &owner, record, body_hash, Duration::from_secs(86_400))),
        "record stored"
    );
    ready(store.unlock(key, &owner));
}

pub(crate) fn memory_per_key(n: usize) {
    println!("== memory held by MemoryIdempotencyStore, {n} small records");
    let Some(_) = rss_bytes() else {
        println!("(no /proc/self/status here; skipped)");
        return;
    };
    // Keys are made before the baseline so only the store's own copies count.
    // Shaped like the layer's storage keys: `idem:v1:` + 64 hex chars.
    let keys: Vec<String> = (0..n)
        .map(|i| storage_key("POST", "/orders", b"", &format!("mem-{i}")))
        .collect();
    let store = MemoryIdempotencyStore::new(Duration::from_secs(3600));
    let before = rss_bytes().expect("rss");
    for (i, key) in keys.iter().enumerate() {
        record_one(&store, key, i);
    }
    let after = rss_bytes().expect("rss");
    assert_eq!(store.len(), n);
    let per_key = after.saturating_sub(before) as f64 / n as f64;
    let verdict = if per_key <= BYTES_PER_RECORD_TARGET {
        "ok"
    } else {
        "ABOVE TARGET"
    };
    println!(
        "RSS {:.1} MiB -> {:.1} MiB: {per_key:.0} bytes per key (target <= \
         ~{BYTES_PER_RECORD_TARGET:.0}: {verdict}; includes allocator overhead and \
         hash-table slack)",
        before as f64 / 1_048_576.0,
        after as f64 / 1_048_576.0,
    );
    replay_cost(&store, &keys);
    drop(keys);
}

/// What answering a replay from the store costs in process: the claim that
/// finds the record, and the response rebuilt from it, as the layer does. One
/// hot key over and over, then every stored key in turn (each lookup a cache
/// miss, as with many clients). Best of three passes: only compare figures
/// of one run on one machine.
fn replay_cost(store: &MemoryIdempotencyStore, keys: &[String]) {
    let replay = |key: &str| match ready(store.claim(key, "replayer", Duration::from_secs(60))) {
        Claim::Completed {
            record,
            fingerprint,
        } => {
            std::hint::black_box((record.to_response(), fingerprint));
        }
        _ => panic!("a recorded key replays"),
    };
    let best = |run: &dyn Fn() -> usize| {
        (0..3)
            .map(|_| {
                let started = Instant::now();
                let n = run();
                started.elapsed().as_nanos() as f64 / n as f64
            })
            .fold(f64::INFINITY, f64::min)
    };
    let hot = best(&|| {
        for _ in 0..keys.len() {
            replay(&keys[0]);
        }
        keys.len()
    });
    let spread = best(&|| {
        for key in keys {
            replay(key);
        }
        keys.len()
    });
    println!(
        "replay in process (claim + response rebuilt): {hot:.0} ns one hot key, \
         {spread:.0} ns each of {} keys",
        keys.len()
    );
}

pub(crate) fn expiry_keeps_memory_flat(n: usize) {
    let ttl = Duration::from_secs(60);
    let clock = ManualClock::new();
    let store = MemoryIdempotencyStore::new(ttl).with_clock(Arc::new(clock.clone()));
    let mib = || {
        rss_bytes().map_or_else(
            || "n/a".to_owned(),
            |b| format!("{:.1} MiB", b as f64 / 1_048_576.0),
        )
    };
    println!(
        "\n== expiry: TTL {}s, batches of {n} unique keys, clock advanced {}s between batches",
        ttl.as_secs(),
        ttl.as_secs() + 1
    );
    println!("before:  store.len() 0 (RSS {})", mib());
    for batch in 1..=6 {
        let before = store.len();
        // Keys made one at a time, so the batch itself holds no memory.
        for i in 0..n {
            let key = storage_key("POST", "/orders", b"", &format!("exp-{batch}-{i}"));
            record_one(&store, &key, i);
        }
        println!(
            "batch {batch}: store.len() {before} -> {} (RSS {})",
            store.len(),
            mib()
        );
        // Past the TTL, and past the per-shard sweep interval.
        clock.advance(ttl + Duration::from_secs(1));
    }
}
