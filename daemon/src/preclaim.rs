//! The pre-claim budget of one device listener (§D6 as amended by issue #20; SECURITY.md
//! "Pre-claim budget").
//!
//! Each listener has its own [`PreclaimBudget`]: a flood on the wss port cannot touch the
//! loopback web listener. Inside one budget:
//!
//! - A *stranger* (a non-loopback peer of the wss listener) may hold at most `per_source_cap`
//!   pending connections per IP address; the next one from that address is refused at accept
//!   (TCP closed before TLS, nothing read).
//! - Strangers together may hold at most `capacity - loopback_reserve` slots: the reserve is
//!   kept for loopback peers (local processes, the simulator, web pages on the web listener).
//! - When there is no room, a newcomer *evicts* a pending connection instead of being refused:
//!   the oldest of those that got least far ([`Progress`]: idle, then handshaking, then open).
//!   A stranger evicts only strangers, a loopback peer evicts a stranger first and otherwise a
//!   loopback connection. A connection is evictable until its first
//!   message is handed to the engine; then it is protected, and its slot is released as soon
//!   as the engine has processed that message. A resume (or a claim) therefore never waits for
//!   a flood to time out: it needs only to finish TLS, the upgrade and its first frame before
//!   `capacity` later connections have arrived.
//!
//! Eviction drops TCP without a close frame, like a refusal: an SDK retries a 1006 within grace.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use appduct_protocol::limits;
use tokio::sync::watch;

/// How one listener's pre-claim budget treats its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreclaimPolicy {
    /// Pending connections this listener holds at most (`limits::MAX_PRECLAIM_CONNECTIONS`).
    pub capacity: usize,
    /// Pending connections one stranger address may hold (`limits::MAX_PRECLAIM_PER_SOURCE`).
    pub per_source_cap: usize,
    /// Slots strangers can never take (`limits::PRECLAIM_LOOPBACK_RESERVE`).
    pub loopback_reserve: usize,
    /// Whether loopback peers are local (production). Tests set `false` so that connections
    /// from 127.0.0.1 are strangers and the per-source cap and stranger eviction apply to them.
    pub loopback_is_local: bool,
}

impl PreclaimPolicy {
    /// The documented numbers for the wss listener (§D6.1).
    pub const fn wss() -> Self {
        Self {
            capacity: limits::MAX_PRECLAIM_CONNECTIONS,
            per_source_cap: limits::MAX_PRECLAIM_PER_SOURCE,
            loopback_reserve: limits::PRECLAIM_LOOPBACK_RESERVE,
            loopback_is_local: true,
        }
    }

    /// The web listener: bound to 127.0.0.1, so every peer is local.
    pub const fn web(capacity: usize) -> Self {
        Self {
            capacity,
            per_source_cap: capacity,
            loopback_reserve: 0,
            loopback_is_local: true,
        }
    }

    pub const fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    pub const fn per_source_cap(mut self, cap: usize) -> Self {
        self.per_source_cap = cap;
        self
    }

    pub const fn loopback_reserve(mut self, reserve: usize) -> Self {
        self.loopback_reserve = reserve;
        self
    }

    pub const fn loopback_is_local(mut self, local: bool) -> Self {
        self.loopback_is_local = local;
        self
    }

    fn is_local(&self, peer: IpAddr) -> bool {
        self.loopback_is_local && peer.to_canonical().is_loopback()
    }

    /// Slots strangers may hold together.
    fn stranger_room(&self) -> usize {
        self.capacity.saturating_sub(self.loopback_reserve)
    }
}

impl Default for PreclaimPolicy {
    fn default() -> Self {
        Self::wss()
    }
}

/// Why a connection got no slot; it is closed at once without reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this address already holds {0} pre-claim connections")]
    PerSource(usize),
    #[error("every pre-claim slot is held by a connection this one may not evict")]
    Full,
}

const PENDING: u8 = 0;
const PROTECTED: u8 = 1;
const EVICTED: u8 = 2;

/// Shared by a slot, its budget entry and the transport: evicted or protected, exactly once.
#[derive(Debug)]
struct EvictionState {
    state: AtomicU8,
    /// How far the connection got ([`Progress`]); idle connections are evicted first.
    progress: AtomicU8,
    evicted: watch::Sender<bool>,
}

/// How far a pending connection got. Eviction takes the oldest connection of the lowest stage,
/// so an idle flood (sockets that never send a byte) never displaces a client that is already
/// handshaking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Progress {
    /// Accepted; the peer has sent nothing yet.
    Idle = 0,
    /// The peer has sent bytes: TLS handshake or upgrade request under way.
    Handshaking = 1,
    /// The WebSocket is open; the first frame has not reached the engine.
    Open = 2,
}

/// The transport's view of a slot: it waits for an eviction and protects the connection when
/// its first message goes to the engine.
#[derive(Debug, Clone)]
pub struct Eviction {
    shared: Arc<EvictionState>,
}

impl Eviction {
    fn new() -> Self {
        Self {
            shared: Arc::new(EvictionState {
                state: AtomicU8::new(PENDING),
                progress: AtomicU8::new(Progress::Idle as u8),
                evicted: watch::channel(false).0,
            }),
        }
    }

    /// A handle nothing can evict (connections made without a budget, e.g. in tests).
    pub fn never() -> Self {
        let eviction = Self::new();
        eviction.protect();
        eviction
    }

    /// Marks the first message as delivered. `false` when the connection was evicted first: the
    /// message must then be dropped with the connection.
    pub fn protect(&self) -> bool {
        match self.shared.state.compare_exchange(
            PENDING,
            PROTECTED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(state) => state == PROTECTED,
        }
    }

    fn evict(&self) -> bool {
        let evicted = self
            .shared
            .state
            .compare_exchange(PENDING, EVICTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if evicted {
            self.shared.evicted.send_replace(true);
        }
        evicted
    }

    /// Records that the connection got at least as far as `progress`.
    pub fn advance(&self, progress: Progress) {
        self.shared
            .progress
            .fetch_max(progress as u8, Ordering::AcqRel);
    }

    fn progress(&self) -> u8 {
        self.shared.progress.load(Ordering::Acquire)
    }

    pub fn is_evicted(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == EVICTED
    }

    /// Resolves once the connection is evicted; never after it was protected.
    pub async fn evicted(&self) {
        let mut rx = self.shared.evicted.subscribe();
        // The sender lives in `shared`, which `self` holds: `wait_for` cannot fail here.
        let _ = rx.wait_for(|evicted| *evicted).await;
    }
}

#[derive(Debug)]
struct Entry {
    source: Option<IpAddr>,
    eviction: Eviction,
}

#[derive(Debug, Default)]
struct Slots {
    next_id: u64,
    /// Pending strangers by accept order (the id grows), with their address.
    strangers: BTreeMap<u64, Entry>,
    locals: BTreeMap<u64, Entry>,
    per_source: HashMap<IpAddr, usize>,
}

impl Slots {
    fn total(&self) -> usize {
        self.strangers.len() + self.locals.len()
    }

    fn remove(&mut self, id: u64) {
        let entry = self
            .strangers
            .remove(&id)
            .or_else(|| self.locals.remove(&id));
        if let Some(source) = entry.and_then(|entry| entry.source) {
            self.forget_source(source);
        }
    }

    fn forget_source(&mut self, source: IpAddr) {
        if let Some(count) = self.per_source.get_mut(&source) {
            *count -= 1;
            if *count == 0 {
                self.per_source.remove(&source);
            }
        }
    }

    /// Evicts the oldest evictable connection of `strangers` (or `locals`); `true` if one went.
    fn evict_oldest(&mut self, strangers: bool) -> bool {
        let map = if strangers {
            &mut self.strangers
        } else {
            &mut self.locals
        };
        // The oldest of the least advanced stage; protected connections are skipped.
        let mut chosen = None;
        for stage in [Progress::Idle, Progress::Handshaking, Progress::Open] {
            chosen = map
                .iter()
                .find(|(_, entry)| {
                    entry.eviction.progress() <= stage as u8 && entry.eviction.evict()
                })
                .map(|(id, _)| *id);
            if chosen.is_some() {
                break;
            }
        }
        let Some(id) = chosen else {
            return false;
        };
        self.remove(id);
        true
    }
}

#[derive(Debug)]
struct BudgetInner {
    policy: PreclaimPolicy,
    slots: Mutex<Slots>,
}

/// The pre-claim budget of one listener. Clones share the budget.
#[derive(Debug, Clone)]
pub struct PreclaimBudget {
    inner: Arc<BudgetInner>,
}

impl PreclaimBudget {
    pub fn new(policy: PreclaimPolicy) -> Self {
        Self {
            inner: Arc::new(BudgetInner {
                policy,
                slots: Mutex::new(Slots::default()),
            }),
        }
    }

    /// A budget of `capacity` slots where every peer is local (no per-source cap).
    pub fn with_capacity(capacity: usize) -> Self {
        Self::new(PreclaimPolicy::web(capacity))
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        self.inner
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn policy(&self) -> PreclaimPolicy {
        self.inner.policy
    }

    /// A slot for a connection from `peer`, evicting an older pending connection when the budget
    /// is full (see the module documentation), or the reason it gets none.
    pub fn admit(&self, peer: IpAddr) -> Result<PreclaimSlot, Refusal> {
        self.admit_at(peer, Progress::Idle)
    }

    /// [`admit`](Self::admit) for a connection already known to have got as far as `progress`
    /// (the listener peeks at accept: a client's first bytes often arrive with the connection).
    pub fn admit_at(&self, peer: IpAddr, progress: Progress) -> Result<PreclaimSlot, Refusal> {
        let policy = self.inner.policy;
        let peer = peer.to_canonical();
        let local = policy.is_local(peer);
        let mut slots = self.slots();
        if local {
            let room = slots.total() < policy.capacity;
            if !room && !slots.evict_oldest(true) && !slots.evict_oldest(false) {
                return Err(Refusal::Full);
            }
        } else {
            let held = slots.per_source.get(&peer).copied().unwrap_or(0);
            if held >= policy.per_source_cap {
                return Err(Refusal::PerSource(held));
            }
            let room =
                slots.strangers.len() < policy.stranger_room() && slots.total() < policy.capacity;
            if !room && !slots.evict_oldest(true) {
                return Err(Refusal::Full);
            }
        }
        let id = slots.next_id;
        slots.next_id += 1;
        let eviction = Eviction::new();
        eviction.advance(progress);
        let entry = Entry {
            source: (!local).then_some(peer),
            eviction: eviction.clone(),
        };
        if local {
            slots.locals.insert(id, entry);
        } else {
            *slots.per_source.entry(peer).or_insert(0) += 1;
            slots.strangers.insert(id, entry);
        }
        Ok(PreclaimSlot {
            budget: self.clone(),
            id,
            eviction,
        })
    }

    pub fn capacity(&self) -> usize {
        self.inner.policy.capacity
    }

    /// Slots currently held (evicted connections no longer count).
    pub fn in_use(&self) -> usize {
        self.slots().total()
    }

    /// Slots held by connections from `peer`.
    pub fn held_by(&self, peer: IpAddr) -> usize {
        let peer = peer.to_canonical();
        let slots = self.slots();
        if self.inner.policy.is_local(peer) {
            slots.locals.len()
        } else {
            slots.per_source.get(&peer).copied().unwrap_or(0)
        }
    }
}

impl Default for PreclaimBudget {
    fn default() -> Self {
        Self::new(PreclaimPolicy::wss())
    }
}

/// One pre-claim slot. The engine drops it once the claim or resume has been processed (or the
/// connection ends), which lets the next connection in.
#[derive(Debug)]
pub struct PreclaimSlot {
    budget: PreclaimBudget,
    id: u64,
    eviction: Eviction,
}

impl PreclaimSlot {
    /// The handle the transport watches.
    pub fn eviction(&self) -> Eviction {
        self.eviction.clone()
    }
}

impl Drop for PreclaimSlot {
    fn drop(&mut self) {
        self.budget.slots().remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn stranger(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 168, 1, n))
    }

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn policy() -> PreclaimPolicy {
        PreclaimPolicy::wss()
            .capacity(8)
            .per_source_cap(3)
            .loopback_reserve(2)
    }

    fn admit(budget: &PreclaimBudget, peer: IpAddr) -> PreclaimSlot {
        budget
            .admit(peer)
            .unwrap_or_else(|e| panic!("{peer} refused: {e}"))
    }

    #[test]
    fn the_per_source_cap_refuses_the_excess_of_one_address() {
        let budget = PreclaimBudget::new(policy());
        let held: Vec<_> = (0..3).map(|_| admit(&budget, stranger(1))).collect();
        assert_eq!(budget.admit(stranger(1)).err(), Some(Refusal::PerSource(3)));
        // IPv4-mapped IPv6 is the same source.
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 168, 1, 1).to_ipv6_mapped());
        assert_eq!(budget.admit(mapped).err(), Some(Refusal::PerSource(3)));
        assert_eq!(budget.held_by(stranger(1)), 3);
        // Other addresses are unaffected, and a freed slot is the address's again.
        let _other = admit(&budget, stranger(2));
        drop(held);
        assert_eq!(budget.held_by(stranger(1)), 0);
        let _again = admit(&budget, stranger(1));
    }

    #[test]
    fn strangers_never_take_the_loopback_reserve_and_evict_their_oldest() {
        let budget = PreclaimBudget::new(policy());
        // 6 stranger slots (8 minus a reserve of 2), from three addresses.
        let flood: Vec<_> = (0..6).map(|i| admit(&budget, stranger(i / 2))).collect();
        assert_eq!(budget.in_use(), 6);
        // A seventh stranger (a resume from a LAN device) evicts the oldest stranger.
        let resume = admit(&budget, stranger(9));
        assert!(flood[0].eviction().is_evicted());
        assert!(!flood[1].eviction().is_evicted());
        assert_eq!(budget.in_use(), 6);
        // Loopback peers get the reserve without evicting anyone.
        let local_a = admit(&budget, LOOPBACK);
        let local_b = admit(&budget, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(budget.in_use(), 8);
        assert!(!flood[1].eviction().is_evicted());
        // A full budget: a loopback newcomer evicts the oldest stranger, never a local.
        let local_c = admit(&budget, LOOPBACK);
        assert!(flood[1].eviction().is_evicted());
        assert!(!local_a.eviction().is_evicted());
        assert_eq!(budget.in_use(), 8);
        drop((resume, local_a, local_b, local_c));
    }

    #[test]
    fn protected_connections_are_never_evicted() {
        let budget = PreclaimBudget::new(policy().capacity(2).loopback_reserve(0));
        let first = admit(&budget, stranger(1));
        let second = admit(&budget, stranger(2));
        // The first one's claim is on its way to the engine.
        assert!(first.eviction().protect());
        let third = admit(&budget, stranger(3));
        assert!(!first.eviction().is_evicted());
        assert!(second.eviction().is_evicted());
        assert!(
            !second.eviction().protect(),
            "an evicted connection stays evicted"
        );
        // Nothing evictable left among strangers: refused.
        assert!(third.eviction().protect());
        assert_eq!(budget.admit(stranger(4)).err(), Some(Refusal::Full));
        drop(first);
        let _fourth = admit(&budget, stranger(4));
    }

    #[test]
    fn idle_connections_are_evicted_before_ones_that_are_handshaking() {
        let budget = PreclaimBudget::new(policy().capacity(3).loopback_reserve(0));
        let handshaking = admit(&budget, stranger(1));
        handshaking.eviction().advance(Progress::Handshaking);
        let open = admit(&budget, stranger(2));
        open.eviction().advance(Progress::Open);
        let idle = admit(&budget, stranger(3));
        // The newest, but idle: it goes first.
        let _a = admit(&budget, stranger(4));
        assert!(idle.eviction().is_evicted());
        assert!(!handshaking.eviction().is_evicted());
        // Then the oldest idle one, then the handshaking one before the open one.
        let _b = admit(&budget, stranger(5));
        assert!(_a.eviction().is_evicted());
        _b.eviction().advance(Progress::Open);
        let _c = admit(&budget, stranger(6));
        assert!(handshaking.eviction().is_evicted());
        assert!(!open.eviction().is_evicted());
    }

    #[test]
    fn strangers_never_evict_loopback_connections() {
        let budget = PreclaimBudget::new(policy().capacity(2).loopback_reserve(0));
        let _a = admit(&budget, LOOPBACK);
        let _b = admit(&budget, LOOPBACK);
        assert_eq!(budget.admit(stranger(1)).err(), Some(Refusal::Full));
        // A loopback newcomer evicts the oldest loopback connection.
        let _c = admit(&budget, LOOPBACK);
        assert!(_a.eviction().is_evicted());
    }

    #[test]
    fn loopback_counts_as_a_stranger_when_configured() {
        let budget = PreclaimBudget::new(policy().loopback_is_local(false));
        let _held: Vec<_> = (0..3).map(|_| admit(&budget, LOOPBACK)).collect();
        assert_eq!(budget.admit(LOOPBACK).err(), Some(Refusal::PerSource(3)));
    }

    #[test]
    fn the_web_budget_has_no_per_source_cap() {
        let budget = PreclaimBudget::with_capacity(4);
        let held: Vec<_> = (0..4).map(|_| admit(&budget, LOOPBACK)).collect();
        assert_eq!(budget.in_use(), 4);
        let _fifth = admit(&budget, LOOPBACK);
        assert!(held[0].eviction().is_evicted());
        assert_eq!(budget.capacity(), 4);
    }

    #[tokio::test]
    async fn eviction_wakes_the_transport() {
        let budget = PreclaimBudget::with_capacity(1);
        let first = admit(&budget, LOOPBACK);
        let watching = first.eviction();
        let waiter = tokio::spawn(async move { watching.evicted().await });
        let _second = admit(&budget, LOOPBACK);
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(budget.in_use(), 1);
        drop(first);
        assert_eq!(
            budget.in_use(),
            1,
            "an evicted slot's drop frees nothing twice"
        );
    }

    #[test]
    fn defaults_are_the_documented_constants() {
        let policy = PreclaimPolicy::default();
        assert_eq!(policy.capacity, limits::MAX_PRECLAIM_CONNECTIONS);
        assert_eq!(policy.per_source_cap, limits::MAX_PRECLAIM_PER_SOURCE);
        assert_eq!(policy.loopback_reserve, limits::PRECLAIM_LOOPBACK_RESERVE);
        assert!(policy.loopback_is_local);
        assert!(Eviction::never().protect());
    }
}
