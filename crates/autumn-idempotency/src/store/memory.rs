//! The in-process store: zero configuration, one process only.

mod keys;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;

use self::keys::{MapKey, MapKeys, owner_tag};
use super::{Claim, IdempotencyFuture, IdempotencyStore, KeyState, StoreError, StoreOperation};
use crate::metrics::StoreSize;
use crate::record::{IdempotencyEntry, IdempotencyRecord};
use autumn_base::clock::{SharedClock, SystemClock, deadline};

const SHARDS: usize = 16;
/// A shard drops its expired entries on its first write after a sweep
/// interval: a sixteenth of the store's TTL, kept between these bounds. A
/// sweep visits every entry of the shard, so sweeping a large store every
/// second would cost more than the requests; an expired entry lingers at
/// most one interval, so memory stays within a sixteenth of its steady state.
const SWEEP_INTERVAL_MIN: Duration = Duration::from_secs(1);
const SWEEP_INTERVAL_MAX: Duration = Duration::from_secs(60);
/// When the store is full, every shard is swept for expired entries before
/// a new key is refused, at most once per this interval: a store full of
/// live entries would otherwise be walked whole on every refused request.
const ROOM_SWEEP_GAP_MILLIS: u64 = 1_000;
/// The longest a waiting duplicate sleeps without looking at the clock: a
/// wait measured on a clock that jumps (a test's manual clock, a corrected
/// wall clock) still ends within this of its deadline.
const RECHECK: Duration = Duration::from_secs(1);

/// An [`IdempotencyStore`] in this process's memory.
///
/// Good for development, tests and single-instance apps: it does not share
/// state across replicas, so a retry routed to another instance runs the
/// handler again. Expired entries are dropped by the store itself as it is
/// written to, so memory stays flat under a stream of unique keys.
///
/// The store is bounded: it holds at most
/// [`max_entries`](Self::with_max_entries) storage keys, and takes no new key
/// once its recorded responses add up to [`max_bytes`](Self::with_max_bytes).
/// When a new key does not fit, expired entries are swept first; if there is
/// still no room the claim fails with a [`StoreError`] of kind
/// [`Full`](super::StoreErrorKind::Full) (the middleware answers 503 with
/// `Retry-After`). Nothing live is ever evicted to make room: a lock or a
/// record dropped early would let a retry run the handler a second time.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use autumn_idempotency::{IdempotencyStore, MemoryIdempotencyStore};
///
/// let store: Arc<dyn IdempotencyStore> = Arc::new(
///     MemoryIdempotencyStore::new(Duration::from_secs(3600))
///         .with_max_entries(100_000)
///         .with_max_bytes(64 * 1024 * 1024),
/// );
/// ```
pub struct MemoryIdempotencyStore {
    shards: Box<[Mutex<Shard>]>,
    sweep_every_millis: u64,
    map_keys: MapKeys,
    clock: SharedClock,
    max_entries: usize,
    max_bytes: usize,
    /// Entries held across every shard; a new one is reserved here before it
    /// is inserted, so the count never passes `max_entries`.
    entries: AtomicUsize,
    /// Bytes of the [`Stored`] blocks held across every shard.
    record_bytes: AtomicUsize,
    /// The earliest time (app clock, ms) a full store sweeps every shard
    /// again.
    next_room_sweep: AtomicU64,
    /// Wakes the duplicates waiting for a lock to go (see
    /// [`IdempotencyStore::wait_for_release`]); told only while
    /// `waiting` says someone listens, so a finish nobody waits for costs
    /// one atomic load.
    released: tokio::sync::Notify,
    waiting: AtomicUsize,
}

/// A map key's first eight bytes are already a keyed hash (see
/// [`keys`]): as good a hash as any.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        if let Some(head) = bytes.first_chunk::<8>() {
            self.0 = u64::from_le_bytes(*head);
        }
    }

    fn write_usize(&mut self, _length_prefix: usize) {}
}

type Map<V> = HashMap<MapKey, V, BuildHasherDefault<DigestHasher>>;

/// A key's lock and its record live in two maps: a table's every bucket is
/// as large as its largest value, and a record outlives the lock that
/// guarded it by hours. Kept apart, the many long-lived buckets of the
/// records pay nothing for a lock, and the locks' map stays as small as the
/// number of requests in flight.
#[derive(Default)]
struct Shard {
    records: Map<Stored>,
    locks: Map<Lock>,
    next_sweep: u64,
}

struct Lock {
    /// A hash of the owner (see [`owner_tag`]): no allocation per lock.
    owner_tag: u64,
    expires: u64,
    /// When it was taken (app clock, ms), for an operator's inspect; a
    /// renewal keeps it.
    taken: u64,
}

impl Lock {
    fn is_live(&self, now: u64) -> bool {
        self.expires > now
    }
}

/// Bytes at the start of a [`Stored`] block before the fingerprint: the
/// owner's tag (8, little-endian) and the fingerprint's length (4).
const HEAD: usize = 12;

/// A record in one allocation: the owner's tag and the fingerprint's length
/// (see [`HEAD`]), the fingerprint, then the [encoded](IdempotencyRecord::encode)
/// record. One block per key keeps the heap from filling with small
/// long-lived pieces between the short-lived ones of every request. The
/// owner's tag sits in the block, not in the bucket: only a write by another
/// owner reads it, and every bucket of the long-lived map would pay for it.
/// `Bytes` rather than a thinner `Arc<[u8]>`: the encoded buffer becomes the
/// block without a copy, and a replay shares it with no allocation (a slice
/// per replay would cost one), for 16 bytes a bucket.
struct Stored {
    block: Bytes,
    expires: u64,
}

impl Stored {
    fn is_live(&self, now: u64) -> bool {
        self.expires > now
    }

    /// The tag of the owner that wrote it.
    fn owner_tag(&self) -> u64 {
        self.block
            .first_chunk::<8>()
            .map_or(0, |tag| u64::from_le_bytes(*tag))
    }

    /// The bytes this record counts for: fingerprint and encoded record.
    fn record_bytes(&self) -> usize {
        self.block.len().saturating_sub(HEAD)
    }
}

/// The block [`Stored`] keeps, made before the shard is locked.
fn encode(
    record: &IdempotencyRecord,
    fingerprint: &[u8],
    owner_tag: u64,
) -> Result<Bytes, StoreError> {
    let fingerprint_len = u32::try_from(fingerprint.len())
        .map_err(|_| StoreError::new("a fingerprint longer than 4 GiB cannot be stored"))?;
    // Exactly sized, so the buffer becomes `Bytes` without a copy.
    let mut block = Vec::with_capacity(HEAD + fingerprint.len() + record.encoded_len());
    block.extend_from_slice(&owner_tag.to_le_bytes());
    block.extend_from_slice(&fingerprint_len.to_le_bytes());
    block.extend_from_slice(fingerprint);
    record.encode_into(&mut block);
    Ok(Bytes::from(block))
}

/// What an attempt to lock a key found.
enum Locking {
    Acquired,
    InFlight,
    /// A live record, to decode outside the shard's lock.
    Recorded(Found),
    Full,
}

/// A stored block, read back outside the shard's lock.
struct Found {
    block: Bytes,
}

impl Found {
    fn of(stored: &Stored) -> Self {
        Self {
            block: stored.block.clone(),
        }
    }

    /// The record and its fingerprint. The record's body and header values
    /// are slices of the block: a replay copies no body.
    fn decode(self) -> Result<(IdempotencyRecord, Vec<u8>), StoreError> {
        let cut_short = || StoreError::new("a stored record is cut short");
        let fingerprint_len = self
            .block
            .get(8..HEAD)
            .and_then(|len| <[u8; 4]>::try_from(len).ok())
            .map(u32::from_le_bytes)
            .and_then(|len| usize::try_from(len).ok())
            .ok_or_else(cut_short)?;
        let start = HEAD.saturating_add(fingerprint_len);
        let fingerprint = self.block.get(HEAD..start).ok_or_else(cut_short)?.to_vec();
        let record = IdempotencyRecord::decode_shared(&self.block.slice(start..))
            .map_err(StoreError::new)?;
        Ok((record, fingerprint))
    }
}

impl Shard {
    fn live_lock(&self, key: &MapKey, now: u64) -> Option<&Lock> {
        self.locks.get(key).filter(|lock| lock.is_live(now))
    }

    fn live_record(&self, key: &MapKey, now: u64) -> Option<&Stored> {
        self.records.get(key).filter(|stored| stored.is_live(now))
    }
}

impl MemoryIdempotencyStore {
    /// The most storage keys a store holds unless told otherwise: about
    /// 120 MB with small responses.
    pub const DEFAULT_MAX_ENTRIES: usize = 500_000;
    /// The record bytes past which a store takes no new key unless told
    /// otherwise: 128 MiB.
    pub const DEFAULT_MAX_BYTES: usize = 128 * 1024 * 1024;

    /// A store whose records usually live `ttl`, which sets how often it
    /// sweeps expired entries; each record is kept for the TTL it is
    /// [`set`](IdempotencyStore::set) with (a route's own, longer or
    /// shorter), within the default limits
    /// ([`DEFAULT_MAX_ENTRIES`](Self::DEFAULT_MAX_ENTRIES),
    /// [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES)).
    pub fn new(ttl: Duration) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            map_keys: MapKeys::new(),
            sweep_every_millis: u64::try_from(
                (ttl / 16)
                    .clamp(SWEEP_INTERVAL_MIN, SWEEP_INTERVAL_MAX)
                    .as_millis(),
            )
            .unwrap_or(1_000),
            clock: Arc::new(SystemClock),
            max_entries: Self::DEFAULT_MAX_ENTRIES,
            max_bytes: Self::DEFAULT_MAX_BYTES,
            entries: AtomicUsize::new(0),
            record_bytes: AtomicUsize::new(0),
            next_room_sweep: AtomicU64::new(0),
            released: tokio::sync::Notify::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    /// The same store reading time from `clock`: tests pass a
    /// [`ManualClock`](autumn_base::clock::ManualClock) to expire entries without
    /// sleeping. A consuming builder, as on the other stores and the layers.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// use autumn_idempotency::MemoryIdempotencyStore;
    /// use autumn_base::clock::ManualClock;
    ///
    /// let store = MemoryIdempotencyStore::new(Duration::from_secs(60))
    ///     .with_clock(Arc::new(ManualClock::new()));
    /// # let _ = store;
    /// ```
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Holds at most `max_entries` storage keys (a lock, a record or both
    /// each); a new key past that is refused with a
    /// [`Full`](super::StoreErrorKind::Full) error.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use autumn_idempotency::MemoryIdempotencyStore;
    ///
    /// let store = MemoryIdempotencyStore::new(Duration::from_secs(60)).with_max_entries(10_000);
    /// # let _ = store;
    /// ```
    #[must_use]
    pub fn with_max_entries(mut self, max_entries: usize) -> Self {
        self.max_entries = max_entries;
        self
    }

    /// Takes no new key once the recorded responses held (status, headers,
    /// body and fingerprint) add up to `max_bytes`. A request that already
    /// holds its lock still records its response, so the total can pass
    /// `max_bytes` by the responses of the requests in flight when it was
    /// reached: refusing them would lose a response whose handler ran.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use autumn_idempotency::MemoryIdempotencyStore;
    ///
    /// let store = MemoryIdempotencyStore::new(Duration::from_secs(60))
    ///     .with_max_bytes(16 * 1024 * 1024);
    /// # let _ = store;
    /// ```
    #[must_use]
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Entries held right now, counting expired ones not yet swept.
    pub fn len(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    /// Bytes of recorded responses held right now, counting expired ones not
    /// yet swept.
    pub fn record_bytes(&self) -> usize {
        self.record_bytes.load(Ordering::Relaxed)
    }

    /// Whether the store holds no entries at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn map_key(&self, key: &str) -> MapKey {
        self.map_keys.of(key)
    }

    fn shard(&self, key: &MapKey) -> MutexGuard<'_, Shard> {
        // The map hashes the first eight bytes; pick the shard by another.
        lock(&self.shards[usize::from(key[8]) % SHARDS])
    }

    /// Runs `write` on the shard holding `key`, first sweeping the shard when
    /// a sweep is due.
    fn write<T>(&self, key: &MapKey, write: impl FnOnce(&mut Shard, u64) -> T) -> T {
        let now = self.clock.now_millis();
        let mut shard = self.shard(key);
        if now >= shard.next_sweep {
            self.sweep(&mut shard, now);
        }
        write(&mut shard, now)
    }

    /// Drops the shard's dead locks and records and schedules its next
    /// sweep. A key is forgotten once neither map holds it.
    fn sweep(&self, shard: &mut Shard, now: u64) {
        let Shard { records, locks, .. } = shard;
        let (mut entries, mut bytes) = (0, 0);
        records.retain(|key, stored| {
            let dead = !stored.is_live(now);
            if dead {
                bytes += stored.record_bytes();
                // A key that still has a lock is forgotten with its lock.
                if !locks.contains_key(key) {
                    entries += 1;
                }
            }
            !dead
        });
        locks.retain(|key, lock| {
            let dead = !lock.is_live(now);
            if dead && !records.contains_key(key) {
                entries += 1;
            }
            !dead
        });
        self.forget(entries, bytes);
        shard.next_sweep = now + self.sweep_every_millis;
    }

    /// Accounts for entries and record bytes that were dropped.
    fn forget(&self, entries: usize, bytes: usize) {
        if entries > 0 {
            self.entries.fetch_sub(entries, Ordering::Relaxed);
        }
        if bytes > 0 {
            self.record_bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Reserves room for one more entry; `false` when the store is full.
    fn reserve_entry(&self) -> bool {
        self.entries
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held < self.max_entries).then_some(held + 1)
            })
            .is_ok()
    }

    /// Whether a new lock fits: the record bytes are under their limit and,
    /// for a key the store does not hold (`new_key`), an entry could be
    /// reserved for it.
    fn room_for_lock(&self, new_key: bool) -> bool {
        self.record_bytes.load(Ordering::Relaxed) < self.max_bytes
            && (!new_key || self.reserve_entry())
    }

    /// Locks `key` for `lock`, or tells what holds it.
    fn lock_in(&self, shard: &mut Shard, key: &MapKey, now: u64, lock: Lock) -> Locking {
        let Shard { records, locks, .. } = shard;
        let held = match locks.entry(*key) {
            Entry::Occupied(held) if held.get().is_live(now) => return Locking::InFlight,
            held => held,
        };
        let record = records.get(key);
        if let Some(stored) = record.filter(|stored| stored.is_live(now)) {
            return Locking::Recorded(Found::of(stored));
        }
        let new_key = record.is_none() && matches!(held, Entry::Vacant(_));
        if !self.room_for_lock(new_key) {
            return Locking::Full;
        }
        match held {
            Entry::Occupied(mut lapsed) => {
                lapsed.insert(lock);
            }
            Entry::Vacant(vacant) => {
                vacant.insert(lock);
            }
        }
        Locking::Acquired
    }

    /// When the store is full: sweeps every shard for expired entries,
    /// unless that was done less than [`ROOM_SWEEP_GAP_MILLIS`] ago.
    /// `true` = swept, worth trying again.
    fn sweep_for_room(&self) -> bool {
        let now = self.clock.now_millis();
        let due = self.next_room_sweep.load(Ordering::Relaxed);
        if now < due
            || self
                .next_room_sweep
                .compare_exchange(
                    due,
                    now.saturating_add(ROOM_SWEEP_GAP_MILLIS),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return false;
        }
        for shard in &self.shards {
            self.sweep(&mut lock(shard), now);
        }
        true
    }

    /// The error a new key gets when the store has no room.
    fn full(&self, operation: StoreOperation) -> StoreError {
        StoreError::full(format!(
            "the memory store holds {} of at most {} entries and {} bytes of records (new keys refused from {}); raise [idempotency.memory] max_entries / max_bytes, or lower ttl_secs",
            self.len(),
            self.max_entries,
            self.record_bytes(),
            self.max_bytes,
        ))
        .during(operation)
    }

    fn get_now(&self, key: &str) -> Result<Option<IdempotencyEntry>, StoreError> {
        let key = self.map_key(key);
        let now = self.clock.now_millis();
        let (found, locked) = {
            let shard = self.shard(&key);
            (
                shard.live_record(&key, now).map(Found::of),
                shard.live_lock(&key, now).is_some(),
            )
        };
        Ok(match found {
            Some(found) => {
                let (record, fingerprint) = found.decode()?;
                Some(IdempotencyEntry::completed(record, fingerprint).locked(locked))
            }
            None if locked => Some(IdempotencyEntry::in_flight()),
            None => None,
        })
    }

    /// Records the response. Never refused for the byte limit: the caller
    /// holds its lock, so its key is already counted, and refusing would
    /// lose a response whose handler ran. Only a key that holds nothing
    /// (its lock lapsed and was swept) can find the store full.
    fn set_now(
        &self,
        key: &str,
        owner: &str,
        record: IdempotencyRecord,
        fingerprint: Vec<u8>,
        ttl: Duration,
        and_unlock: bool,
    ) -> Result<bool, StoreError> {
        let key = self.map_key(key);
        let tag = owner_tag(owner);
        let block = encode(&record, &fingerprint, tag)?;
        let written = self.write(&key, |shard, now| {
            let Shard { records, locks, .. } = shard;
            let lock = locks.get(&key);
            if lock.is_some_and(|lock| lock.is_live(now) && lock.owner_tag != tag) {
                return Some(false);
            }
            let stored = Stored {
                block,
                expires: deadline(now, ttl),
            };
            let added = stored.record_bytes();
            let mut replaced = 0;
            match records.entry(key) {
                Entry::Occupied(mut held) => {
                    let old = held.get();
                    if old.is_live(now) && old.owner_tag() != tag {
                        return Some(false);
                    }
                    replaced = old.record_bytes();
                    held.insert(stored);
                }
                Entry::Vacant(vacant) => {
                    // A key with neither lock nor record is a new entry.
                    if lock.is_none() && !self.reserve_entry() {
                        return None;
                    }
                    vacant.insert(stored);
                }
            }
            if and_unlock {
                locks.remove(&key);
            }
            self.record_bytes.fetch_add(added, Ordering::Relaxed);
            self.forget(0, replaced);
            Some(true)
        });
        // A record answers a waiting duplicate whether or not the lock went.
        if written == Some(true) {
            self.wake_waiters();
        }
        written.ok_or_else(|| self.full(StoreOperation::Set))
    }

    /// [`lock_in`](Self::lock_in) on `key`'s shard; when the store is
    /// full, once more after sweeping every shard for room.
    fn lock_now(&self, key: &str, owner: &str, ttl: Duration) -> Locking {
        let key = self.map_key(key);
        let tag = owner_tag(owner);
        let attempt = || {
            self.write(&key, |shard, now| {
                let lock = Lock {
                    owner_tag: tag,
                    expires: deadline(now, ttl),
                    taken: now,
                };
                self.lock_in(shard, &key, now, lock)
            })
        };
        match attempt() {
            Locking::Full if self.sweep_for_room() => attempt(),
            locking => locking,
        }
    }

    fn claim_now(&self, key: &str, owner: &str, ttl: Duration) -> Result<Claim, StoreError> {
        match self.lock_now(key, owner, ttl) {
            Locking::Acquired => Ok(Claim::Acquired),
            Locking::InFlight => Ok(Claim::InFlight),
            // Decoded after the shard's lock is released.
            Locking::Recorded(found) => {
                let (record, fingerprint) = found.decode()?;
                Ok(Claim::Completed {
                    record,
                    fingerprint,
                })
            }
            Locking::Full => Err(self.full(StoreOperation::Get)),
        }
    }

    fn try_lock_now(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, StoreError> {
        match self.lock_now(key, owner, ttl) {
            Locking::Acquired => Ok(true),
            Locking::InFlight | Locking::Recorded(_) => Ok(false),
            Locking::Full => Err(self.full(StoreOperation::TryLock)),
        }
    }

    fn unlock_now(&self, key: &str, owner: &str) {
        let key = self.map_key(key);
        let tag = owner_tag(owner);
        let now = self.clock.now_millis();
        let mut shard = self.shard(&key);
        let Shard { records, locks, .. } = &mut *shard;
        // What stays: a live lock of another owner, a live record. What
        // goes: this owner's lock, and whatever has lapsed.
        let (mut released, mut held, mut removed) = (false, false, false);
        if let Entry::Occupied(lock) = locks.entry(key) {
            released = lock.get().owner_tag == tag;
            if released || !lock.get().is_live(now) {
                lock.remove();
                removed = true;
            } else {
                held = true;
            }
        }
        let mut bytes = 0;
        if let Entry::Occupied(record) = records.entry(key) {
            if record.get().is_live(now) {
                held = true;
            } else {
                bytes = record.remove().record_bytes();
                removed = true;
            }
        }
        self.forget(usize::from(removed && !held), bytes);
        drop(shard);
        if released {
            self.wake_waiters();
        }
    }

    /// Wakes every duplicate waiting for a release, if any waits.
    fn wake_waiters(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.released.notify_waiters();
        }
    }

    fn inspect_now(&self, key: &str) -> Result<Option<KeyState>, StoreError> {
        let key = self.map_key(key);
        let now = self.clock.now_millis();
        let (lock, record) = {
            let shard = self.shard(&key);
            (
                shard
                    .live_lock(&key, now)
                    .map(|lock| (lock.expires, lock.taken)),
                shard
                    .live_record(&key, now)
                    .map(|stored| (Found::of(stored), stored.expires)),
            )
        };
        let mut state = KeyState::observed(now);
        if let Some((expires, taken)) = lock {
            state = state.locked_until(Some(expires)).lock_taken(Some(taken));
        }
        if let Some((found, expires)) = record {
            state = state.recorded(found.decode()?.0, Some(expires));
        }
        Ok((state.locked || state.record.is_some()).then_some(state))
    }

    /// Whether a live lock is held on `key`.
    fn is_locked_now(&self, key: &str) -> bool {
        let key = self.map_key(key);
        let now = self.clock.now_millis();
        self.shard(&key).live_lock(&key, now).is_some()
    }

    fn renew_now(&self, key: &str, owner: &str, ttl: Duration) -> bool {
        let key = self.map_key(key);
        let tag = owner_tag(owner);
        let now = self.clock.now_millis();
        let mut shard = self.shard(&key);
        let lock = shard
            .locks
            .get_mut(&key)
            .filter(|lock| lock.is_live(now) && lock.owner_tag == tag);
        match lock {
            Some(lock) => {
                lock.expires = deadline(now, ttl);
                true
            }
            None => false,
        }
    }
}

/// A poisoned shard only means a panic elsewhere while it was held; every
/// write leaves the map consistent, so keep going.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl std::fmt::Debug for MemoryIdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryIdempotencyStore")
            .field("entries", &self.len())
            .field("max_entries", &self.max_entries)
            .field("record_bytes", &self.record_bytes())
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

/// The store answers at once, so its futures are ready-made. Boxed as
/// non-capturing closures they are zero-sized, and a zero-sized box
/// allocates nothing: the common answers cost no allocation at all.
fn answer_bool<'a>(value: bool) -> IdempotencyFuture<'a, bool> {
    if value {
        Box::pin(std::future::poll_fn(|_| Poll::Ready(Ok(true))))
    } else {
        Box::pin(std::future::poll_fn(|_| Poll::Ready(Ok(false))))
    }
}

/// [`answer_bool`] for a fallible answer: only an error needs a real box.
fn answer_result<'a>(value: Result<bool, StoreError>) -> IdempotencyFuture<'a, bool> {
    match value {
        Ok(value) => answer_bool(value),
        Err(error) => Box::pin(std::future::ready(Err(error))),
    }
}

/// [`answer_bool`] for a claim: only a found record needs a real box.
fn answer_claim<'a>(claim: Result<Claim, StoreError>) -> IdempotencyFuture<'a, Claim> {
    match claim {
        Ok(Claim::Acquired) => Box::pin(std::future::poll_fn(|_| Poll::Ready(Ok(Claim::Acquired)))),
        Ok(Claim::InFlight) => Box::pin(std::future::poll_fn(|_| Poll::Ready(Ok(Claim::InFlight)))),
        other => Box::pin(std::future::ready(other)),
    }
}

impl IdempotencyStore for MemoryIdempotencyStore {
    fn get<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<IdempotencyEntry>> {
        Box::pin(std::future::ready(self.get_now(key)))
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
        answer_result(self.set_now(key, owner, record, fingerprint, ttl, false))
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
        answer_result(self.try_lock_now(key, owner, ttl))
    }

    fn unlock<'a>(&'a self, key: &'a str, owner: &'a str) -> IdempotencyFuture<'a, ()> {
        self.unlock_now(key, owner);
        Box::pin(std::future::poll_fn(|_| Poll::Ready(Ok(()))))
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
        answer_bool(self.renew_now(key, owner, ttl))
    }

    /// Looks up and locks under one shard lock, so a request that finishes
    /// between the two steps is seen as finished, not as in flight.
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
        answer_claim(self.claim_now(key, owner, in_flight_ttl))
    }

    /// Records and unlocks under one shard lock.
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
        answer_result(self.set_now(key, owner, record, fingerprint, ttl, true))
    }

    /// Woken as soon as the lock on any key goes (a release or a record),
    /// so a waiter claims again at once, with no claims in between. In one
    /// process every run that ends releases its lock (a panic or a dropped
    /// request too), so only the waiter's own deadline needs a timer: it
    /// looks at the clock again at least once a second.
    fn wait_for_release<'a>(
        &'a self,
        key: &'a str,
        _attempt: u32,
        limit: Duration,
    ) -> IdempotencyFuture<'a, ()> {
        Box::pin(async move {
            let _listening = Listening::on(&self.waiting);
            // Made before the lock is looked at: a release after the look
            // wakes it even before it is first polled.
            let released = self.released.notified();
            if !self.is_locked_now(key) {
                return Ok(());
            }
            tokio::select! {
                () = released => {}
                () = tokio::time::sleep(limit.min(RECHECK)) => {}
            }
            Ok(())
        })
    }

    fn inspect<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, Option<KeyState>> {
        Box::pin(std::future::ready(self.inspect_now(key)))
    }

    fn evict<'a>(&'a self, key: &'a str) -> IdempotencyFuture<'a, bool> {
        let key = self.map_key(key);
        let (lock, record) = {
            let mut shard = self.shard(&key);
            (shard.locks.remove(&key), shard.records.remove(&key))
        };
        let evicted = lock.is_some() || record.is_some();
        if evicted {
            self.forget(1, record.map_or(0, |stored| stored.record_bytes()));
            // Its waiters find the key free and run.
            self.wake_waiters();
        }
        answer_bool(evicted)
    }

    fn size(&self) -> Option<StoreSize> {
        let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        Some(StoreSize {
            entries: wide(self.len()),
            bytes: wide(self.record_bytes()),
            max_entries: Some(wide(self.max_entries)),
            max_bytes: Some(wide(self.max_bytes)),
        })
    }
}

/// One duplicate counted in [`MemoryIdempotencyStore::waiting`] while it
/// waits, however its wait ends (woken, timed out, or dropped).
struct Listening<'a>(&'a AtomicUsize);

impl<'a> Listening<'a> {
    fn on(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::SeqCst);
        Self(waiting)
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record's bucket holds no lock and no owner: the long-lived map costs
    /// 16 bytes of key, a block handle and a deadline per bucket.
    #[test]
    fn a_record_bucket_stays_small() {
        assert_eq!(size_of::<Stored>(), 40);
        assert_eq!(size_of::<(MapKey, Stored)>(), 56);
    }

    #[test]
    fn a_block_reads_back_its_owner_fingerprint_and_record() {
        let record = IdempotencyRecord::new(http::StatusCode::CREATED, [], "{}");
        let block = encode(&record, b"fingerprint", 42).expect("encodes");
        let stored = Stored { block, expires: 1 };
        assert_eq!(stored.owner_tag(), 42);
        assert_eq!(stored.record_bytes(), 11 + record.encoded_len());
        let (decoded, fingerprint) = Found::of(&stored).decode().expect("decodes");
        assert_eq!((decoded, fingerprint), (record, b"fingerprint".to_vec()));
    }

    #[test]
    fn a_cut_block_is_an_error_not_a_panic() {
        for block in [
            &b""[..],
            &[0; 11],
            &[0, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0, 0, 1],
        ] {
            let found = Found {
                block: Bytes::copy_from_slice(block),
            };
            assert!(found.decode().is_err());
        }
    }
}
