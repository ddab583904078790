//! `appduct mcp` driven over its stdio, asynchronously, to time `appduct_call_tool` and to read
//! the size of the bridge's `tools/list`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::load::{BenchResult, first_id};
use crate::stats::Sample;

pub struct Mcp {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Mcp {
    /// Spawns the bridge from `cmd` (`appduct --state-dir … mcp`) and initialises it.
    pub async fn start(cmd: std::process::Command) -> BenchResult<Self> {
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| format!("spawn mcp: {e}"))?;
        let stdin = child.stdin.take().ok_or("mcp stdin")?;
        let stdout = child.stdout.take().ok_or("mcp stdout")?;
        let mut mcp = Self {
            _child: child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 1,
        };
        mcp.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "appduct-bench", "version": "0.0.0"}}),
        )
        .await?;
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(mcp)
    }

    async fn send(&mut self, msg: &Value) -> BenchResult<()> {
        let mut line = msg.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("mcp write: {e}"))
    }

    /// Sends a request and returns its response line, raw.
    async fn request_line(&mut self, method: &str, params: Value) -> BenchResult<String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
                .await
                .map_err(|_| format!("mcp {method}: no answer"))?
                .map_err(|e| format!("mcp read: {e}"))?
                .ok_or("mcp closed its stdout")?;
            // Server requests and notifications carry a method; the response does not.
            if first_id(&line) == Some(id) && !line.contains("\"method\":") {
                return Ok(line);
            }
        }
    }

    pub async fn request(&mut self, method: &str, params: Value) -> BenchResult<Value> {
        let line = self.request_line(method, params).await?;
        let msg: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        msg.get("result")
            .cloned()
            .ok_or_else(|| format!("mcp {method} failed: {line}"))
    }

    /// `count` sequential `appduct_call_tool` calls of `echo` on `selector`.
    pub async fn call_tool_load(
        &mut self,
        count: usize,
        selector: &str,
        args: &Value,
    ) -> BenchResult<Sample> {
        let params = json!({"name": "appduct_call_tool",
                            "arguments": {"selector": selector, "name": "echo", "args": args}});
        let mut latencies = Vec::with_capacity(count);
        let start = Instant::now();
        for _ in 0..count {
            let t0 = Instant::now();
            let line = self.request_line("tools/call", params.clone()).await?;
            latencies.push(t0.elapsed());
            if line.contains("\"isError\":true") || !line.contains("\"result\":") {
                return Err(format!("appduct_call_tool failed: {line}"));
            }
        }
        Ok(Sample::new(latencies, start.elapsed()))
    }
}
