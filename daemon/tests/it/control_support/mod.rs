//! The control-plane tests' daemon, scripted on the shared fake (`appduct_daemon::testing`),
//! and raw line helpers.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use appduct_daemon::control_server::FixedPeerCheck;
use appduct_daemon::control_server::serve_unix;
use appduct_daemon::control_server::{
    Connection, ConnectionId, Reply, ServerOptions, serve_connection,
};
use appduct_daemon::testing::FakeDaemon;
use appduct_protocol::control::{
    ControlRequest, EventNotification, ToolCallProgressNotify, ToolCallProgressParams,
    ToolCallStartedNotify, ToolCallStartedParams, features,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::ErrorObject;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot, watch};

/// Answers a few methods:
/// - `daemon.hello`: `version` as configured (`None` → `-32601`, like an old daemon);
/// - `daemon.status`: a minimal legacy status;
/// - `sessions.list`: `[]`, at once;
/// - `tools.cancel {callId}`: waits for the gate named `callId` if one was armed, then
///   `{cancelled: <gate value>, extra: 1}` (an unknown key the client must ignore);
/// - `tools.call`: registers a close hook, sends per-call notifications when `progress`, waits
///   for the gate named by its `callId` if armed; name `"denied"` fails with `policy_denied`;
/// - `events.subscribe`: marks the connection subscribed, responds early, then sends the events
///   queued with `queue_subscribe_events`, and keeps the connection for `connections()`;
/// - `daemon.shutdown`: counts, answers `{ok: true}`.
#[derive(Default)]
pub struct TestHandler {
    pub version: Mutex<Option<String>>,
    pub pending: Mutex<(usize, usize, usize)>,
    gates: Mutex<HashMap<String, oneshot::Receiver<bool>>>,
    subscribe_events: Mutex<Vec<Value>>,
    conns: Mutex<Vec<Connection>>,
    pub shutdowns: AtomicUsize,
    pub hellos: AtomicUsize,
    shutdown_tx: Mutex<Option<watch::Sender<bool>>>,
    pub hooks_ran: AtomicUsize,
    hook_tx: Mutex<Option<mpsc::UnboundedSender<ConnectionId>>>,
    closed_tx: Mutex<Option<mpsc::UnboundedSender<ConnectionId>>>,
    conn_tx: Mutex<Option<mpsc::UnboundedSender<Connection>>>,
}

impl TestHandler {
    pub fn new(version: Option<&str>) -> Arc<Self> {
        let h = Self::default();
        *h.version.lock().unwrap() = version.map(str::to_owned);
        Arc::new(h)
    }

    /// Arms a gate: the request keyed `key` waits until the returned sender fires.
    pub fn gate(&self, key: &str) -> oneshot::Sender<bool> {
        let (tx, rx) = oneshot::channel();
        self.gates.lock().unwrap().insert(key.to_owned(), rx);
        tx
    }

    pub fn set_pending(&self, sessions: usize, links: usize, calls: usize) {
        *self.pending.lock().unwrap() = (sessions, links, calls);
    }

    pub fn queue_subscribe_events(&self, events: Vec<Value>) {
        *self.subscribe_events.lock().unwrap() = events;
    }

    pub fn connections(&self) -> Vec<Connection> {
        self.conns.lock().unwrap().clone()
    }

    /// Receives the connection id each time a close hook runs.
    pub fn watch_hooks(&self) -> mpsc::UnboundedReceiver<ConnectionId> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.hook_tx.lock().unwrap() = Some(tx);
        rx
    }

    /// Receives the connection id each time `on_close` runs.
    pub fn watch_closed(&self) -> mpsc::UnboundedReceiver<ConnectionId> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.closed_tx.lock().unwrap() = Some(tx);
        rx
    }

    /// Receives each connection the handler keeps (`events.subscribe`, `sessions.describe`).
    pub fn watch_connections(&self) -> mpsc::UnboundedReceiver<Connection> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.conn_tx.lock().unwrap() = Some(tx);
        rx
    }

    fn keep(&self, conn: &Connection) {
        self.conns.lock().unwrap().push(conn.clone());
        if let Some(tx) = self.conn_tx.lock().unwrap().as_ref() {
            let _ = tx.send(conn.clone());
        }
    }

    fn take_gate(&self, key: &str) -> Option<oneshot::Receiver<bool>> {
        self.gates.lock().unwrap().remove(key)
    }

    fn hook(self: &Arc<Self>, conn: &Connection) {
        let me = self.clone();
        let id = conn.id();
        conn.on_close(move || {
            me.hooks_ran.fetch_add(1, Ordering::SeqCst);
            if let Some(tx) = me.hook_tx.lock().unwrap().as_ref() {
                let _ = tx.send(id);
            }
        });
    }
}

impl TestHandler {
    /// The fake daemon that answers for this handler: one script per method above, and an
    /// internal error for any other.
    fn scripted(me: &Arc<Self>) -> Arc<FakeDaemon> {
        let fake = FakeDaemon::new(&[]);
        let h = me.clone();
        fake.script("daemon.hello", move |_, _, _| {
            let h = h.clone();
            h.hellos.fetch_add(1, Ordering::SeqCst);
            let version = h.version.lock().unwrap().clone();
            let (s, l, c) = *h.pending.lock().unwrap();
            Box::pin(async move {
                match version {
                    Some(v) => Reply::Ok(json!({
                        "version": v, "controlProtocol": 1, "minControlProtocol": 1,
                        "pid": 1, "startedAt": "2026-11-30T09:12:03.120Z", "stateDir": "/x",
                        "features": features::ALL, "sessionCount": s, "pendingLinks": l,
                        "pendingCalls": c, "someFutureKey": true
                    })),
                    None => Reply::Err(ErrorObject::method_not_found("daemon.hello")),
                }
            })
        });
        let h = me.clone();
        fake.script("daemon.status", move |_, _, _| {
            let (s, l, _) = *h.pending.lock().unwrap();
            let sessions: Vec<Value> = (0..s).map(|i| json!({"sessionId": i})).collect();
            Box::pin(async move {
                Reply::Ok(json!({"version": "0.0.1", "sessions": sessions, "pendingLinks": l}))
            })
        });
        fake.script("sessions.list", |_, _, _| {
            Box::pin(async { Reply::Ok(json!([])) })
        });
        let h = me.clone();
        fake.script("tools.cancel", move |_, _, request| {
            let ControlRequest::ToolsCancel(p) = request else {
                unreachable!("routed by method")
            };
            let gate = h.take_gate(&p.call_id);
            Box::pin(async move {
                let cancelled = match gate {
                    Some(rx) => rx.await.unwrap_or(false),
                    None => false,
                };
                Reply::Ok(json!({"cancelled": cancelled, "extra": 1}))
            })
        });
        let h = me.clone();
        fake.script("tools.call", move |conn, id, request| {
            let ControlRequest::ToolsCall(p) = request else {
                unreachable!("routed by method")
            };
            let h = h.clone();
            h.hook(conn);
            let conn = conn.clone();
            let call_id = p.call_id.clone().unwrap_or_else(|| "call_minted".into());
            let gate = h.take_gate(&call_id);
            Box::pin(async move {
                if p.progress {
                    conn.notify::<ToolCallStartedNotify>(&ToolCallStartedParams::new(
                        id.clone(),
                        call_id.clone(),
                        "q3VfZ0xkR2ptTnB4",
                        "pixel-8",
                        p.name.clone(),
                        5000,
                        1,
                    ));
                    for i in 1..=2u32 {
                        conn.notify::<ToolCallProgressNotify>(
                            &ToolCallProgressParams::new(
                                id.clone(),
                                call_id.clone(),
                                "q3VfZ0xkR2ptTnB4",
                                2,
                            )
                            .with_progress(Some(i.into()))
                            .with_message(Some(format!("{} step {i}", p.name))),
                        );
                    }
                }
                if let Some(rx) = gate {
                    let _ = rx.await;
                }
                if p.name == "denied" {
                    return Reply::Err(
                        ErrorObject::application(
                            ErrorType::PolicyDenied,
                            "Policy denies \"denied\"",
                        )
                        .with_call_id(call_id)
                        .with_details(json!({"reason": "policy"})),
                    );
                }
                Reply::Ok(json!({"result": {"name": p.name}, "callId": call_id,
                    "sessionId": "q3VfZ0xkR2ptTnB4", "alias": "pixel-8", "durationMs": 3,
                    "future": "ignored"}))
            })
        });
        let h = me.clone();
        fake.script("events.subscribe", move |conn, id, _| {
            let h = h.clone();
            h.keep(conn);
            let events = std::mem::take(&mut *h.subscribe_events.lock().unwrap());
            conn.set_subscribed();
            // The response goes out before any event under the new filter (§C14).
            conn.respond(&id, Ok(json!({"ok": true})));
            for e in events {
                let line =
                    serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "event", "params": e}))
                        .unwrap();
                conn.send_notification(line);
            }
            Box::pin(async { Reply::AlreadySent })
        });
        let h = me.clone();
        fake.script("daemon.shutdown", move |conn, id, _| {
            let h = h.clone();
            h.shutdowns.fetch_add(1, Ordering::SeqCst);
            // Like the daemon: answer, flush, then tear down (§C8.3).
            conn.respond(&id, Ok(json!({"ok": true})));
            let stop = h.shutdown_tx.lock().unwrap().clone();
            let conn = conn.clone();
            Box::pin(async move {
                conn.flushed().await;
                if let Some(tx) = stop {
                    tx.send_replace(true);
                }
                Reply::AlreadySent
            })
        });
        let h = me.clone();
        fake.script("sessions.describe", move |conn, _, _| {
            // Keeps the connection so tests can push notifications on it.
            h.keep(conn);
            Box::pin(async {
                Reply::Err(ErrorObject::application(ErrorType::NoSession, "No session"))
            })
        });
        fake.script_other(|_, _, request| {
            let m = request.method();
            Box::pin(
                async move { Reply::Err(ErrorObject::internal(format!("{m} is not scripted"))) },
            )
        });
        let h = me.clone();
        fake.on_close(move |conn| {
            if let Some(tx) = h.closed_tx.lock().unwrap().as_ref() {
                let _ = tx.send(conn);
            }
        });
        fake
    }
}

/// A valid `app_event` notification payload.
pub fn app_event(seq: u64, name: &str) -> Value {
    json!({"kind": "app_event", "sessionId": "q3VfZ0xkR2ptTnB4", "alias": "pixel-8", "ts": 10,
           "seq": seq, "data": {"name": name, "payload": {"n": seq}, "ts": 9}})
}

pub fn decode_event(v: Value) -> EventNotification {
    EventNotification::from_value(v).unwrap()
}

/// Starts `serve_connection` over a duplex pair and returns the client side and the task.
pub fn serve(
    handler: Arc<TestHandler>,
    opts: ServerOptions,
    buffer: usize,
) -> (DuplexStream, tokio::task::JoinHandle<()>) {
    let (client, server) = tokio::io::duplex(buffer);
    let task = tokio::spawn(serve_connection(
        server,
        TestHandler::scripted(&handler).handler(),
        opts,
    ));
    (client, task)
}

/// Raw line access to the client side of a connection.
pub struct Raw {
    pub reader: BufReader<ReadHalf<DuplexStream>>,
    pub writer: WriteHalf<DuplexStream>,
}

impl Raw {
    pub fn new(stream: DuplexStream) -> Self {
        let (r, w) = tokio::io::split(stream);
        Self {
            reader: BufReader::new(r),
            writer: w,
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
    }

    pub async fn send_line(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.send(&line).await;
    }

    /// The next line as JSON; `None` at EOF.
    pub async fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        assert!(line.ends_with('\n'), "partial line {line:?}");
        Some(serde_json::from_str(&line).unwrap())
    }
}

pub fn request(id: impl Into<Value>, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.into(), "method": method, "params": params})
}

/// A temporary state directory with a short path under /tmp (socket paths are limited).
pub fn short_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ac")
        .tempdir_in("/tmp")
        .unwrap()
}

/// Serves `handler` on a Unix socket at `socket` like the daemon: `daemon.shutdown` stops the
/// accept loop and removes the socket file. Must run inside a runtime.
pub fn start_uds(
    socket: &Path,
    handler: Arc<TestHandler>,
    allow: bool,
) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(socket).unwrap();
    let (tx, rx) = watch::channel(false);
    *handler.shutdown_tx.lock().unwrap() = Some(tx);
    let socket: PathBuf = socket.to_path_buf();
    tokio::spawn(async move {
        serve_unix(
            listener,
            TestHandler::scripted(&handler).handler(),
            ServerOptions::default(),
            Arc::new(FixedPeerCheck(allow)),
            rx,
        )
        .await;
        let _ = std::fs::remove_file(&socket);
    })
}
