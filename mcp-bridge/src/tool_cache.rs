//! The registry entries `appduct_call_tool` checks before a call (policy, `destructiveHint`,
//! deadline; §M8.5 steps 3–4), cached per session id and kept exact by an event
//! subscription (project decision, ARCHITECTURE.md "MCP bridge").
//!
//! The bridge subscribes its persistent control connection (§M1) to the kinds that can
//! change an entry: `tools_changed` (the registry, hence policy and deadline), and
//! `session_suspended` / `session_resumed` / `session_revoked` / `session_expired`. Policy
//! itself only changes with the registry or a daemon restart (§C11), and a restart closes the
//! connection, which drops the whole cache with it.
//!
//! Why a hit is as fresh as a `tools.list` sent after the selector was resolved: the selector
//! is resolved with `sessions.describe` on that same connection (§M7). The daemon hands an
//! event to its subscribers' queues under the same lock under which the change becomes visible,
//! and writes one connection's events and responses through one queue; the client routes that
//! connection's lines in order. So every event of a change the describe could see is in the
//! event stream before the describe's answer, and [`ToolCache::get`] waits until the applier
//! task has applied everything received. A change after the describe races with the call
//! exactly as it would race with an uncached `tools.list`; the daemon re-checks existence and
//! policy at `tools.call` anyway (§C10.1).
//!
//! Misses are never cached: an unknown name is looked up again on every call, so a tool
//! registered later is found at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use appduct_client::client::{ClientError, ControlClient, EventStream};
use appduct_protocol::control::{
    EventKind, EventNotification, SelectorParams, SessionSummary, SessionsDescribe,
    SubscribeParams, ToolsListEntry,
};
use tokio::sync::{mpsc, oneshot};

/// The event kinds that invalidate cached entries (§C13.1).
pub const INVALIDATING_KINDS: [EventKind; 5] = [
    EventKind::ToolsChanged,
    EventKind::SessionSuspended,
    EventKind::SessionResumed,
    EventKind::SessionRevoked,
    EventKind::SessionExpired,
];

/// A cache read: the entry, or the generation to pass to [`ToolCache::store`] with a fresh one.
#[derive(Debug)]
pub enum Cached {
    Hit(Arc<ToolsListEntry>),
    Miss(Generation),
}

/// The count of invalidating events applied when a lookup started; an entry fetched since is
/// stored only if no invalidation came in between (it could predate the change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation(u64);

/// The entries, and the subscribed connection that keeps them true.
pub struct ToolCache {
    client: ControlClient,
    entries: Arc<Mutex<Entries>>,
    /// Asks the applier task to apply everything received so far, then answers.
    barrier: mpsc::UnboundedSender<oneshot::Sender<()>>,
}

/// The cached entries and the count of invalidations applied.
#[derive(Debug, Default)]
struct Entries {
    generation: u64,
    /// session id → tool name → entry.
    sessions: HashMap<String, HashMap<String, Arc<ToolsListEntry>>>,
}

impl Entries {
    fn apply(&mut self, event: &EventNotification) {
        if !INVALIDATING_KINDS.contains(&event.kind()) {
            return;
        }
        if let Some(id) = &event.session_id {
            self.sessions.remove(id);
        }
        self.generation += 1;
    }

    fn get(&self, session_id: &str, name: &str) -> Cached {
        match self.sessions.get(session_id).and_then(|s| s.get(name)) {
            Some(entry) => Cached::Hit(entry.clone()),
            None => Cached::Miss(Generation(self.generation)),
        }
    }

    fn store(&mut self, since: Generation, session_id: &str, entry: Arc<ToolsListEntry>) {
        if self.generation != since.0 {
            return;
        }
        self.sessions
            .entry(session_id.to_owned())
            .or_default()
            .insert(entry.name().to_owned(), entry);
    }
}

fn lock(entries: &Mutex<Entries>) -> MutexGuard<'_, Entries> {
    entries.lock().unwrap_or_else(|p| p.into_inner())
}

/// Applies events as they arrive, so nothing piles up while no call comes, and answers
/// barriers. Ends with the cache (its barrier sender) or the connection.
async fn apply_events(
    mut events: EventStream,
    entries: Arc<Mutex<Entries>>,
    mut barriers: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
) {
    loop {
        tokio::select! {
            biased;
            barrier = barriers.recv() => {
                let Some(done) = barrier else { return };
                while let Some(event) = events.try_next() {
                    lock(&entries).apply(&event);
                }
                let _ = done.send(());
            }
            event = events.next() => match event {
                Some(event) => lock(&entries).apply(&event),
                None => return,
            },
        }
    }
}

impl std::fmt::Debug for ToolCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCache")
            .field("open", &self.client.is_open())
            .finish_non_exhaustive()
    }
}

impl ToolCache {
    /// Subscribes `client`, the persistent connection, to the invalidating kinds.
    pub async fn subscribe(client: ControlClient) -> Result<Self, ClientError> {
        let events = client
            .subscribe(SubscribeParams::default().with_kinds(Some(INVALIDATING_KINDS.to_vec())))
            .await?;
        let entries = Arc::new(Mutex::new(Entries::default()));
        let (barrier, barriers) = mpsc::unbounded_channel();
        tokio::spawn(apply_events(events, entries.clone(), barriers));
        Ok(Self {
            client,
            entries,
            barrier,
        })
    }

    /// `sessions.describe {selector?}` on the subscribed connection (§M7). Every event
    /// that arrived before its answer is in the stream by then, so a [`ToolCache::get`] after
    /// it reflects what the describe saw.
    pub async fn resolve(&self, selector: Option<&str>) -> Result<SessionSummary, ClientError> {
        self.client
            .call::<SessionsDescribe>(
                SelectorParams::default().with_selector(selector.map(str::to_owned)),
            )
            .await
    }

    /// Returns once every event received so far is applied; `false` when the applier ended
    /// (the connection closed), and then the cache must not be used.
    async fn applied(&self) -> bool {
        let (done, applied) = oneshot::channel();
        self.barrier.send(done).is_ok() && applied.await.is_ok()
    }

    /// The cached entry of `name` on `session_id`, after applying the events received; `None`
    /// when the cache is no longer kept.
    pub async fn get(&self, session_id: &str, name: &str) -> Option<Cached> {
        if !self.applied().await {
            return None;
        }
        Some(lock(&self.entries).get(session_id, name))
    }

    /// Keeps `entry`, looked up after [`ToolCache::get`] answered `Miss(since)`, unless an
    /// invalidation arrived meanwhile (its answer could predate the change).
    pub async fn store(&self, since: Generation, session_id: &str, entry: Arc<ToolsListEntry>) {
        if self.applied().await {
            lock(&self.entries).store(since, session_id, entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_protocol::control::PolicyDecision;
    use serde_json::json;

    fn entry(name: &str) -> Arc<ToolsListEntry> {
        let descriptor = json!({"name": name, "description": ""});
        let Some(map) = descriptor.as_object() else {
            unreachable!("an object literal")
        };
        Arc::new(ToolsListEntry::from_descriptor(map, PolicyDecision::Allow))
    }

    fn event(kind: &str, session_id: &str, data: serde_json::Value) -> EventNotification {
        serde_json::from_value(
            json!({"kind": kind, "sessionId": session_id, "alias": "pixel-8",
                                      "ts": 1, "seq": 0, "data": data}),
        )
        .unwrap_or_else(|e| panic!("{kind}: {e}"))
    }

    fn is_hit(c: &Cached) -> bool {
        matches!(c, Cached::Hit(_))
    }

    fn miss(c: Cached) -> Generation {
        match c {
            Cached::Miss(g) => g,
            Cached::Hit(e) => panic!("expected a miss, got {}", e.name()),
        }
    }

    #[test]
    fn an_entry_is_kept_until_its_session_changes() {
        let mut entries = Entries::default();
        let since = miss(entries.get("S1", "sum"));
        entries.store(since, "S1", entry("sum"));
        entries.store(since, "S2", entry("sum"));
        assert!(is_hit(&entries.get("S1", "sum")));
        assert!(!is_hit(&entries.get("S1", "other")), "only the stored name");
        // Kinds that change no entry keep it.
        entries.apply(&event("events_changed", "S1", json!({"eventCount": 2})));
        entries.apply(&event(
            "app_event",
            "S1",
            json!({"name": "x", "payload": null, "ts": 1}),
        ));
        assert!(is_hit(&entries.get("S1", "sum")));
        // Each invalidating kind drops the session's entries, and only that session's.
        for (kind, data) in [
            ("tools_changed", json!({"toolCount": 1})),
            ("session_suspended", json!({"reason": "app_backgrounded"})),
            ("session_resumed", json!({"replacedSocket": false})),
            ("session_revoked", json!({"previousState": "active"})),
            ("session_expired", json!({})),
        ] {
            assert!(is_hit(&entries.get("S1", "sum")), "{kind}: cached before");
            entries.apply(&event(kind, "S1", data));
            let since = miss(entries.get("S1", "sum"));
            assert!(
                is_hit(&entries.get("S2", "sum")),
                "{kind}: other sessions keep theirs"
            );
            entries.store(since, "S1", entry("sum"));
        }
    }

    #[test]
    fn an_entry_looked_up_across_an_invalidation_is_not_kept() {
        let mut entries = Entries::default();
        let since = miss(entries.get("S1", "sum"));
        // The lookup is in flight when the registry changes: its answer may predate it.
        entries.apply(&event("tools_changed", "S1", json!({"toolCount": 0})));
        entries.store(since, "S1", entry("sum"));
        let fresh = miss(entries.get("S1", "sum"));
        assert_ne!(fresh, since);
        entries.store(fresh, "S1", entry("sum"));
        assert!(is_hit(&entries.get("S1", "sum")));
    }
}
