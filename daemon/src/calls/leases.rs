//! Session leases (issue #19; §C8.41, §C8.42, §C10.9): one control connection at a time may
//! hold a session exclusively. While it does, `tools.call` from every other connection fails
//! `session_leased` (a separate step of the pipeline, [`Leases::check`]).
//!
//! A lease belongs to the connection that took it: renewing is taking it again on the same
//! connection; it ends when that connection releases it or closes, when its TTL passes without
//! renewal, when the session is revoked or expires, or when another connection takes it with
//! `steal`. Every end emits `lease_released`, every take `lease_taken` (§C13.1).
//!
//! Locking: the lease table's lock is a leaf except for the event bus (lease → bus). Close
//! hooks and expiry timers run on their own tasks and take the table lock themselves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use appduct_protocol::control::{
    EventData, LeaseEndReason, LeaseHolder, LeaseReleasedData, LeaseTakenData, SessionLease,
    SessionSummary, SessionsLeaseResult,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::ErrorObject;
use serde_json::json;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::control_server::{CloseHookId, Connection, ConnectionId};
use crate::events::EventBus;

struct Lease {
    conn: Connection,
    hook: Option<CloseHookId>,
    holder: LeaseHolder,
    alias: String,
    /// Distinguishes this grant from a later one on the same session (stale timers and hooks).
    generation: u64,
    expires: Instant,
    expires_at_s: u64,
    timer: AbortHandle,
}

impl Lease {
    fn summary(&self) -> SessionLease {
        SessionLease::new(self.holder.clone(), self.expires_at_s)
    }
}

#[derive(Default)]
struct Table {
    by_session: HashMap<String, Lease>,
    next_generation: u64,
}

struct Shared {
    table: Mutex<Table>,
    bus: EventBus,
    clock: Arc<dyn Clock>,
}

/// The daemon's leases, keyed by session id. Cheap to clone.
#[derive(Clone)]
pub struct Leases {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("held", &self.table().by_session.len())
            .finish_non_exhaustive()
    }
}

/// `session_leased` (§C10.9): `details: {sessionId, alias, holder, expiresAt}`.
pub fn session_leased(session_id: &str, alias: &str, lease: &SessionLease) -> ErrorObject {
    let who = match (&lease.holder.client, lease.holder.pid) {
        (Some(c), Some(pid)) => format!("{c} (pid {pid})"),
        (Some(c), None) => c.clone(),
        (None, Some(pid)) => format!("pid {pid}"),
        (None, None) => "another client".to_owned(),
    };
    ErrorObject::application(
        ErrorType::SessionLeased,
        format!(
            "{alias} is leased by {who}; retry after it is released or expires, or take it over with `appduct sessions lease {alias} --steal`"
        ),
    )
    .with_details(json!({
        "sessionId": session_id,
        "alias": alias,
        "holder": lease.holder,
        "expiresAt": lease.expires_at,
    }))
}

impl Leases {
    pub fn new(bus: EventBus, clock: Arc<dyn Clock>) -> Self {
        Self {
            shared: Arc::new(Shared {
                table: Mutex::new(Table::default()),
                bus,
                clock,
            }),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.shared
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn expires_at_s(&self, ttl: Duration) -> u64 {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self.shared
            .clock
            .now_unix_ms()
            .saturating_add(ms)
            .div_ceil(1000)
    }

    /// `sessions.lease` (§C8.41): takes, renews or (with `steal`) takes over the lease of a
    /// resolved session for `conn`.
    pub fn take(
        &self,
        conn: &Connection,
        session_id: &str,
        alias: &str,
        ttl_ms: u64,
        steal: bool,
    ) -> Result<SessionsLeaseResult, ErrorObject> {
        let ttl = Duration::from_millis(ttl_ms);
        let now = Instant::now();
        let mut table = self.table();
        // A lease whose TTL passed is gone even if its timer has not run yet.
        if table
            .by_session
            .get(session_id)
            .is_some_and(|l| l.expires <= now)
        {
            self.end_locked(&mut table, session_id, LeaseEndReason::Expired);
        }
        if let Some(lease) = table.by_session.get_mut(session_id) {
            if lease.conn.id() == conn.id() {
                // A renewal never shortens the lease (review19 M2): a holder's short call
                // must not end the lease a long call of the same holder still needs. To
                // shorten it, the holder releases and takes it again.
                if now + ttl > lease.expires {
                    lease.expires = now + ttl;
                    lease.expires_at_s = self.expires_at_s(ttl);
                    lease.timer.abort();
                    lease.timer = self.spawn_timer(session_id, lease.generation, lease.expires);
                }
                let applied = lease.expires.saturating_duration_since(now);
                return Ok(SessionsLeaseResult::new(
                    session_id,
                    alias,
                    lease.summary(),
                    u64::try_from(applied.as_millis()).unwrap_or(u64::MAX),
                    true,
                    None,
                ));
            }
            if !steal {
                return Err(session_leased(session_id, alias, &lease.summary()));
            }
        }
        let stolen_from = if table.by_session.contains_key(session_id) {
            self.end_locked(&mut table, session_id, LeaseEndReason::Stolen)
        } else {
            None
        };
        table.next_generation += 1;
        let generation = table.next_generation;
        let holder = LeaseHolder::new(conn.client_name(), conn.peer_pid());
        let expires = now + ttl;
        let lease = Lease {
            conn: conn.clone(),
            hook: None,
            holder: holder.clone(),
            alias: alias.to_owned(),
            generation,
            expires,
            expires_at_s: self.expires_at_s(ttl),
            timer: self.spawn_timer(session_id, generation, expires),
        };
        let summary = lease.summary();
        table.by_session.insert(session_id.to_owned(), lease);
        self.shared.bus.emit(
            Some(session_id),
            Some(alias),
            EventData::LeaseTaken(LeaseTakenData::new(summary.clone(), stolen_from.clone())),
        );
        drop(table);

        // The holder closing releases the lease. Registered after the table lock is released:
        // a connection that already closed runs nothing, and the lease ends here instead.
        let weak = Arc::downgrade(&self.shared);
        let sid = session_id.to_owned();
        match conn.add_close_hook(move || {
            if let Some(leases) = Self::from_weak(&weak) {
                leases.end(&sid, generation, LeaseEndReason::Disconnected);
            }
        }) {
            Ok(hook) => {
                if let Some(lease) = self.table().by_session.get_mut(session_id)
                    && lease.generation == generation
                {
                    lease.hook = Some(hook);
                }
            }
            Err(_) => self.end(session_id, generation, LeaseEndReason::Disconnected),
        }
        Ok(SessionsLeaseResult::new(
            session_id,
            alias,
            summary,
            ttl_ms,
            false,
            stolen_from,
        ))
    }

    /// `sessions.release` (§C8.42): `true` when `conn` held the session's lease.
    pub fn release(&self, conn: &Connection, session_id: &str) -> bool {
        let mut table = self.table();
        let held = table
            .by_session
            .get(session_id)
            .is_some_and(|l| l.conn.id() == conn.id());
        if held {
            self.end_locked(&mut table, session_id, LeaseEndReason::Released);
        }
        held
    }

    /// The lease step of `tools.call` (§C10.1 step 4a): a call from any connection other than
    /// the holder's fails `session_leased`.
    pub fn check(&self, caller: ConnectionId, session_id: &str) -> Result<(), ErrorObject> {
        let table = self.table();
        match table.by_session.get(session_id) {
            Some(l) if l.conn.id() != caller && l.expires > Instant::now() => {
                Err(session_leased(session_id, &l.alias, &l.summary()))
            }
            _ => Ok(()),
        }
    }

    /// The session was revoked or expired: its lease ends with it.
    pub fn session_ended(&self, session_id: &str) {
        let mut table = self.table();
        self.end_locked(&mut table, session_id, LeaseEndReason::SessionEnded);
    }

    /// Fills `lease` of the summaries of leased sessions (§C9.1).
    pub fn annotate(&self, sessions: &mut [SessionSummary]) {
        let table = self.table();
        let now = Instant::now();
        for s in sessions {
            s.lease = table
                .by_session
                .get(&s.session_id)
                .filter(|l| l.expires > now)
                .map(Lease::summary);
        }
    }

    fn from_weak(weak: &Weak<Shared>) -> Option<Self> {
        weak.upgrade().map(|shared| Self { shared })
    }

    /// Ends the lease of `session_id` if it is still grant `generation`.
    fn end(&self, session_id: &str, generation: u64, reason: LeaseEndReason) {
        let mut table = self.table();
        if table
            .by_session
            .get(session_id)
            .is_some_and(|l| l.generation == generation)
        {
            self.end_locked(&mut table, session_id, reason);
        }
    }

    /// Removes the lease, stops its timer and hook, emits `lease_released`; returns its holder.
    fn end_locked(
        &self,
        table: &mut Table,
        session_id: &str,
        reason: LeaseEndReason,
    ) -> Option<LeaseHolder> {
        let lease = table.by_session.remove(session_id)?;
        lease.timer.abort();
        if let Some(hook) = lease.hook
            && reason != LeaseEndReason::Disconnected
        {
            lease.conn.remove_close_hook(hook);
        }
        self.shared.bus.emit(
            Some(session_id),
            Some(&lease.alias),
            EventData::LeaseReleased(LeaseReleasedData::new(lease.holder.clone(), reason)),
        );
        Some(lease.holder)
    }

    fn spawn_timer(&self, session_id: &str, generation: u64, at: Instant) -> AbortHandle {
        let weak = Arc::downgrade(&self.shared);
        let sid = session_id.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            if let Some(leases) = Self::from_weak(&weak) {
                leases.end(&sid, generation, LeaseEndReason::Expired);
            }
        })
        .abort_handle()
    }
}
