//! Settled results (issue #19; §C8.43, §C10.10): the daemon keeps the outcome of each settled
//! `tools.call` in memory, for `tools.result {callId}`, within a window bounded in count
//! (`results.retainCount`) and bytes (`results.retainBytes`). An outcome's bytes are its compact
//! JSON plus [`PARSED_BYTES_PER_VALUE`] per JSON value in it (the parse rule of device.md
//! §D17.3), because it is kept parsed: a result of many tiny values (`[0,0,…]`, two bytes of
//! JSON each) takes tens of times its text in memory. The oldest outcome goes first; an outcome
//! larger than the byte bound alone is not kept. Nothing is written to disk: a daemon restart
//! forgets them all.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use appduct_protocol::control::{ToolsCallResult, ToolsResultResult};
use appduct_protocol::jsonrpc::ErrorObject;
use appduct_protocol::parts::PARSED_BYTES_PER_VALUE;
use serde::Serialize;
use tokio::sync::Notify;

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
        call_id: Arc<str>,
        outcome: Result<ToolsCallResult, ErrorObject>,
        settled_at_ms: u64,
    ) -> Arc<ToolsResultResult> {
        let result = Arc::new(ToolsResultResult::settled(
            call_id.to_string(),
            outcome,
            settled_at_ms,
        ));
        let key = call_id;
        let call_id = &*key;
        let bytes = retained_bytes(&*result);
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

    /// The kept outcome of `call_id`, if any: the kept copy itself, shared.
    pub fn get(&self, call_id: &str) -> Option<Arc<ToolsResultResult>> {
        self.store()
            .by_id
            .get(call_id)
            .map(|e| Arc::clone(&e.result))
    }

    /// Resolves on the next [`keep`](Self::keep) after it was enabled; see [`Notify`].
    pub fn settled(&self) -> tokio::sync::futures::Notified<'_> {
        self.settled.notified()
    }

    /// Outcomes kept and their bytes as counted by [`retained_bytes`] (tests, `Debug`).
    pub fn usage(&self) -> (usize, u64) {
        let store = self.store();
        (store.by_id.len(), store.bytes)
    }
}

/// What a kept outcome counts against `results.retainBytes` (§C10.10): the bytes of its compact
/// JSON plus [`PARSED_BYTES_PER_VALUE`] for each JSON value in it, counted as
/// `appduct_protocol::parts::count_values` counts a body (one for the top value, one per `[`,
/// `{` and `,` outside strings), while serialising into a counter, without building the text.
/// The kept outcome is a parsed value tree, so this bounds the memory it takes, not only its text.
pub fn retained_bytes<T: Serialize + ?Sized>(outcome: &T) -> u64 {
    #[derive(Default)]
    struct Counter {
        bytes: u64,
        values: u64,
        in_string: bool,
        escaped: bool,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.bytes += buf.len() as u64;
            for &b in buf {
                if self.in_string {
                    if self.escaped {
                        self.escaped = false;
                    } else if b == b'\\' {
                        self.escaped = true;
                    } else if b == b'"' {
                        self.in_string = false;
                    }
                } else {
                    match b {
                        b'"' => self.in_string = true,
                        b'[' | b'{' | b',' => self.values += 1,
                        _ => {}
                    }
                }
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter {
        values: 1,
        ..Counter::default()
    };
    match serde_json::to_writer(&mut counter, outcome) {
        Ok(()) => counter
            .bytes
            .saturating_add(counter.values.saturating_mul(PARSED_BYTES_PER_VALUE)),
        // Not serialisable: never kept (an outcome over any bound is dropped).
        Err(_) => u64::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_protocol::parts::count_values;
    use serde_json::json;

    #[test]
    fn retained_bytes_count_values_as_a_parsed_body_does() {
        for value in [
            json!(0),
            json!([0, 0, 0]),
            json!({"a": "x,[{", "b": [{"c": null}, "\"q\",", 1.5]}),
            json!({"result": vec![0; 1000]}),
        ] {
            let text = serde_json::to_vec(&value).unwrap_or_default();
            assert_eq!(
                retained_bytes(&value),
                text.len() as u64 + count_values(&text) * PARSED_BYTES_PER_VALUE,
                "{value}"
            );
        }
    }

    #[test]
    fn tiny_values_fill_the_byte_bound_by_their_parsed_size() {
        // 1,000 tiny values: ~2 KB of JSON, counted as ~130 KB; a 200 KB window keeps one.
        let results = Results::new(100, 200_000);
        let outcome = |n: u64| -> Result<ToolsCallResult, ErrorObject> {
            Ok(ToolsCallResult::new(
                json!(vec![n; 1000]),
                format!("c{n}"),
                "s".repeat(16),
                "a",
                1,
            ))
        };
        results.keep(Arc::from("c1"), outcome(1), 1);
        results.keep(Arc::from("c2"), outcome(2), 2);
        let (kept, bytes) = results.usage();
        assert_eq!(kept, 1, "{bytes}");
        assert!(bytes > 1000 * PARSED_BYTES_PER_VALUE, "{bytes}");
        assert!(results.get("c1").is_none());
        assert!(results.get("c2").is_some());
    }
}
