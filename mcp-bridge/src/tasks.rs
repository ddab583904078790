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
use rmcp::model::{JsonRpcMessage, NumberOrString, ProtocolVersion, ServerResult};
use rmcp::service::TxJsonRpcMessage;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use crate::builtins::call_tool;

/// Request ids of the task requests handed to rmcp: this prefix and the task id. A client's
/// own request id with this prefix is refused (`-32600`).
pub const TASK_REQUEST_PREFIX: &str = "appduct-task:";
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
    /// The underlying request's outcome: `{"result": …}` or `{"error": …}`.
    outcome: Option<Map<String, Value>>,
    /// `true` once `outcome` is set.
    settled: watch::Sender<bool>,
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

    fn expired(&self, now_ms: u64) -> bool {
        self.status.is_terminal() && now_ms >= self.created_ms.saturating_add(self.ttl_ms)
    }

    fn settle(&mut self, status: Status, message: Option<String>, outcome: Map<String, Value>) {
        self.status = status;
        self.message = message;
        self.updated_ms = now_ms();
        self.outcome = Some(outcome);
        self.settled.send_replace(true);
    }
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
    /// Answer with the line this future yields (`tasks/result` of a running task).
    Later(Pin<Box<dyn Future<Output = String> + Send>>),
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
    entries: Mutex<HashMap<String, Entry>>,
    /// Lines handed to rmcp as if the client had sent them (`notifications/cancelled`).
    inject: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
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
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
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
            settled: watch::channel(false).0,
        };
        let created = {
            let mut entries = self.lock();
            entries.retain(|_, e| !e.expired(now));
            if entries.len() >= MAX_TASKS {
                None
            } else {
                let json = entry.to_json(&task_id);
                entries.insert(task_id.clone(), entry);
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
        entries.retain(|_, e| !e.expired(now));
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
            let outcome = json!({"error": {
                "code": INVALID_REQUEST,
                "message": format!("task {t:?} was cancelled before it finished"),
                "data": {"taskId": t, "status": "cancelled"},
            }});
            let Value::Object(outcome) = outcome else {
                unreachable!("a JSON object literal")
            };
            e.settle(
                Status::Cancelled,
                Some("cancelled by the client".into()),
                outcome,
            );
            reply_line(id, e.to_json(t))
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
                Some(e) => e.settled.subscribe(),
                None => return Action::Reply(Self::unknown(id, task.as_deref())),
            }
        };
        let tasks = self.clone();
        let id = id.clone();
        let task = task.unwrap_or_default();
        Action::Later(Box::pin(async move {
            // The sender lives in the entry; an entry dropped unsettled cannot happen while
            // working (only settled entries expire), so a closed channel also means "look".
            let _ = settled.wait_for(|s| *s).await;
            tasks.outcome_line(&id, &task)
        }))
    }

    fn outcome_line(&self, id: &Value, task: &str) -> String {
        let entries = self.lock();
        let Some(outcome) = entries.get(task).and_then(|e| e.outcome.clone()) else {
            return Self::unknown(id, Some(task));
        };
        let mut message = Map::new();
        message.insert("jsonrpc".into(), json!("2.0"));
        message.insert("id".into(), id.clone());
        for (k, mut v) in outcome {
            if k == "result"
                && let Some(r) = v.as_object_mut()
            {
                let meta = r.entry("_meta").or_insert_with(|| json!({}));
                if let Some(meta) = meta.as_object_mut() {
                    meta.insert(RELATED_TASK.into(), json!({"taskId": task}));
                }
            }
            message.insert(k, v);
        }
        Value::Object(message).to_string()
    }

    /// Looks at one outgoing message: `None` drops it (a task request's answer, kept here);
    /// otherwise the line to write.
    pub fn outgoing(
        &self,
        item: &TxJsonRpcMessage<RoleServer>,
    ) -> Option<serde_json::Result<String>> {
        match item {
            JsonRpcMessage::Response(r) => {
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
            JsonRpcMessage::Error(e) => {
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

    fn task_of(&self, id: &NumberOrString) -> Option<String> {
        match id {
            NumberOrString::String(s) => s.strip_prefix(TASK_REQUEST_PREFIX).map(str::to_owned),
            NumberOrString::Number(_) => None,
        }
    }

    fn settle(&self, task: &str, status: Status, message: Option<String>, key: &str, value: Value) {
        let mut entries = self.lock();
        // A cancelled task keeps its state; rmcp normally drops the late answer anyway.
        if let Some(e) = entries.get_mut(task)
            && !e.status.is_terminal()
        {
            let mut outcome = Map::new();
            outcome.insert(key.to_owned(), value);
            e.settle(status, message, outcome);
        }
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
        let line: Value = serde_json::from_str(&waiting.await.unwrap()).unwrap();
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
        let Some(Action::Later(result)) = tasks.intercept(&request("tasks/result", 5, &cancelled))
        else {
            panic!("tasks/result answers later");
        };
        let line: Value = serde_json::from_str(&result.await).unwrap();
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
}
