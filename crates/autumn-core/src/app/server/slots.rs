//! Who holds the server's connection slots, and who gives way.
//!
//! A cap on connections alone lets a client that opens many and sends
//! nothing (or its headers a byte at a time) hold every slot until its
//! timeouts run out, while real clients wait in the listen backlog. So:
//!
//! - each client address may hold at most `max_connections_per_client`
//!   (a trusted proxy is exempt: its connections carry many clients);
//! - at the cap, the connection that has waited longest for a request head
//!   (idle keep-alive, a TLS handshake or a head not yet complete), or whose
//!   request body arrives below `min_body_rate`, is closed to admit the new
//!   one, as nginx and Go's net/http shed idle connections first. A
//!   connection whose request is being handled is never closed this way.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

/// `idle_since` of a connection serving a request.
const BUSY: u64 = 0;
/// `idle_since` of a connection chosen to give way.
const SHED: u64 = u64::MAX;
/// `idle_since` of a connection still waiting for a slot: it holds none,
/// so closing it would admit nobody.
const WAITING: u64 = u64::MAX - 1;

/// One connection's slot: whether it waits for a request head (and since
/// when), and how it is told to give way.
pub(crate) struct Slot {
    id: u64,
    peer: IpAddr,
    /// Milliseconds since the registry started, plus one, that the
    /// connection has been waiting for a head; [`BUSY`] or [`SHED`].
    idle_since: AtomicU64,
    shed: Notify,
    registry: Arc<Registry>,
}

impl Slot {
    /// The connection got its slot: idle (waiting for its first head)
    /// from now on.
    pub(crate) fn admitted(&self) {
        self.idle();
    }

    /// The connection waits for a request head from now on.
    pub(crate) fn idle(&self) {
        self.set_idle_since(self.registry.now());
    }

    fn set_idle_since(&self, at: u64) {
        // A shed slot stays shed.
        let _ = self
            .idle_since
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |was| {
                (was != SHED).then_some(at)
            });
    }

    /// The connection serves a request.
    pub(crate) fn busy(&self) {
        let _ = self
            .idle_since
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |at| {
                (at != SHED).then_some(BUSY)
            });
    }

    /// The connection's request body, begun at `since`, arrives slower
    /// than the minimum rate: at the cap it may give way, as an idle
    /// connection would, counted idle from when its body began (so a body
    /// that dribbles on stays the oldest), until it catches up
    /// ([`busy`](Self::busy) again).
    pub(crate) fn slow_body(&self, since: std::time::Instant) {
        let at = self.registry.millis_at(since);
        let _ = self
            .idle_since
            .compare_exchange(BUSY, at, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Completes when the connection is chosen to give way.
    pub(crate) async fn shed(&self) {
        self.shed.notified().await;
    }

    /// The client address it was accepted from.
    pub(crate) fn peer(&self) -> IpAddr {
        self.peer
    }
}

/// A connection's hold on its slot: the slot is given back (and its
/// client's count lowered) when this drops, however many other parts of the
/// connection still point at the [`Slot`].
pub(crate) struct SlotHold(Arc<Slot>);

impl SlotHold {
    pub(crate) fn slot(&self) -> &Arc<Slot> {
        &self.0
    }
}

impl Drop for SlotHold {
    fn drop(&mut self) {
        self.0.registry.leave(self.0.id, self.0.peer);
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its address already holds `max_connections_per_client`.
    ClientAtCap,
}

/// Every open connection's slot, and the connections per client address.
pub(crate) struct Registry {
    started: Instant,
    per_client_cap: usize,
    trusted: Vec<crate::trusted_proxies::Network>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    slots: HashMap<u64, Arc<Slot>>,
    per_client: HashMap<IpAddr, usize>,
}

impl Registry {
    pub(crate) fn new(
        per_client_cap: usize,
        trusted: Vec<crate::trusted_proxies::Network>,
    ) -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            per_client_cap,
            trusted,
            inner: Mutex::default(),
        })
    }

    fn now(&self) -> u64 {
        self.millis_at(Instant::now())
    }

    /// `at` as the registry counts time: milliseconds since it started,
    /// plus one (so never [`BUSY`]), below [`WAITING`].
    fn millis_at(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.started).as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
            .min(WAITING - 1)
    }

    /// Admits a connection from `peer`, waiting for a slot until
    /// [`Slot::admitted`]; refused when its address is at its cap.
    pub(crate) fn enter(self: &Arc<Self>, peer: IpAddr) -> Result<SlotHold, Refusal> {
        let limited = self.per_client_cap > 0 && !self.trusted.iter().any(|net| net.contains(peer));
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let held = inner.per_client.entry(peer).or_default();
        if limited && *held >= self.per_client_cap {
            return Err(Refusal::ClientAtCap);
        }
        *held += 1;
        inner.next_id += 1;
        let slot = Arc::new(Slot {
            id: inner.next_id,
            peer,
            idle_since: AtomicU64::new(WAITING),
            shed: Notify::new(),
            registry: Arc::clone(self),
        });
        inner.slots.insert(slot.id, Arc::clone(&slot));
        Ok(SlotHold(slot))
    }

    fn leave(&self, id: u64, peer: IpAddr) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.slots.remove(&id);
        if let Some(held) = inner.per_client.get_mut(&peer) {
            *held -= 1;
            if *held == 0 {
                inner.per_client.remove(&peer);
            }
        }
    }

    /// Tells the connection that has waited longest for a head to give
    /// way; whether there was one.
    pub(crate) fn shed_oldest_idle(&self) -> bool {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // One pass for the oldest, no allocation and no sort: under an
        // attack this runs for every connection accepted at the cap and
        // every 50 ms for each one waiting, over a thousand slots.
        let oldest = || {
            inner
                .slots
                .values()
                .map(|slot| (slot.idle_since.load(Ordering::Acquire), slot))
                .filter(|(at, _)| ![BUSY, SHED, WAITING].contains(at))
                // Idle since the same millisecond: the older connection
                // (the lower id) goes first.
                .min_by_key(|(at, slot)| (*at, slot.id))
        };
        // The oldest that is still idle when claimed: one that started a
        // request (or was shed) meanwhile is passed over, and the next
        // oldest looked for; each miss is a slot that changed, so at most
        // as many tries as slots.
        for _ in 0..inner.slots.len() {
            let Some((at, slot)) = oldest() else {
                return false;
            };
            if slot
                .idle_since
                .compare_exchange(at, SHED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                slot.shed.notify_one();
                return true;
            }
        }
        false
    }

    /// Slots held now (for tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .slots
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_client_at_its_cap_is_refused_and_others_are_not() {
        let registry = Registry::new(2, Vec::new());
        let first = registry.enter(ip(1)).expect("first");
        let _second = registry.enter(ip(1)).expect("second");
        assert_eq!(registry.enter(ip(1)).err(), Some(Refusal::ClientAtCap));
        let _other = registry.enter(ip(2)).expect("another client");
        drop(first);
        assert!(
            registry.enter(ip(1)).is_ok(),
            "a slot given back is free again"
        );
    }

    #[test]
    fn a_trusted_proxy_is_not_capped() {
        let proxy = crate::trusted_proxies::Network::parse("10.0.0.0/24").expect("a network");
        let registry = Registry::new(1, vec![proxy]);
        let held: Vec<_> = (0..5)
            .map(|_| registry.enter(ip(9)).expect("admitted"))
            .collect();
        assert_eq!(held.len(), 5);
        assert_eq!(registry.held(), 5);
    }

    #[tokio::test]
    async fn the_oldest_idle_connection_gives_way_and_a_busy_one_never_does() {
        let registry = Registry::new(0, Vec::new());
        let busy = registry.enter(ip(1)).expect("busy");
        let busy = busy.slot();
        busy.admitted();
        busy.busy();
        let _waiting = registry.enter(ip(4)).expect("waiting for a slot");
        assert!(
            !registry.shed_oldest_idle(),
            "nobody idle, and one waiting holds no slot"
        );
        let old_hold = registry.enter(ip(2)).expect("old");
        let old = old_hold.slot();
        old.idle_since.store(5, Ordering::Release);
        let young_hold = registry.enter(ip(3)).expect("young");
        let young = young_hold.slot();
        young.idle_since.store(50, Ordering::Release);
        assert!(registry.shed_oldest_idle());
        tokio::time::timeout(std::time::Duration::from_secs(1), old.shed())
            .await
            .expect("the oldest idle one is told");
        // Once shed, it stays shed whatever it does next.
        old.busy();
        old.idle();
        assert_eq!(old.idle_since.load(Ordering::Acquire), SHED);
        assert_eq!(busy.idle_since.load(Ordering::Acquire), BUSY);
    }
}
