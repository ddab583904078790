//! Helpers of the calls tests: a raw control connection that keeps every message it read (so
//! tests can assert order), an in-memory device that registers tools and answers by wire id,
//! bus-event and audit readers. Every wait is bounded; nothing sleeps.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::path::Path;

use appduct_client::client::ControlClient;
use appduct_client::config::Config;
use appduct_daemon::daemon::{Daemon, DaemonHandle, DaemonOptions};
use appduct_daemon::device_socket::{AppEvent, MemoryApp, memory_device_pair};
use appduct_protocol::control::{
    EventKind, EventNotification, LinkCreate, LinkCreateParams, LinkCreateResult, Transport,
};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::timeout;

use crate::daemon_support::{RawControl, WAIT, claim_frame, claim_token, memory_client, until};

/// `pixel-8/slow_task` needs consent, and a caller that cannot prompt waits for an operator's
/// approval: where every approvals test starts.
pub fn slow_task_needs_an_operator(config: &mut Config) {
    config.policy.tools.insert(
        "pixel-8/slow_task".into(),
        appduct_client::config::Decision::Prompt,
    );
    config.consent.fallback = appduct_client::config::ConsentFallback::Operator;
}

/// The registry most tests use.
pub fn standard_tools() -> Value {
    json!([
        {"name": "slow_task", "description": "Takes a while.", "timeout_ms": 20000,
         "group": "work"},
        {"name": "echo", "description": "Echo the arguments.",
         "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}},
        {"name": "reset_counter", "description": "Set the counter to zero.",
         "annotations": {"destructiveHint": true}, "group": "counter"},
        {"name": "quick", "description": "A short own deadline.", "timeout_ms": 5000}
    ])
}

/// `call_` + 22 base64url characters (§D9.5).
pub fn is_wire_id(s: &str) -> bool {
    s.len() == 27
        && s.starts_with("call_")
        && s[5..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

// ---------------------------------------------------------------------------------------------
// Control side
// ---------------------------------------------------------------------------------------------

/// A raw JSON-RPC connection that files messages it is not asked for yet.
pub struct Wire {
    raw: RawControl,
    backlog: VecDeque<Value>,
    /// Every message read, in arrival order.
    pub log: Vec<Value>,
}

impl Wire {
    pub fn new(daemon: &DaemonHandle) -> Self {
        Self {
            raw: RawControl::new(daemon),
            backlog: VecDeque::new(),
            log: Vec::new(),
        }
    }

    pub async fn send(&mut self, id: i64, method: &str, params: Value) {
        self.raw
            .send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
    }

    /// The first message (filed or new) for which `pred` holds.
    pub async fn take(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(pos) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(pos).unwrap();
        }
        loop {
            let message = self
                .raw
                .next()
                .await
                .expect("EOF on the control connection");
            self.log.push(message.clone());
            if pred(&message) {
                return message;
            }
            self.backlog.push_back(message);
        }
    }

    /// The response to request `id`.
    pub async fn response(&mut self, id: i64) -> Value {
        self.take(|m| m.get("id") == Some(&json!(id)) && m.get("method").is_none())
            .await
    }

    /// The next notification of `method` whose params match `pred`.
    pub async fn notification(&mut self, method: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.take(|m| m["method"] == method && pred(&m["params"]))
            .await
    }

    pub async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(id, method, params).await;
        self.response(id).await
    }

    /// Messages filed but not taken yet.
    pub fn pending(&self) -> &VecDeque<Value> {
        &self.backlog
    }

    /// Closes the connection (EOF on the daemon side).
    pub fn close(self) {
        drop(self);
    }
}

// ---------------------------------------------------------------------------------------------
// Device side
// ---------------------------------------------------------------------------------------------

/// A claimed in-memory app.
pub struct Device {
    pub app: MemoryApp,
    pub session_id: String,
    pub alias: String,
    pub resume_token: String,
    /// The `session_ack` the daemon sent.
    pub ack: Value,
}

async fn next_event(app: &mut MemoryApp) -> AppEvent {
    timeout(WAIT, async {
        loop {
            match app.recv().await {
                AppEvent::Ping(_) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the daemon sent the app nothing")
}

impl Device {
    pub async fn send(&self, frame: Value) {
        self.app.send_text(frame.to_string()).await.unwrap();
    }

    /// The next text frame the daemon wrote to the app.
    pub async fn frame(&mut self) -> Value {
        match next_event(&mut self.app).await {
            AppEvent::Text(text) => serde_json::from_str(&text).unwrap(),
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// The next close the daemon sent.
    pub async fn close_frame(&mut self) -> (u16, String) {
        match next_event(&mut self.app).await {
            AppEvent::Close { code, reason } => (code, reason),
            other => panic!("expected a close, got {other:?}"),
        }
    }

    /// Asserts the daemon has queued nothing but pings for the app.
    pub fn assert_no_frame(&mut self) {
        while let Some(event) = self.app.try_recv() {
            assert!(
                matches!(event, AppEvent::Ping(_)),
                "the app received {event:?}"
            );
        }
    }

    /// Replaces the tool registry and waits until the engine holds it.
    pub async fn register(&self, daemon: &DaemonHandle, tools: Value) {
        let count = tools.as_array().map_or(0, Vec::len);
        self.send(
            json!({"type": "tool_registry_snapshot", "session_id": self.session_id,
                         "tools": tools}),
        )
        .await;
        let sessions = daemon.sessions().clone();
        let id = self.session_id.clone();
        until(move || sessions.tools_of(&id).is_some_and(|t| t.len() == count)).await;
    }

    pub async fn result(&self, wire_id: &str, result: Value) {
        self.send(
            json!({"type": "tool_result", "session_id": self.session_id, "id": wire_id,
                         "result": result}),
        )
        .await;
    }

    pub async fn error(&self, wire_id: &str, error: Value) {
        self.send(
            json!({"type": "tool_error", "session_id": self.session_id, "id": wire_id,
                         "error": error}),
        )
        .await;
    }

    pub async fn progress(&self, wire_id: &str, progress: f64, message: &str) {
        self.send(
            json!({"type": "tool_call_progress", "session_id": self.session_id,
                         "id": wire_id, "progress": progress, "message": message}),
        )
        .await;
    }

    /// The next `tool_call` frame, checked for its exact shape; returns `(wire id, frame)`.
    pub async fn tool_call(&mut self) -> (String, Value) {
        let frame = self.frame().await;
        assert_eq!(frame["type"], "tool_call", "{frame}");
        let keys: Vec<&str> = frame
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["type", "session_id", "id", "name", "args"]);
        assert_eq!(frame["session_id"], self.session_id.as_str());
        assert!(frame["args"].is_object());
        let id = frame["id"].as_str().unwrap().to_owned();
        assert!(is_wire_id(&id), "{id}");
        (id, frame)
    }

    /// The next `tool_cancel` frame; returns `(wire id, reason)`.
    pub async fn tool_cancel(&mut self) -> (String, String) {
        let frame = self.frame().await;
        assert_eq!(frame["type"], "tool_cancel", "{frame}");
        assert_eq!(frame["session_id"], self.session_id.as_str());
        (
            frame["id"].as_str().unwrap().to_owned(),
            frame["reason"].as_str().unwrap().to_owned(),
        )
    }

    /// Hands the app to a task that answers the daemon's close at once, so shutdown does not
    /// wait out the close handshake.
    pub fn answer_close(mut self) -> tokio::task::JoinHandle<(u16, String)> {
        tokio::spawn(async move {
            loop {
                match self.app.recv().await {
                    AppEvent::Close { code, reason } => {
                        let _ = self.app.close(Some(code), "").await;
                        return (code, reason);
                    }
                    AppEvent::Terminated | AppEvent::Gone => return (0, String::new()),
                    _ => {}
                }
            }
        })
    }
}

/// Claims `link` over a new in-memory socket with device `model`.
pub async fn claim_device(daemon: &DaemonHandle, link: &LinkCreateResult, model: &str) -> Device {
    let (socket, app) = memory_device_pair();
    daemon.attach_device(socket, Transport::Native);
    app.send_text(claim_frame(&link.session_id, &claim_token(link), model).to_string())
        .await
        .unwrap();
    ack(app, &link.session_id).await
}

async fn ack(mut app: MemoryApp, session_id: &str) -> Device {
    let ack = match next_event(&mut app).await {
        AppEvent::Text(text) => serde_json::from_str::<Value>(&text).unwrap(),
        other => panic!("expected the ack, got {other:?}"),
    };
    assert_eq!(ack["type"], "session_ack", "{ack}");
    Device {
        app,
        session_id: session_id.to_owned(),
        alias: ack["alias"].as_str().unwrap().to_owned(),
        resume_token: ack["resume_token"].as_str().unwrap().to_owned(),
        ack,
    }
}

/// `link.create`, then a claim with device `model`.
pub async fn connect_device(daemon: &DaemonHandle, model: &str) -> Device {
    let client: ControlClient = memory_client(daemon);
    let link = client
        .call::<LinkCreate>(LinkCreateParams::default())
        .await
        .unwrap();
    claim_device(daemon, &link, model).await
}

/// Resumes `session_id` with `token` over a new in-memory socket.
pub async fn resume_device(daemon: &DaemonHandle, session_id: &str, token: &str) -> Device {
    let (socket, app) = memory_device_pair();
    daemon.attach_device(socket, Transport::Native);
    app.send_text(
        json!({"type": "session_resume", "protocol_version": 2, "session_id": session_id,
               "resume_token": token})
        .to_string(),
    )
    .await
    .unwrap();
    ack(app, session_id).await
}

// ---------------------------------------------------------------------------------------------
// Daemon, events, audit
// ---------------------------------------------------------------------------------------------

/// A state directory short enough for the socket path limit.
pub fn state_dir() -> TempDir {
    crate::daemon_support::state_dir()
}

/// A daemon with one claimed `Pixel 8` that registered `tools`, a raw control connection, and a
/// bus receiver subscribed before the first call.
pub struct Fixture {
    pub dir: TempDir,
    pub daemon: DaemonHandle,
    pub wire: Wire,
    pub device: Device,
    pub events: UnboundedReceiver<EventNotification>,
}

impl Fixture {
    pub async fn new() -> Self {
        Self::with(|o, _| o, standard_tools()).await
    }

    /// A daemon started with `options(for_tests(dir), dir)`, a claimed device with `tools`.
    pub async fn with(
        options: impl FnOnce(DaemonOptions, &Path) -> DaemonOptions,
        tools: Value,
    ) -> Self {
        let dir = state_dir();
        let daemon = Daemon::start(options(DaemonOptions::for_tests(dir.path()), dir.path()))
            .await
            .unwrap();
        let device = connect_device(&daemon, "Pixel 8").await;
        device.register(&daemon, tools).await;
        let events = daemon.events().subscribe_all();
        let wire = Wire::new(&daemon);
        Self {
            dir,
            daemon,
            wire,
            device,
            events,
        }
    }

    /// A daemon whose configuration `edit` adjusted (policy, for example).
    pub async fn with_config(edit: impl FnOnce(&mut Config), tools: Value) -> Self {
        Self::with(
            |options, dir| {
                let mut config = Config::defaults(dir);
                edit(&mut config);
                options.config(config)
            },
            tools,
        )
        .await
    }

    /// Fills the app's 64-frame device queue with `echo` calls `q1`…`q64` (request ids 1–64)
    /// that the app does not read yet.
    pub async fn fill_device_queue(&mut self) {
        for id in 1..=64 {
            self.wire
                .send(
                    id,
                    "tools.call",
                    json!({"name": "echo", "callId": format!("q{id}")}),
                )
                .await;
        }
        for _ in 0..64 {
            next_of(&mut self.events, EventKind::ToolCallStarted).await;
        }
    }

    /// After [`fill_device_queue`](Self::fill_device_queue): sends `tools.call` `params` as
    /// request `request` on `wire` (the fixture's when `None`), and returns once its
    /// `tool_call` write is waiting for room. On a single-threaded runtime the pipeline runs
    /// from reservation to the blocked write without yielding, so once the call counts as
    /// pending its frame is waiting.
    pub async fn blocked_call(&mut self, wire: Option<&mut Wire>, request: i64, params: Value) {
        match wire {
            Some(wire) => wire.send(request, "tools.call", params).await,
            None => self.wire.send(request, "tools.call", params).await,
        }
        let mut id = 200;
        loop {
            id += 1;
            let hello = self.wire.request(id, "daemon.hello", json!({})).await;
            if hello["result"]["pendingCalls"] == 65 {
                break;
            }
        }
    }

    /// Reads the 64 queued `echo` frames and answers them.
    pub async fn drain_device_queue(&mut self) {
        let mut wires = Vec::new();
        for _ in 0..64 {
            let (wire, frame) = self.device.tool_call().await;
            assert_eq!(frame["name"], "echo");
            wires.push(wire);
        }
        for wire in &wires {
            self.device.result(wire, json!(null)).await;
        }
    }

    /// Shuts the daemon down, answering the device's close; returns the state directory (kept
    /// until the caller drops it).
    pub async fn stop(self) -> TempDir {
        let closed = self.device.answer_close();
        self.daemon.shutdown().await;
        closed.await.unwrap();
        self.dir
    }
}

/// Bus events received so far, without waiting.
pub fn drain(events: &mut UnboundedReceiver<EventNotification>) -> Vec<EventNotification> {
    let mut out = Vec::new();
    while let Ok(e) = events.try_recv() {
        out.push(e);
    }
    out
}

/// The next bus event of `kind`.
pub async fn next_of(
    events: &mut UnboundedReceiver<EventNotification>,
    kind: EventKind,
) -> EventNotification {
    crate::daemon_support::event_of(events, kind).await
}

/// `data` of an event as JSON.
pub fn data(e: &EventNotification) -> Value {
    serde_json::to_value(e).unwrap()["data"].clone()
}

/// Every audit line written so far, after flushing the writer, oldest first.
pub async fn audit_lines(daemon: &DaemonHandle) -> Vec<Value> {
    daemon.audit().flush(WAIT).await.unwrap();
    read_audit(&daemon.state_dir().path().join("audit"))
}

/// Parses every day file in `dir`, files in name order.
pub fn read_audit(dir: &Path) -> Vec<Value> {
    raw_audit(dir)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The text of every day file in `dir`, in name order.
pub fn raw_audit(dir: &Path) -> String {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// The keys of a JSON object, in order.
pub fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}
