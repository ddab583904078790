//! Shared helpers of the composed-daemon tests: short temporary state directories, a started
//! daemon, control clients over the real socket and in memory, raw JSON-RPC lines, and
//! in-memory app claims. Every wait is bounded and tied to an event or a condition.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use appduct_client::client::{ClientOptions, ControlClient};
use appduct_daemon::daemon::{Daemon, DaemonHandle, DaemonOptions};
use appduct_daemon::device_socket::{AppEvent, MemoryApp, memory_device_pair};
use appduct_protocol::bootstrap;
use appduct_protocol::control::{
    EventKind, EventNotification, LinkCreate, LinkCreateParams, LinkCreateResult, Transport,
};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::timeout;

/// Upper bound of any single wait; only reached when a test is wrong.
pub const WAIT: Duration = Duration::from_secs(10);

/// A state directory short enough for the 100-byte socket path limit.
pub fn state_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("ad")
        .tempdir_in("/tmp")
        .unwrap()
}

pub async fn start(dir: &Path) -> DaemonHandle {
    Daemon::start(DaemonOptions::for_tests(dir)).await.unwrap()
}

/// A typed client over the real socket, never spawning; the version handshake runs (and finds
/// equal versions).
pub async fn uds_client(dir: &Path) -> ControlClient {
    let mut opts = ClientOptions::new(dir, "appduct-cli");
    opts.auto_spawn = false;
    ControlClient::connect(opts).await.unwrap()
}

pub fn memory_client(daemon: &DaemonHandle) -> ControlClient {
    ControlClient::from_stream(daemon.control_stream())
}

/// A raw JSON-RPC line connection for asserting exact wire shapes.
pub struct RawControl {
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    writer: WriteHalf<DuplexStream>,
}

impl RawControl {
    pub fn new(daemon: &DaemonHandle) -> Self {
        let (reader, writer) = tokio::io::split(daemon.control_stream());
        Self {
            lines: BufReader::new(reader).lines(),
            writer,
        }
    }

    pub async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await.unwrap();
    }

    /// The next line the daemon wrote, parsed; `None` at EOF.
    pub async fn next(&mut self) -> Option<Value> {
        let line = timeout(WAIT, self.lines.next_line())
            .await
            .expect("the daemon wrote nothing")
            .unwrap()?;
        Some(serde_json::from_str(&line).unwrap())
    }

    /// Sends a request and returns the next message (which, with nothing else in flight, is its
    /// response).
    pub async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.next().await.expect("EOF instead of a response")
    }
}

/// The next bus event of `kind`, skipping others.
pub async fn event_of(
    events: &mut UnboundedReceiver<EventNotification>,
    kind: EventKind,
) -> EventNotification {
    timeout(WAIT, async {
        loop {
            let e = events.recv().await.expect("bus closed");
            if e.kind() == kind {
                return e;
            }
        }
    })
    .await
    .expect("no such bus event")
}

/// The claim token inside a link's bootstrap payload.
pub fn claim_token(link: &LinkCreateResult) -> String {
    bootstrap::decode(&link.deep_link_payload)
        .unwrap()
        .token
        .to_base64url()
}

pub fn claim_frame(session_id: &str, token: &str, model: &str) -> Value {
    json!({"type": "session_claim", "protocol_version": 2, "session_id": session_id,
           "token": token, "device_manufacturer": "Google", "device_model": model,
           "device_os": "Android 15"})
}

/// The next thing the daemon did to an in-memory app, skipping keepalive pings.
pub async fn next_app_event(app: &mut MemoryApp) -> AppEvent {
    timeout(WAIT, async {
        loop {
            let event = app.recv().await;
            if !matches!(event, AppEvent::Ping(_)) {
                return event;
            }
        }
    })
    .await
    .expect("the daemon did nothing")
}

pub async fn expect_text(app: &mut MemoryApp) -> Value {
    match next_app_event(app).await {
        AppEvent::Text(text) => serde_json::from_str(&text).unwrap(),
        other => panic!("expected a text message, got {other:?}"),
    }
}

/// A claimed in-memory app.
pub struct App {
    pub app: MemoryApp,
    pub session_id: String,
    pub alias: String,
}

impl App {
    pub async fn send(&self, frame: Value) {
        self.app.send_text(frame.to_string()).await.unwrap();
    }

    /// Hands the app to a task that answers the daemon's close at once (as a real app's
    /// WebSocket does), so shutdown does not wait out the close handshake. Resolves to the
    /// daemon's close code and reason.
    pub fn answer_close(mut self) -> tokio::task::JoinHandle<(u16, String)> {
        tokio::spawn(async move {
            loop {
                match self.app.recv().await {
                    AppEvent::Close { code, reason } => {
                        let _ = self.app.close(Some(code), "").await;
                        return (code, reason);
                    }
                    AppEvent::Terminated | AppEvent::Gone => panic!("ended without a close"),
                    _ => {}
                }
            }
        })
    }
}

/// `link.create` over `client`, then a claim through `attach_device` with device `model`.
pub async fn claim(daemon: &DaemonHandle, client: &ControlClient, model: &str) -> App {
    let link = client
        .call::<LinkCreate>(LinkCreateParams::default())
        .await
        .unwrap();
    claim_link(daemon, &link, model).await
}

/// Claims `link` through `attach_device` with device `model`.
pub async fn claim_link(daemon: &DaemonHandle, link: &LinkCreateResult, model: &str) -> App {
    let (socket, mut app) = memory_device_pair();
    daemon.attach_device(socket, Transport::Native);
    app.send_text(claim_frame(&link.session_id, &claim_token(link), model).to_string())
        .await
        .unwrap();
    let ack = expect_text(&mut app).await;
    assert_eq!(ack["type"], "session_ack", "{ack}");
    App {
        app,
        session_id: link.session_id.clone(),
        alias: ack["alias"].as_str().unwrap().to_owned(),
    }
}

/// Polls `condition` until it holds, yielding between checks (no fixed sleeps).
pub async fn until(mut condition: impl FnMut() -> bool) {
    timeout(WAIT, async {
        while !condition() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("condition never held");
}
