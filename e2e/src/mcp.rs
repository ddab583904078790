//! `appduct mcp` as a child process, spoken to in MCP JSON-RPC over its stdio (one message per
//! line). Every stdout line is kept so a test can assert stdout purity (§M16 guard 4).

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
        Self::spawn_with_env(sb, &[])
    }

    /// [`Mcp::spawn`] with extra environment, e.g. the hidden test timings
    /// `APPDUCT_TEST_CONSENT_TIMEOUT_MS` and `APPDUCT_TEST_MRTR_TTL_MS` (§M1).
    pub fn spawn_with_env(sb: &Sandbox, env: &[(&str, &str)]) -> Result<Self, HarnessError> {
        let mut cmd = sb.command(&["mcp"]);
        cmd.envs(env.iter().copied());
        Self::spawn_command(cmd)
    }

    /// Spawns an MCP server started another way (`npx appduct mcp` through the npm launcher),
    /// with stdin piped.
    pub fn spawn_command(mut cmd: std::process::Command) -> Result<Self, HarnessError> {
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

    /// A `2026-07-28` request (no `initialize`): `params` with the per-request `_meta` keys
    /// (§M2.1) declaring `capabilities`.
    pub fn request_2026(
        &mut self,
        method: &str,
        mut params: Value,
        capabilities: Value,
    ) -> Result<Value, HarnessError> {
        let id = self.send_request_2026(method, &mut params, capabilities)?;
        self.wait_response(id)
    }

    /// [`Mcp::request_2026`] without waiting; returns the request id.
    pub fn send_request_2026(
        &mut self,
        method: &str,
        params: &mut Value,
        capabilities: Value,
    ) -> Result<u64, HarnessError> {
        params["_meta"] = meta_2026(capabilities);
        self.send_request(method, params.clone())
    }

    /// Closes stdin and checks the end of the process (§M15, SEC-49): exit 0 within 2 s
    /// of EOF (plus scheduling slack for a loaded machine), every stdout line a JSON-RPC 2.0
    /// message, none announcing a list change. Returns the messages.
    pub fn finish(mut self) -> Result<Vec<Value>, HarnessError> {
        self.close_stdin();
        let code = self.proc.wait_exit(Duration::from_millis(2500));
        if code != Some(0) {
            return Err(HarnessError::Output(format!(
                "appduct mcp ended with {code:?} after EOF; stderr: {}",
                self.stderr()
            )));
        }
        let mut messages = Vec::new();
        for line in self.stdout_lines() {
            let msg: Value = serde_json::from_str(&line).map_err(|e| {
                HarnessError::Output(format!("stdout line is not JSON ({e}): {line:?}"))
            })?;
            let method = msg["method"].as_str().unwrap_or_default();
            let is_message =
                msg["jsonrpc"] == "2.0" && (msg.get("method").is_some() || msg.get("id").is_some());
            if !is_message
                || method.ends_with("list_changed")
                || method == "notifications/resources/updated"
            {
                return Err(HarnessError::Output(format!(
                    "not an allowed JSON-RPC message: {line}"
                )));
            }
            messages.push(msg);
        }
        Ok(messages)
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

/// The `_meta` every `2026-07-28` request carries (§M2.1).
pub fn meta_2026(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "appduct-e2e", "version": "0.0.0"},
    })
}

/// Checks a built-in failure against the error contract (§M6): `isError`, one text item
/// starting `[<type>] `, `_meta["appduct/error"].type` equal to it, no `structuredContent`.
/// Returns `_meta["appduct/error"]`.
#[track_caller]
pub fn assert_tool_error(result: &Value, error_type: &str) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with(&format!("[{error_type}] ")),
        "expected [{error_type}]: {result}"
    );
    assert_eq!(
        result["content"].as_array().map(Vec::len),
        Some(1),
        "{result}"
    );
    let meta = &result["_meta"]["appduct/error"];
    assert_eq!(meta["type"], error_type, "{result}");
    assert!(
        result.get("structuredContent").is_none(),
        "an error carries structuredContent: {result}"
    );
    meta.clone()
}
