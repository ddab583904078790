//! Settled results (issue #19; §C8.43, §C10.10): the daemon keeps the outcome of each settled
//! `tools.call` in memory, for `tools.result {callId}`, within a window bounded in count
//! (`calls.retainResults`) and bytes (`calls.retainResultBytes`). The oldest outcome goes first;
//! an outcome larger than the byte bound alone is not kept. Nothing is written to disk: a daemon
//! restart forgets them all.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use appduct_protocol::control::{ToolsCallResult, ToolsResultResult};
use appduct_protocol::jsonrpc::ErrorObject;
use tokio::sync::Notify;

use crate::control_server::serialized_len;

struct Entry {
    result: Arc<ToolsResultResult>,
    bytes: u64,
    seq: u64,
}

#[derive(Default)]
struct Store {
    /// One shared copy of each callId serves as the key here and in `order` (issue #24).
    by_id: HashMap<Arc<str>, Entry>,
    /// `(callId, seq)` oldest first; an id replaced by a newer call leaves a stale pair behind,
    /// skipped on eviction by its `seq`.
    order: VecDeque<(Arc<str>, u64)>,
    bytes: u64,
    next_seq: u64,
}

/// The retention window of settled outcomes.
pub struct Results {
    store: Mutex<Store>,
    /// Wakes `tools.result` requests waiting for a call to settle.
    settled: Notify,
    max_count: usize,
    max_bytes: u64,
}

impl std::fmt::Debug for Results {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let store = self.store();
        f.debug_struct("Results")
            .field("kept", &store.by_id.len())
            .field("bytes", &store.bytes)
            .finish_non_exhaustive()
    }
}

impl Results {
    pub fn new(max_count: usize, max_bytes: u64) -> Self {
        Self {
            store: Mutex::new(Store::default()),
            settled: Notify::new(),
            max_count,
            max_bytes,
        }
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps a settled call's outcome (a newer call reusing the callId replaces it) and wakes
    /// the waiters. Returns the outcome, kept or not, for the caller's own response: the
    /// pipeline replies from it, so the body is never copied.
    pub fn keep(
        &self,
        call_id: String,
        outcome: Result<ToolsCallResult, ErrorObject>,
        settled_at_ms: u64,
    ) -> Arc<ToolsResultResult> {
        let result = Arc::new(ToolsResultResult::settled(call_id, outcome, settled_at_ms));
        let call_id = result.call_id.as_str();
        let bytes = serialized_len(&*result) as u64;
        {
            let mut store = self.store();
            if let Some(old) = store.by_id.remove(call_id) {
                store.bytes -= old.bytes;
            }
            if self.max_count > 0 && bytes <= self.max_bytes {
                while store.by_id.len() >= self.max_count || store.bytes + bytes > self.max_bytes {
                    let Some((id, seq)) = store.order.pop_front() else {
                        break;
                    };
                    if store.by_id.get(&*id).is_some_and(|e| e.seq == seq)
                        && let Some(e) = store.by_id.remove(&*id)
                    {
                        store.bytes -= e.bytes;
                    }
                }
                store.next_seq += 1;
                let seq = store.next_seq;
                let key: Arc<str> = Arc::from(call_id);
                store.order.push_back((Arc::clone(&key), seq));
                store.bytes += bytes;
                store.by_id.insert(
                    key,
                    Entry {
                        result: Arc::clone(&result),
                        bytes,
                        seq,
                    },
                );
            }
            // Stale pairs never outnumber the kept entries by much.
            if store.order.len() > 2 * store.by_id.len() + 64 {
                let Store { order, by_id, .. } = &mut *store;
                order.retain(|(id, seq)| by_id.get(&**id).is_some_and(|e| e.seq == *seq));
            }
        }
        self.settled.notify_waiters();
        result
    }

    /// The kept outcome of `call_id`, if any.
    pub fn get(&self, call_id: &str) -> Option<ToolsResultResult> {
        self.store()
            .by_id
            .get(call_id)
            .map(|e| ToolsResultResult::clone(&e.result))
    }

    /// Resolves on the next [`keep`](Self::keep) after it was enabled; see [`Notify`].
    pub fn settled(&self) -> tokio::sync::futures::Notified<'_> {
        self.settled.notified()
    }

    /// Outcomes kept and their bytes (tests, `Debug`).
    pub fn usage(&self) -> (usize, u64) {
        let store = self.store();
        (store.by_id.len(), store.bytes)
    }
}
