//! A raw line client on the bridge served over the production framing ([`LineTransport`]),
//! for tests that need exact JSON-RPC lines (malformed input, cancels, exits).

use std::sync::Arc;
use std::time::Duration;

use appduct_client::command_runner::ScriptedCommandRunner;
use appduct_mcp::{Bridge, LineTransport};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::{FakeConnector, FakeDaemon, session, test_env, test_options, tool};

/// A raw line client on the bridge served over the production framing ([`LineTransport`]).
pub struct LineClient {
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    pub fake: Arc<FakeDaemon>,
}

impl Drop for LineClient {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.fake.assert_no_unexpected();
        }
    }
}

pub fn fake_bridge(fake: &Arc<FakeDaemon>) -> Bridge {
    let connector = Arc::new(FakeConnector {
        fake: fake.clone(),
        no_daemon_without_spawn: true,
    });
    Bridge::with_runner(
        connector,
        test_options(),
        test_env(),
        Arc::new(ScriptedCommandRunner::new()),
    )
}

impl LineClient {
    pub fn start(fake: Arc<FakeDaemon>) -> Self {
        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        let bridge = fake_bridge(&fake);
        let (r, w) = tokio::io::split(server_io);
        tokio::spawn(async move {
            if let Ok(running) = rmcp::serve_server(bridge, LineTransport::new(r, w)).await {
                let _ = running.waiting().await;
            }
        });
        Self::over(client_io, fake)
    }

    /// Serves `bridge` over the production framing.
    pub fn with_bridge(bridge: Bridge, fake: Arc<FakeDaemon>) -> Self {
        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        let (r, w) = tokio::io::split(server_io);
        tokio::spawn(async move {
            if let Ok(running) = rmcp::serve_server(bridge, LineTransport::new(r, w)).await {
                let _ = running.waiting().await;
            }
        });
        Self::over(client_io, fake)
    }

    /// Every message up to and including the response to `id`.
    pub async fn until_response(&mut self, id: i64) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let m = self.next().await;
            let done = m.get("id") == Some(&json!(id)) && m.get("method").is_none();
            seen.push(m);
            if done {
                return seen;
            }
        }
    }

    /// Cancels request `id`, then waits until the bridge has handled the cancel: it handles
    /// messages in order, so the answer to a later `ping` means the cancel was seen.
    pub async fn cancel(&mut self, id: i64) -> Vec<Value> {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": id, "reason": "test"}});
        self.send_line(&cancel.to_string()).await;
        let ping = json!({"jsonrpc": "2.0", "id": 900 + id, "method": "ping"});
        self.send_line(&ping.to_string()).await;
        self.until_response(900 + id).await
    }

    pub fn over(client_io: tokio::io::DuplexStream, fake: Arc<FakeDaemon>) -> Self {
        let (r, w) = tokio::io::split(client_io);
        Self {
            write: w,
            lines: tokio::io::BufReader::new(r).lines(),
            fake,
        }
    }

    /// Closes the client's output: the bridge sees end of input.
    pub async fn close_input(&mut self) {
        self.write.shutdown().await.unwrap();
    }

    pub async fn send_line(&mut self, line: &str) {
        self.write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    pub async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("a message in time")
            .unwrap()
            .expect("open stream");
        serde_json::from_str(&line).expect("every output line is JSON")
    }

    pub async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(&msg.to_string()).await;
        self.next().await
    }

    pub async fn initialize(&mut self) {
        self.initialize_with(json!({})).await;
    }

    pub async fn initialize_with(&mut self, capabilities: Value) {
        let r = self
            .request(
                0,
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                       "clientInfo": {"name": "raw", "version": "1"}}),
            )
            .await;
        assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
        self.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
    }
}

/// The session of [`prompt_fake`].
pub const SID: &str = "q3VfZ0xkR2ptTnB4";

/// A fake with one session whose `reset` tool the policy prompts for, serving
/// `sessions.describe`, `tools.list`, `events.subscribe` and `extra`.
pub fn prompt_fake(extra: &[&'static str]) -> Arc<FakeDaemon> {
    let mut methods = vec!["sessions.describe", "tools.list", "events.subscribe"];
    methods.extend_from_slice(extra);
    let fake = FakeDaemon::new(&methods);
    fake.add_session(
        session(SID, "pixel-8"),
        vec![tool(
            json!({"name": "reset", "description": "Reset.", "input_schema": {"type": "object"}}),
            appduct_protocol::control::PolicyDecision::Prompt,
        )],
    );
    fake
}
