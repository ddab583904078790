//! `appduct mcp` as a child process, spoken to in MCP JSON-RPC over its stdio (one message per
//! line). Every stdout line is kept so a test can assert stdout purity (06 §6.16 guard 4).

use std::io::Write as _;
use std::process::{ChildStdin, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{HarnessError, Proc, Sandbox};

/// How long one MCP request may take before the test fails.
pub const REPLY_WAIT: Duration = Duration::from_secs(20);

/// A running `appduct mcp`.
#[derive(Debug)]
pub struct Mcp {
    proc: Proc,
    stdin: Option<ChildStdin>,
    next_id: u64,
    /// Messages read while waiting for a response (notifications, server requests).
    pub pending: Vec<Value>,
}

impl Mcp {
    /// Spawns `appduct mcp` in the sandbox (a fresh state dir makes it spawn a daemon).
    pub fn spawn(sb: &Sandbox) -> Result<Self, HarnessError> {
        let mut cmd = sb.command(&["mcp"]);
        cmd.stdin(Stdio::piped());
        let mut proc = Proc::spawn(cmd)?;
        let stdin = proc.child_mut().stdin.take();
        Ok(Self {
            proc,
            stdin,
            next_id: 1,
            pending: Vec::new(),
        })
    }

    /// Writes one message line.
    pub fn send(&mut self, msg: &Value) -> Result<(), HarnessError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| HarnessError::Io("stdin already closed".into()))?;
        let mut line = msg.to_string();
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| HarnessError::Io(e.to_string()))
    }

    /// Sends a notification.
    pub fn notify(&mut self, method: &str, params: Value) -> Result<(), HarnessError> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }

    /// Sends a request without waiting; returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> Result<u64, HarnessError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        Ok(id)
    }

    /// The next stdout message (parsed), waiting at most `limit`.
    pub fn next_message(&mut self, limit: Duration) -> Result<Value, HarnessError> {
        let line = self.proc.next_stdout_line(limit).ok_or_else(|| {
            HarnessError::Output(format!(
                "no MCP message within {limit:?}; stderr: {}",
                self.proc.stderr()
            ))
        })?;
        serde_json::from_str(&line).map_err(|e| HarnessError::Output(format!("{e}: {line:?}")))
    }

    /// Reads until the response to `id`; anything else is kept in [`Mcp::pending`].
    pub fn wait_response(&mut self, id: u64) -> Result<Value, HarnessError> {
        let deadline = Instant::now() + REPLY_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self.next_message(left)?;
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                return Ok(msg);
            }
            self.pending.push(msg);
        }
    }

    /// Reads until a server→client request for `method` (kept messages are skipped over);
    /// returns it.
    pub fn wait_server_request(&mut self, method: &str) -> Result<Value, HarnessError> {
        let deadline = Instant::now() + REPLY_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self.next_message(left)?;
            if msg["method"] == method && msg.get("id").is_some() {
                return Ok(msg);
            }
            self.pending.push(msg);
        }
    }

    /// Answers a server→client request.
    pub fn respond(&mut self, request: &Value, result: Value) -> Result<(), HarnessError> {
        self.send(&json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
    }

    /// A request and its whole response.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, HarnessError> {
        let id = self.send_request(method, params)?;
        self.wait_response(id)
    }

    /// `initialize` with `version` and no client capabilities, then
    /// `notifications/initialized`; returns the result.
    pub fn initialize(&mut self, version: &str) -> Result<Value, HarnessError> {
        self.initialize_with(version, json!({}))
    }

    /// [`Mcp::initialize`] declaring `capabilities` (for example `{"elicitation": {}}`).
    pub fn initialize_with(
        &mut self,
        version: &str,
        capabilities: Value,
    ) -> Result<Value, HarnessError> {
        let response = self.request(
            "initialize",
            json!({
                "protocolVersion": version,
                "capabilities": capabilities,
                "clientInfo": {"name": "appduct-e2e", "version": "0.0.0"},
            }),
        )?;
        let result = response
            .get("result")
            .cloned()
            .ok_or_else(|| HarnessError::Output(format!("initialize failed: {response}")))?;
        self.notify("notifications/initialized", json!({}))?;
        Ok(result)
    }

    /// `tools/call` of a built-in; returns the `result` (a `CallToolResult`).
    pub fn call_tool(&mut self, name: &str, arguments: Value) -> Result<Value, HarnessError> {
        let response = self.request("tools/call", json!({"name": name, "arguments": arguments}))?;
        response
            .get("result")
            .cloned()
            .ok_or_else(|| HarnessError::Output(format!("tools/call {name} failed: {response}")))
    }

    /// Closes stdin (EOF for the server).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn proc(&mut self) -> &mut Proc {
        &mut self.proc
    }

    /// Every line written to stdout so far.
    pub fn stdout_lines(&self) -> Vec<String> {
        self.proc.stdout().lines().map(str::to_owned).collect()
    }

    pub fn stderr(&self) -> String {
        self.proc.stderr()
    }
}
