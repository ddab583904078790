//! MCP tasks on the 2025-11-25 revision (§M19): a task-augmented `tools/call` of
//! `appduct_call_tool`, then `tasks/get`, `tasks/result`, `tasks/cancel` and `tasks/list`.
//!
//! rmcp implements a later, incompatible tasks design (an extension declared in `extensions`),
//! and its typed messages drop the 2025-11-25 fields (`capabilities.tasks`, `params.task`,
//! `execution`). So tasks live in the stdio framing, on the JSON text, around rmcp:
//!
//! - The `initialize` answer gains `capabilities.tasks` when the revision is 2025-11-25, and
//!   `tools/list` then marks `appduct_call_tool` with `execution.taskSupport: "optional"`.
//! - A task-augmented `tools/call` is answered at once with the task; the request goes on to
//!   rmcp without `task`, under a request id of its own (`appduct-task:` + task id), so the
//!   ordinary handler runs it: consent, progress, heartbeats and the daemon call are the same
//!   code. The task id is the call's `callId` in the daemon (§C10.10).
//! - rmcp's answer to that request is kept here, never written, and `tasks/result` returns it.
//! - `tasks/cancel` hands rmcp a `notifications/cancelled` for the request, which cancels the
//!   daemon call like any MCP cancel (§M12).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use appduct_client::timestamp::format_iso_ms;
use rmcp::RoleServer;
use rmcp::model::{
    JsonRpcMessage, NumberOrString, ProtocolVersion, ServerNotification, ServerResult,
};
use rmcp::service::TxJsonRpcMessage;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use crate::builtins::call_tool;

/// Request ids of the task requests handed to rmcp: this prefix and the task id. A client's
/// own request id with this prefix is refused (`-32600`).
pub const TASK_REQUEST_PREFIX: &str = "appduct-task:";
/// Request ids of the `appduct_call_result` requests the bridge hands rmcp to fetch an
/// evicted task's outcome again: this prefix and a counter (under the reserved prefix).
const FETCH_REQUEST_PREFIX: &str = "appduct-task:fetch:";
/// Most tasks kept at once; expired settled ones are dropped first.
pub const MAX_TASKS: usize = 256;
/// `ttl` of a task whose request names none (15 min).
pub const DEFAULT_TTL_MS: u64 = 15 * 60 * 1000;
/// Longest `ttl` granted (1 h); a longer request gets this.
pub const MAX_TTL_MS: u64 = 60 * 60 * 1000;
/// `pollInterval` suggested to clients.
pub const POLL_INTERVAL_MS: u64 = 500;
/// `_meta` key that ties a result to its task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// A settled task's outcome is kept at least this long after it settles (10 min), whatever
/// the ttl asked: the ttl reported from then on grows to cover it (§M19.1).
pub const KEEP_AFTER_SETTLE_MS: u64 = 10 * 60 * 1000;
/// Bytes of settled outcomes (their JSON text) kept at once (64 MiB); past it the oldest
/// settled outcomes are dropped, and `tasks/result` of such a task fetches it again from the
/// daemon's kept results (§M19.1).
pub const MAX_OUTCOME_BYTES: usize = 64 * 1024 * 1024;

const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// A task's state (the revision's `TaskStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Working,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        self != Self::Working
    }
}

struct Entry {
    /// Creation order (`tasks/list` is oldest first; instants can tie).
    seq: u64,
    status: Status,
    message: Option<String>,
    created_ms: u64,
    updated_ms: u64,
    ttl_ms: u64,
    /// The underlying request's outcome, until evicted by [`MAX_OUTCOME_BYTES`].
    outcome: Option<Arc<Outcome>>,
    /// When this entry settled, in settle order (eviction goes oldest first).
    settled_seq: u64,
    /// The outcome, sent once when the task settles: a waiting `tasks/result` gets it even if
    /// the entry is evicted or expires before it runs.
    settled: watch::Sender<Settled>,
}

/// What a waiting `tasks/result` waits for.
#[derive(Debug, Clone)]
enum Settled {
    No,
    Yes(Arc<Outcome>),
    /// Settled, and its outcome dropped for [`MAX_OUTCOME_BYTES`]: fetched again.
    Evicted,
}

/// A settled task's answer: the JSON text of the underlying request's `result` (with the
/// related-task `_meta`) or `error` member, shared by every `tasks/result` (no copy of the
/// parsed value per request).
#[derive(Debug)]
pub struct Outcome {
    key: &'static str,
    json: String,
}

impl Outcome {
    /// The JSON-RPC answer to request `id` carrying this outcome.
    fn line(&self, id: &Value) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"{key}":{json}}}"#,
            key = self.key,
            json = self.json
        )
    }
}

/// The entries of one connection and the bytes of the outcomes they hold.
#[derive(Default)]
struct Store {
    map: HashMap<String, Entry>,
    bytes: usize,
    settles: u64,
    /// The progress token of each working task's request (its JSON text) → task id: the
    /// progress and heartbeats sent to it carry the related-task `_meta` (§M19.2).
    tokens: HashMap<String, String>,
}

impl std::ops::Deref for Store {
    type Target = HashMap<String, Entry>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl std::ops::DerefMut for Store {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

impl Store {
    /// Drops expired settled entries, with their bytes.
    fn retain_unexpired(&mut self, now: u64) {
        let mut freed = 0;
        self.map.retain(|_, e| {
            let keep = !e.expired(now);
            if !keep {
                freed += e.outcome.as_ref().map_or(0, |o| o.json.len());
            }
            keep
        });
        self.bytes -= freed;
    }

    /// Drops the oldest settled outcomes until the bytes fit [`MAX_OUTCOME_BYTES`].
    fn evict(&mut self, max: usize) {
        while self.bytes > max {
            let Some(oldest) = self
                .map
                .values_mut()
                .filter(|e| e.outcome.is_some())
                .min_by_key(|e| e.settled_seq)
            else {
                break;
            };
            if let Some(o) = oldest.outcome.take() {
                self.bytes -= o.json.len();
            }
            oldest.settled.send_replace(Settled::Evicted);
        }
    }
}

impl Entry {
    fn to_json(&self, id: &str) -> Value {
        let mut task = json!({
            "taskId": id,
            "status": self.status.as_str(),
            "createdAt": format_iso_ms(self.created_ms),
            "lastUpdatedAt": format_iso_ms(self.updated_ms),
            "ttl": self.ttl_ms,
            "pollInterval": POLL_INTERVAL_MS,
        });
        if let Some(m) = &self.message {
            task["statusMessage"] = Value::String(m.clone());
        }
        task
    }

    /// A working task never expires; a settled one at `createdAt + ttl`, where settling made
    /// the ttl reach at least [`KEEP_AFTER_SETTLE_MS`] past the settle (review19 M1).
    fn expired(&self, now_ms: u64) -> bool {
        self.status.is_terminal() && now_ms >= self.created_ms.saturating_add(self.ttl_ms)
    }

    fn settle(&mut self, status: Status, message: Option<String>, outcome: Arc<Outcome>) {
        self.status = status;
        self.message = message;
        self.updated_ms = now_ms();
        self.ttl_ms = self.ttl_ms.max(
            self.updated_ms
                .saturating_sub(self.created_ms)
                .saturating_add(KEEP_AFTER_SETTLE_MS),
        );
        self.outcome = Some(Arc::clone(&outcome));
        self.settled.send_replace(Settled::Yes(outcome));
    }
}

fn lock_fetches(
    fetches: &Mutex<HashMap<u64, (Value, String)>>,
) -> MutexGuard<'_, HashMap<u64, (Value, String)>> {
    fetches.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What the framing does with one input line.
pub enum Action {
    /// Answer the client with this line; rmcp never sees the request.
    Reply(String),
    /// Answer with this line first, then hand `forward` to rmcp (a task was created).
    ReplyThenForward { reply: String, forward: Vec<u8> },
    /// Answer with the line this future yields (`tasks/result` of a running task); `None`:
    /// the answer comes through rmcp instead (an evicted outcome fetched again).
    Later(Pin<Box<dyn Future<Output = Option<String>> + Send>>),
    /// Nothing reaches rmcp and nothing is answered (a notification the bridge handled).
    Consumed,
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Reply(_) => "Reply",
            Self::ReplyThenForward { .. } => "ReplyThenForward",
            Self::Later(_) => "Later",
            Self::Consumed => "Consumed",
        })
    }
}

/// The tasks of one MCP connection.
#[derive(Default)]
pub struct Tasks {
    /// The revision is 2025-11-25: tasks are offered.
    enabled: AtomicBool,
    /// Tasks created so far.
    created: AtomicU64,
    entries: Mutex<Store>,
    /// Lines handed to rmcp as if the client had sent them (`notifications/cancelled`, the
    /// fetch of an evicted outcome).
    inject: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    /// Fetches of evicted outcomes in flight: counter → (the client's request id, task id).
    fetches: Mutex<HashMap<u64, (Value, String)>>,
    next_fetch: AtomicU64,
    /// [`MAX_OUTCOME_BYTES`] unless a test sets a smaller budget.
    outcome_budget: Option<usize>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("enabled", &self.enabled.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn reply_line(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

fn error_line(id: &Value, code: i64, message: String, data: Option<Value>) -> String {
    let mut error = json!({"code": code, "message": message});
    if let Some(d) = data {
        error["data"] = d;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

impl Tasks {
    fn lock(&self) -> MutexGuard<'_, Store> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The same with a budget of `bytes` for settled outcomes in place of [`MAX_OUTCOME_BYTES`].
    pub fn with_outcome_budget(mut self, bytes: usize) -> Self {
        self.outcome_budget = Some(bytes);
        self
    }

    /// Whether tasks were negotiated (the 2025-11-25 revision).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The channel of lines the framing reads besides its input.
    pub fn injected(&self) -> mpsc::UnboundedReceiver<Vec<u8>> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.inject.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        rx
    }

    /// The task id (and callId) of rmcp's request `id`, when it is a task's request.
    pub fn call_id_of(&self, id: &NumberOrString) -> Option<String> {
        let NumberOrString::String(s) = id else {
            return None;
        };
        let task = s.strip_prefix(TASK_REQUEST_PREFIX)?;
        self.lock().contains_key(task).then(|| task.to_owned())
    }

    /// Looks at one input line; `None` passes it on unchanged.
    pub fn intercept(self: &Arc<Self>, line: &[u8]) -> Option<Action> {
        // Cheap test first: most lines name no task.
        if !self.enabled() || !(contains(line, b"\"task") || contains(line, b"appduct-task:")) {
            return None;
        }
        let mut message: Map<String, Value> = serde_json::from_slice(line).ok()?;
        let method = message.get("method")?.as_str()?.to_owned();
        // A client's `notifications/cancelled` naming a task's reserved request id would make
        // rmcp drop the handler's answer and leave the task working for ever: it cancels the
        // task instead, as `tasks/cancel` does (the notification expects no answer).
        if method == "notifications/cancelled" {
            let task = message
                .get("params")
                .and_then(|p| p.get("requestId"))
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(TASK_REQUEST_PREFIX))?
                .to_owned();
            let _ = self.cancel(&Value::Null, Some(task));
            return Some(Action::Consumed);
        }
        let id = message
            .get("id")
            .filter(|i| i.is_string() || i.is_number())?
            .clone();
        if id
            .as_str()
            .is_some_and(|s| s.starts_with(TASK_REQUEST_PREFIX))
        {
            return Some(Action::Reply(error_line(
                &id,
                INVALID_REQUEST,
                format!("request ids starting with {TASK_REQUEST_PREFIX:?} are reserved"),
                None,
            )));
        }
        let params = message.get_mut("params").and_then(Value::as_object_mut);
        let task_id = |p: Option<&mut Map<String, Value>>| {
            p.and_then(|p| p.get("taskId"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match method.as_str() {
            "tools/call" => {
                let params = params?;
                let task = params.remove("task")?;
                Some(self.create(&id, &mut message, task))
            }
            "tasks/get" => Some(Action::Reply(self.get(&id, task_id(params)))),
            "tasks/cancel" => Some(Action::Reply(self.cancel(&id, task_id(params)))),
            "tasks/result" => Some(self.result(&id, task_id(params))),
            "tasks/list" => Some(Action::Reply(self.list(&id, params))),
            _ => None,
        }
    }

    fn unknown(id: &Value, task: Option<&str>) -> String {
        match task {
            None => error_line(
                id,
                INVALID_PARAMS,
                "params.taskId (a string) is required".into(),
                None,
            ),
            Some(t) => error_line(
                id,
                INVALID_PARAMS,
                format!("unknown task {t:?}: it never existed here or its ttl passed"),
                Some(json!({"taskId": t})),
            ),
        }
    }

    /// A task-augmented `tools/call`: create the task, answer with it, run the request.
    fn create(&self, id: &Value, message: &mut Map<String, Value>, task: Value) -> Action {
        let name = message
            .get("params")
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if name != call_tool::NAME {
            return Action::Reply(error_line(
                id,
                METHOD_NOT_FOUND,
                format!(
                    "{name:?} does not run as a task (its execution.taskSupport is forbidden); only {} does",
                    call_tool::NAME
                ),
                None,
            ));
        }
        let Some(task) = task.as_object() else {
            return Action::Reply(error_line(
                id,
                INVALID_PARAMS,
                "params.task must be an object".into(),
                None,
            ));
        };
        let ttl_ms = match task.get("ttl") {
            None | Some(Value::Null) => DEFAULT_TTL_MS,
            Some(v) => match v.as_u64() {
                Some(t) => t.clamp(1, MAX_TTL_MS),
                None => {
                    return Action::Reply(error_line(
                        id,
                        INVALID_PARAMS,
                        "params.task.ttl must be a non-negative integer (milliseconds)".into(),
                        None,
                    ));
                }
            },
        };
        let task_id = match call_tool::new_call_id() {
            Ok(t) => t,
            Err(f) => return Action::Reply(error_line(id, -32603, f.message, None)),
        };
        let now = now_ms();
        let entry = Entry {
            seq: self.created.fetch_add(1, Ordering::Relaxed),
            status: Status::Working,
            message: None,
            created_ms: now,
            updated_ms: now,
            ttl_ms,
            outcome: None,
            settled_seq: 0,
            settled: watch::channel(Settled::No).0,
        };
        let token = message
            .get("params")
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .map(Value::to_string);
        let created = {
            let mut entries = self.lock();
            entries.retain_unexpired(now);
            if entries.len() >= MAX_TASKS {
                None
            } else {
                let json = entry.to_json(&task_id);
                entries.insert(task_id.clone(), entry);
                if let Some(token) = token {
                    entries.tokens.insert(token, task_id.clone());
                }
                Some(json)
            }
        };
        let Some(created) = created else {
            return Action::Reply(error_line(
                id,
                INVALID_REQUEST,
                format!(
                    "too many tasks: at most {MAX_TASKS} are kept; wait for some to finish or call without a task"
                ),
                None,
            ));
        };
        message.insert(
            "id".into(),
            Value::String(format!("{TASK_REQUEST_PREFIX}{task_id}")),
        );
        let forward = serde_json::to_vec(&message).unwrap_or_default();
        Action::ReplyThenForward {
            reply: reply_line(id, json!({"task": created})),
            forward,
        }
    }

    fn get(&self, id: &Value, task: Option<String>) -> String {
        let now = now_ms();
        let entries = self.lock();
        match task
            .as_deref()
            .and_then(|t| entries.get(t).filter(|e| !e.expired(now)).map(|e| (t, e)))
        {
            Some((t, e)) => reply_line(id, e.to_json(t)),
            None => Self::unknown(id, task.as_deref()),
        }
    }

    fn list(&self, id: &Value, params: Option<&mut Map<String, Value>>) -> String {
        if let Some(c) = params
            .and_then(|p| p.get("cursor"))
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
        {
            return error_line(
                id,
                INVALID_PARAMS,
                format!("unknown cursor {c:?}: this list has one page"),
                None,
            );
        }
        let now = now_ms();
        let mut entries = self.lock();
        entries.retain_unexpired(now);
        let mut tasks: Vec<(&String, &Entry)> = entries.iter().collect();
        tasks.sort_by_key(|(_, e)| e.seq);
        let tasks: Vec<Value> = tasks.into_iter().map(|(t, e)| e.to_json(t)).collect();
        reply_line(id, json!({"tasks": tasks}))
    }

    fn cancel(&self, id: &Value, task: Option<String>) -> String {
        let line = {
            let mut entries = self.lock();
            let Some((t, e)) = task
                .as_deref()
                .and_then(|t| entries.get_mut(t).map(|e| (t, e)))
            else {
                return Self::unknown(id, task.as_deref());
            };
            if e.status.is_terminal() {
                return error_line(
                    id,
                    INVALID_PARAMS,
                    format!(
                        "task {t:?} is already {}; only a working task can be cancelled",
                        e.status.as_str()
                    ),
                    Some(json!({"taskId": t, "status": e.status.as_str()})),
                );
            }
            let error = json!({
                "code": INVALID_REQUEST,
                "message": format!("task {t:?} was cancelled before it finished"),
                "data": {"taskId": t, "status": "cancelled"},
            });
            let line = reply_line(id, e.to_json(t));
            let t = t.to_owned();
            Self::settle_in(
                &mut entries,
                &t,
                Status::Cancelled,
                Some("cancelled by the client".into()),
                "error",
                error,
            );
            entries.evict(self.outcome_budget.unwrap_or(MAX_OUTCOME_BYTES));
            entries
                .get(&t)
                .map_or(line, |e| reply_line(id, e.to_json(&t)))
        };
        // rmcp cancels the handler, which cancels the daemon call (§M12).
        if let Some(task) = task {
            let notification = json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": format!("{TASK_REQUEST_PREFIX}{task}"), "reason": "tasks/cancel"},
            });
            if let Some(tx) = self
                .inject
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            {
                let _ = tx.send(notification.to_string().into_bytes());
            }
        }
        line
    }

    fn result(self: &Arc<Self>, id: &Value, task: Option<String>) -> Action {
        let mut settled = {
            let entries = self.lock();
            let now = now_ms();
            match task
                .as_deref()
                .and_then(|t| entries.get(t))
                .filter(|e| !e.expired(now))
            {
                Some(e) => match &e.outcome {
                    Some(outcome) => return Action::Reply(outcome.line(id)),
                    None if e.status.is_terminal() => {
                        return self.fetch_again(id, task.unwrap_or_default());
                    }
                    None => e.settled.subscribe(),
                },
                None => return Action::Reply(Self::unknown(id, task.as_deref())),
            }
        };
        let id = id.clone();
        let task = task.unwrap_or_default();
        let tasks = Arc::clone(self);
        Action::Later(Box::pin(async move {
            // The outcome comes with the wake-up, so the waiter is served even if the entry
            // has gone meanwhile; one evicted first is fetched again from the daemon.
            let outcome = settled
                .wait_for(|s| !matches!(s, Settled::No))
                .await
                .map(|s| s.clone());
            match outcome {
                Ok(Settled::Yes(outcome)) => Some(outcome.line(&id)),
                Ok(Settled::Evicted) => {
                    let _ = tasks.fetch_again(&id, task);
                    None
                }
                _ => Some(Self::unknown(&id, Some(&task))),
            }
        }))
    }

    /// `tasks/result` of a task whose outcome was evicted: rmcp gets an `appduct_call_result`
    /// call for the task's callId (the daemon's kept results, §C10.10), under a reserved id;
    /// [`Self::outgoing`] gives its answer the client's id and the related-task `_meta`.
    fn fetch_again(&self, id: &Value, task: String) -> Action {
        let n = self.next_fetch.fetch_add(1, Ordering::Relaxed);
        let request = json!({
            "jsonrpc": "2.0",
            "id": format!("{FETCH_REQUEST_PREFIX}{n}"),
            "method": "tools/call",
            "params": {"name": crate::builtins::call_result::NAME,
                       "arguments": {"callId": task}},
        });
        let inject = self.inject.lock().unwrap_or_else(|e| e.into_inner());
        match inject.as_ref() {
            Some(tx) => {
                lock_fetches(&self.fetches).insert(n, (id.clone(), task));
                let _ = tx.send(request.to_string().into_bytes());
                Action::Consumed
            }
            None => Action::Reply(Self::unknown(id, Some(&task))),
        }
    }

    /// Looks at one outgoing message: `None` drops it (a task request's answer, kept here);
    /// otherwise the line to write.
    pub fn outgoing(
        &self,
        item: &TxJsonRpcMessage<RoleServer>,
    ) -> Option<serde_json::Result<String>> {
        match item {
            JsonRpcMessage::Response(r) => {
                if let Some((id, task)) = self.fetch_of(&r.id) {
                    let mut result = match serde_json::to_value(&r.result) {
                        Ok(v) => v,
                        Err(e) => return Some(Err(e)),
                    };
                    if let Some(r) = result.as_object_mut() {
                        let meta = r.entry("_meta").or_insert_with(|| json!({}));
                        if let Some(meta) = meta.as_object_mut() {
                            meta.insert(RELATED_TASK.into(), json!({"taskId": task}));
                        }
                    }
                    return Some(Ok(reply_line(&id, result)));
                }
                if let Some(task) = self.task_of(&r.id) {
                    let result = match serde_json::to_value(&r.result) {
                        Ok(v) => v,
                        Err(e) => return Some(Err(e)),
                    };
                    let failed = result.get("isError").and_then(Value::as_bool) == Some(true);
                    let message = failed.then(|| first_text(&result)).flatten();
                    let status = if failed {
                        Status::Failed
                    } else {
                        Status::Completed
                    };
                    self.settle(&task, status, message, "result", result);
                    return None;
                }
                match &r.result {
                    ServerResult::InitializeResult(init)
                        if init.protocol_version == ProtocolVersion::V_2025_11_25 =>
                    {
                        self.enabled.store(true, Ordering::Relaxed);
                        Some(patched(item, |v| {
                            v["result"]["capabilities"]["tasks"] = json!({
                                "list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}
                            });
                        }))
                    }
                    ServerResult::ListToolsResult(_) if self.enabled() => {
                        Some(patched(item, |v| {
                            if let Some(tools) = v["result"]["tools"].as_array_mut() {
                                for t in tools {
                                    if t["name"] == call_tool::NAME {
                                        t["execution"] = json!({"taskSupport": "optional"});
                                    }
                                }
                            }
                        }))
                    }
                    _ => Some(crate::framing::encode(item)),
                }
            }
            JsonRpcMessage::Notification(n) => {
                // Progress and heartbeats of a task's request name the task (§M19.2).
                if let ServerNotification::ProgressNotification(p) = &n.notification
                    && self.enabled()
                {
                    let token = serde_json::to_string(&p.params.progress_token).ok();
                    let task = token.and_then(|t| self.lock().tokens.get(&t).cloned());
                    if let Some(task) = task {
                        return Some(patched(item, |v| {
                            v["params"]["_meta"][RELATED_TASK] = json!({"taskId": task});
                        }));
                    }
                }
                Some(crate::framing::encode(item))
            }
            JsonRpcMessage::Error(e) => {
                if let Some((id, _)) = e.id.as_ref().and_then(|id| self.fetch_of(id)) {
                    let error = match serde_json::to_value(&e.error) {
                        Ok(v) => v,
                        Err(e) => return Some(Err(e)),
                    };
                    return Some(Ok(
                        json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string()
                    ));
                }
                if let Some(task) = e.id.as_ref().and_then(|id| self.task_of(id)) {
                    let error = match serde_json::to_value(&e.error) {
                        Ok(v) => v,
                        Err(e) => return Some(Err(e)),
                    };
                    let message = Some(e.error.message.to_string());
                    self.settle(&task, Status::Failed, message, "error", error);
                    return None;
                }
                Some(crate::framing::encode(item))
            }
            _ => Some(crate::framing::encode(item)),
        }
    }

    /// The task of rmcp's request `id`: a reserved id, while tasks are on (only then are
    /// client ids with the prefix refused, so only then is such an id the bridge's own; a
    /// 2025-06-18 client's `"appduct-task:1"` is answered as any id: review19 L1). A reserved
    /// id whose task has gone (a cancelled task's late answer) is still swallowed.
    fn task_of(&self, id: &NumberOrString) -> Option<String> {
        match id {
            NumberOrString::String(s) if self.enabled() => {
                s.strip_prefix(TASK_REQUEST_PREFIX).map(str::to_owned)
            }
            _ => None,
        }
    }

    /// The client's request id and the task of a fetch of an evicted outcome, once.
    fn fetch_of(&self, id: &NumberOrString) -> Option<(Value, String)> {
        let NumberOrString::String(s) = id else {
            return None;
        };
        let n = s.strip_prefix(FETCH_REQUEST_PREFIX)?.parse().ok()?;
        lock_fetches(&self.fetches).remove(&n)
    }

    fn settle(
        &self,
        task: &str,
        status: Status,
        message: Option<String>,
        key: &'static str,
        value: Value,
    ) {
        let mut store = self.lock();
        Self::settle_in(&mut store, task, status, message, key, value);
        store.evict(self.outcome_budget.unwrap_or(MAX_OUTCOME_BYTES));
    }

    /// Settles a working task (a cancelled task keeps its state; rmcp normally drops the late
    /// answer anyway): its outcome becomes JSON text once, a `result` with the related-task
    /// `_meta`. The caller then evicts to the byte budget.
    fn settle_in(
        store: &mut Store,
        task: &str,
        status: Status,
        message: Option<String>,
        key: &'static str,
        mut value: Value,
    ) {
        store.settles += 1;
        let seq = store.settles;
        store.tokens.retain(|_, t| t != task);
        let Some(e) = store.map.get_mut(task).filter(|e| !e.status.is_terminal()) else {
            return;
        };
        if key == "result"
            && let Some(r) = value.as_object_mut()
        {
            let meta = r.entry("_meta").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert(RELATED_TASK.into(), json!({"taskId": task}));
            }
        }
        let outcome = Arc::new(Outcome {
            key,
            json: value.to_string(),
        });
        let bytes = outcome.json.len();
        e.settled_seq = seq;
        e.settle(status, message, outcome);
        store.bytes += bytes;
    }
}

/// The first text block of a tool result, for a failed task's `statusMessage`.
fn first_text(result: &Value) -> Option<String> {
    result["content"]
        .as_array()?
        .iter()
        .find_map(|c| c["text"].as_str())
        .map(|t| t.chars().take(1024).collect())
}

fn patched(
    item: &TxJsonRpcMessage<RoleServer>,
    patch: impl FnOnce(&mut Value),
) -> serde_json::Result<String> {
    let mut value = serde_json::to_value(item)?;
    patch(&mut value);
    serde_json::to_string(&value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{
        CallToolResult, ContentBlock, ErrorData, InitializeResult, ServerCapabilities,
    };

    fn enabled() -> Arc<Tasks> {
        let tasks = Arc::new(Tasks::default());
        let init = InitializeResult::new(ServerCapabilities::default())
            .with_protocol_version(ProtocolVersion::V_2025_11_25);
        let item = JsonRpcMessage::response(
            ServerResult::InitializeResult(init),
            NumberOrString::Number(1),
        );
        let line: Value = serde_json::from_str(&tasks.outgoing(&item).unwrap().unwrap()).unwrap();
        assert_eq!(
            line["result"]["capabilities"]["tasks"]["requests"],
            json!({"tools": {"call": {}}})
        );
        assert!(tasks.enabled());
        tasks
    }

    fn reply(action: Option<Action>) -> Value {
        match action {
            Some(Action::Reply(l)) => serde_json::from_str(&l).unwrap(),
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    fn create(tasks: &Arc<Tasks>, id: i64) -> (String, Value) {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "appduct_call_tool", "arguments": {"name": "slow"}, "task": {"ttl": 5000},
            "_meta": {"progressToken": 9}}});
        match tasks.intercept(line.to_string().as_bytes()) {
            Some(Action::ReplyThenForward { reply, forward }) => {
                let reply: Value = serde_json::from_str(&reply).unwrap();
                let forward: Value = serde_json::from_slice(&forward).unwrap();
                let task = reply["result"]["task"]["taskId"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert_eq!(reply["id"], id);
                assert_eq!(reply["result"]["task"]["status"], "working");
                assert_eq!(reply["result"]["task"]["ttl"], 5000);
                assert_eq!(forward["id"], format!("{TASK_REQUEST_PREFIX}{task}"));
                assert!(forward["params"].get("task").is_none(), "{forward}");
                assert_eq!(forward["params"]["_meta"]["progressToken"], 9);
                (task, forward)
            }
            other => panic!("expected a task, got {other:?}"),
        }
    }

    fn request(method: &str, id: i64, task: &str) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"taskId": task}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn nothing_is_touched_before_2025_11_25_is_negotiated() {
        let tasks = Arc::new(Tasks::default());
        let line = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"appduct_call_tool","task":{}}}"#;
        assert!(tasks.intercept(line).is_none());
        let init = InitializeResult::new(ServerCapabilities::default())
            .with_protocol_version(ProtocolVersion::V_2025_06_18);
        let item = JsonRpcMessage::response(
            ServerResult::InitializeResult(init),
            NumberOrString::Number(1),
        );
        let line: Value = serde_json::from_str(&tasks.outgoing(&item).unwrap().unwrap()).unwrap();
        assert!(line["result"]["capabilities"].get("tasks").is_none());
        assert!(!tasks.enabled());
    }

    #[tokio::test]
    async fn a_task_runs_settles_and_answers_its_result() {
        let tasks = enabled();
        let (task, _) = create(&tasks, 7);
        assert_eq!(
            tasks.call_id_of(&NumberOrString::String(
                format!("{TASK_REQUEST_PREFIX}{task}").into()
            )),
            Some(task.clone())
        );
        let got = reply(tasks.intercept(&request("tasks/get", 8, &task)));
        assert_eq!(got["result"]["status"], "working");
        let Some(Action::Later(result)) = tasks.intercept(&request("tasks/result", 9, &task))
        else {
            panic!("tasks/result of a working task waits");
        };
        let waiting = tokio::spawn(result);
        // rmcp's answer to the task request is kept, not written.
        let answer = CallToolResult::success(vec![ContentBlock::text("done")]);
        let item = JsonRpcMessage::response(
            ServerResult::CallToolResult(answer),
            NumberOrString::String(format!("{TASK_REQUEST_PREFIX}{task}").into()),
        );
        assert!(tasks.outgoing(&item).is_none());
        let line: Value = serde_json::from_str(&waiting.await.unwrap().unwrap()).unwrap();
        assert_eq!(line["id"], 9);
        assert_eq!(line["result"]["content"][0]["text"], "done");
        assert_eq!(
            line["result"]["_meta"][RELATED_TASK]["taskId"],
            task.as_str()
        );
        let got = reply(tasks.intercept(&request("tasks/get", 10, &task)));
        assert_eq!(got["result"]["status"], "completed");
        // Settled: a cancel is refused.
        let refused = reply(tasks.intercept(&request("tasks/cancel", 11, &task)));
        assert_eq!(refused["error"]["code"], INVALID_PARAMS);
    }

    #[tokio::test]
    async fn an_error_fails_the_task_and_cancel_reaches_rmcp() {
        let tasks = enabled();
        let mut injected = tasks.injected();
        let (failing, _) = create(&tasks, 1);
        let item = JsonRpcMessage::error(
            ErrorData::internal_error("boom", None),
            Some(NumberOrString::String(
                format!("{TASK_REQUEST_PREFIX}{failing}").into(),
            )),
        );
        assert!(tasks.outgoing(&item).is_none());
        let got = reply(tasks.intercept(&request("tasks/get", 2, &failing)));
        assert_eq!(got["result"]["status"], "failed");
        assert_eq!(got["result"]["statusMessage"], "boom");

        let (cancelled, _) = create(&tasks, 3);
        let answer = reply(tasks.intercept(&request("tasks/cancel", 4, &cancelled)));
        assert_eq!(answer["result"]["status"], "cancelled");
        let note: Value = serde_json::from_slice(&injected.recv().await.unwrap()).unwrap();
        assert_eq!(note["method"], "notifications/cancelled");
        assert_eq!(
            note["params"]["requestId"],
            format!("{TASK_REQUEST_PREFIX}{cancelled}")
        );
        // Settled: answered at once from the kept outcome.
        let line = reply(tasks.intercept(&request("tasks/result", 5, &cancelled)));
        assert_eq!(line["error"]["code"], INVALID_REQUEST);
        // A client cancelling the reserved request id cancels the task itself, and rmcp sees
        // the bridge's own notification only.
        let (by_note, _) = create(&tasks, 7);
        let cancel_note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": format!("{TASK_REQUEST_PREFIX}{by_note}")}});
        assert!(matches!(
            tasks.intercept(cancel_note.to_string().as_bytes()),
            Some(Action::Consumed)
        ));
        let note: Value = serde_json::from_slice(&injected.recv().await.unwrap()).unwrap();
        assert_eq!(
            note["params"]["requestId"],
            format!("{TASK_REQUEST_PREFIX}{by_note}")
        );
        let got = reply(tasks.intercept(&request("tasks/get", 8, &by_note)));
        assert_eq!(got["result"]["status"], "cancelled");
        let list = reply(
            tasks.intercept(br#"{"jsonrpc":"2.0","id":6,"method":"tasks/list","params":{}}"#),
        );
        let statuses: Vec<&Value> = list["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| &t["status"])
            .collect();
        assert_eq!(
            statuses,
            [&json!("failed"), &json!("cancelled"), &json!("cancelled")]
        );
    }

    #[test]
    fn refusals() {
        let tasks = enabled();
        let other = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"appduct_status","task":{}}}"#;
        assert_eq!(
            reply(tasks.intercept(other))["error"]["code"],
            METHOD_NOT_FOUND
        );
        let bad_ttl = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"appduct_call_tool","task":{"ttl":"x"}}}"#;
        assert_eq!(
            reply(tasks.intercept(bad_ttl))["error"]["code"],
            INVALID_PARAMS
        );
        let reserved = br#"{"jsonrpc":"2.0","id":"appduct-task:x","method":"tools/list"}"#;
        assert_eq!(
            reply(tasks.intercept(reserved))["error"]["code"],
            INVALID_REQUEST
        );
        assert_eq!(
            reply(tasks.intercept(&request("tasks/get", 3, "nope")))["error"]["code"],
            INVALID_PARAMS
        );
        // A call without `task` passes untouched.
        let plain = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"appduct_call_tool","arguments":{"name":"task"}}}"#;
        assert!(tasks.intercept(plain).is_none());
        // The ttl is capped.
        let long = br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"appduct_call_tool","task":{"ttl":99999999999}}}"#;
        let Some(Action::ReplyThenForward { reply, .. }) = tasks.intercept(long) else {
            panic!("a task");
        };
        let reply: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(reply["result"]["task"]["ttl"], MAX_TTL_MS);
    }

    fn answer(tasks: &Tasks, task: &str, text: &str) {
        let item = JsonRpcMessage::response(
            ServerResult::CallToolResult(CallToolResult::success(vec![ContentBlock::text(text)])),
            NumberOrString::String(format!("{TASK_REQUEST_PREFIX}{task}").into()),
        );
        assert!(tasks.outgoing(&item).is_none());
    }

    /// Review19 M1: a call that outlives its task's ttl keeps its outcome for
    /// KEEP_AFTER_SETTLE_MS after it settles, and the ttl reported grows to say so.
    #[test]
    fn a_settled_outcome_is_kept_past_a_short_ttl() {
        let tasks = enabled();
        let (task, _) = create(&tasks, 1);
        // The call ran two hours on a 5 s ttl.
        let two_hours = 2 * 60 * 60 * 1000;
        if let Some(e) = tasks.lock().get_mut(&task) {
            e.created_ms -= two_hours;
        }
        answer(&tasks, &task, "late");
        let got = reply(tasks.intercept(&request("tasks/get", 2, &task)));
        assert_eq!(got["result"]["status"], "completed", "{got}");
        let ttl = got["result"]["ttl"].as_u64().unwrap();
        assert!(ttl >= two_hours + KEEP_AFTER_SETTLE_MS, "{ttl}");
        let line = reply(tasks.intercept(&request("tasks/result", 3, &task)));
        assert_eq!(line["result"]["content"][0]["text"], "late");
        // A create (which drops expired tasks) keeps it too.
        create(&tasks, 4);
        let listed = reply(
            tasks.intercept(br#"{"jsonrpc":"2.0","id":5,"method":"tasks/list","params":{}}"#),
        );
        assert_eq!(listed["result"]["tasks"][0]["taskId"], task.as_str());
    }

    /// Review19 M1: a waiting tasks/result gets the outcome with its wake-up, even when the
    /// entry is gone by the time it runs.
    #[tokio::test]
    async fn a_waiting_result_is_served_after_its_entry_is_gone() {
        let tasks = enabled();
        let (task, _) = create(&tasks, 1);
        let Some(Action::Later(waiting)) = tasks.intercept(&request("tasks/result", 2, &task))
        else {
            panic!("tasks/result of a working task waits");
        };
        answer(&tasks, &task, "done");
        tasks.lock().map.remove(&task);
        let line: Value = serde_json::from_str(&waiting.await.unwrap()).unwrap();
        assert_eq!(line["id"], 2);
        assert_eq!(line["result"]["content"][0]["text"], "done");
        assert_eq!(
            line["result"]["_meta"][RELATED_TASK]["taskId"],
            task.as_str()
        );
    }

    /// Review19 M6: settled outcomes past the byte budget go oldest first; tasks/result of an
    /// evicted one asks rmcp for appduct_call_result of the task's callId, and its answer goes
    /// to the client under the client's id with the related-task `_meta`.
    #[tokio::test]
    async fn outcomes_past_the_byte_budget_are_fetched_again() {
        let tasks = Arc::new(Tasks::default().with_outcome_budget(300));
        let init = InitializeResult::new(ServerCapabilities::default())
            .with_protocol_version(ProtocolVersion::V_2025_11_25);
        let _ = tasks.outgoing(&JsonRpcMessage::response(
            ServerResult::InitializeResult(init),
            NumberOrString::Number(1),
        ));
        let mut injected = tasks.injected();
        let (old, _) = create(&tasks, 1);
        let (new, _) = create(&tasks, 2);
        answer(&tasks, &old, &"o".repeat(100));
        answer(&tasks, &new, &"n".repeat(100));
        {
            let store = tasks.lock();
            let sizes: Vec<Option<usize>> = [&old, &new]
                .iter()
                .map(|t| store.map[*t].outcome.as_ref().map(|o| o.json.len()))
                .collect();
            assert!(
                store.map[&old].outcome.is_none(),
                "the oldest outcome went: {sizes:?}"
            );
            let kept = store.map[&new].outcome.as_ref().unwrap().json.len();
            assert_eq!(store.bytes, kept);
        }
        // Still a task: tasks/get answers from the entry.
        let got = reply(tasks.intercept(&request("tasks/get", 3, &old)));
        assert_eq!(got["result"]["status"], "completed");
        // The kept one answers at once; the evicted one through rmcp.
        let line = reply(tasks.intercept(&request("tasks/result", 4, &new)));
        assert_eq!(line["result"]["content"][0]["text"], "n".repeat(100));
        assert!(matches!(
            tasks.intercept(&request("tasks/result", 5, &old)),
            Some(Action::Consumed)
        ));
        let fetch: Value = serde_json::from_slice(&injected.recv().await.unwrap()).unwrap();
        assert_eq!(fetch["method"], "tools/call");
        assert_eq!(fetch["params"]["name"], "appduct_call_result");
        assert_eq!(fetch["params"]["arguments"]["callId"], old.as_str());
        let rmcp_id = fetch["id"].as_str().unwrap().to_owned();
        let item = JsonRpcMessage::response(
            ServerResult::CallToolResult(CallToolResult::success(vec![ContentBlock::text(
                "from the daemon",
            )])),
            NumberOrString::String(rmcp_id.into()),
        );
        let line: Value = serde_json::from_str(&tasks.outgoing(&item).unwrap().unwrap()).unwrap();
        assert_eq!(line["id"], 5);
        assert_eq!(line["result"]["content"][0]["text"], "from the daemon");
        assert_eq!(
            line["result"]["_meta"][RELATED_TASK]["taskId"],
            old.as_str()
        );
        // Once only: a second answer under that reserved id reaches nobody.
        assert!(tasks.outgoing(&item).is_none());
    }

    /// Review19 L1: before 2025-11-25 a client's own id with the reserved prefix is answered.
    #[test]
    fn a_reserved_looking_id_is_answered_when_tasks_are_off() {
        let tasks = Arc::new(Tasks::default());
        let item = JsonRpcMessage::response(
            ServerResult::CallToolResult(CallToolResult::success(vec![ContentBlock::text("x")])),
            NumberOrString::String(format!("{TASK_REQUEST_PREFIX}1").into()),
        );
        let line = tasks.outgoing(&item).expect("written").unwrap();
        assert!(line.contains("appduct-task:1"), "{line}");
    }

    /// Review19 M4: progress and heartbeats sent to a task's request token carry the
    /// related-task `_meta`; other tokens' do not, nor the task's once it settled.
    #[test]
    fn a_tasks_progress_names_the_task() {
        use rmcp::model::{ProgressNotificationParam, ProgressToken};
        let tasks = enabled();
        let (task, _) = create(&tasks, 1);
        let progress = |token: i64| {
            let param =
                ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), 1.0);
            let item = JsonRpcMessage::notification(ServerNotification::ProgressNotification(
                rmcp::model::Notification::new(param),
            ));
            let line = tasks.outgoing(&item).unwrap().unwrap();
            serde_json::from_str::<Value>(&line).unwrap()
        };
        let tagged = progress(9);
        assert_eq!(tagged["method"], "notifications/progress");
        assert_eq!(
            tagged["params"]["_meta"][RELATED_TASK],
            json!({"taskId": task})
        );
        assert!(progress(10)["params"].get("_meta").is_none());
        answer(&tasks, &task, "done");
        assert!(progress(9)["params"].get("_meta").is_none());
    }
}
