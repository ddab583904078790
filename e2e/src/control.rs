//! A raw JSON-RPC line client for `<state>/daemon.sock` (§C2): what a test needs to see the
//! control plane exactly as a third-party client would, including per-call notifications and
//! malformed input. Blocking, with a read timeout on every wait.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::HarnessError;

fn io(e: impl std::fmt::Display) -> HarnessError {
    HarnessError::Io(e.to_string())
}

/// One control connection.
#[derive(Debug)]
pub struct Control {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
    /// Notifications read while waiting for a response, in arrival order.
    pub notifications: Vec<Value>,
}

impl Control {
    /// Connects; every read waits at most `timeout`.
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Self, HarnessError> {
        let writer = UnixStream::connect(socket).map_err(io)?;
        writer.set_read_timeout(Some(timeout)).map_err(io)?;
        let reader = BufReader::new(writer.try_clone().map_err(io)?);
        Ok(Self {
            writer,
            reader,
            next_id: 1,
            notifications: Vec::new(),
        })
    }

    /// A second handle on the socket, for writing from another thread.
    pub fn try_clone_writer(&self) -> std::io::Result<UnixStream> {
        self.writer.try_clone()
    }

    /// Writes bytes as they are (no terminator added).
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)
    }

    /// The next message; `Ok(None)` at end of stream.
    pub fn read_message(&mut self) -> Result<Option<Value>, HarnessError> {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).map_err(io)?;
        if n == 0 {
            return Ok(None);
        }
        serde_json::from_str(line.trim_end())
            .map(Some)
            .map_err(|e| HarnessError::Output(format!("{e}: {line:?}")))
    }

    /// Whether the daemon closed the connection: end of stream or a reset, before `timeout`.
    pub fn is_closed(&mut self) -> bool {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }

    /// Reads every message until the daemon closes the connection (end of stream or a reset);
    /// returns how many were read. A read that times out first is an error: the connection
    /// was still open.
    pub fn read_until_closed(&mut self) -> Result<usize, HarnessError> {
        let mut count = 0;
        let mut line = String::new();
        loop {
            line.clear();
            match self.reader.read_line(&mut line) {
                Ok(0) => return Ok(count),
                Ok(_) => count += 1,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(count),
                Err(e) => {
                    return Err(HarnessError::Io(format!(
                        "still open after {count} messages: {e}"
                    )));
                }
            }
        }
    }

    /// Sends a request without waiting; returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> Result<u64, HarnessError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.send_raw(line.as_bytes()).map_err(io)?;
        Ok(id)
    }

    /// Reads until the response with `id`; notifications on the way are kept.
    pub fn wait_response(&mut self, id: u64) -> Result<Value, HarnessError> {
        loop {
            let Some(msg) = self.read_message()? else {
                return Err(HarnessError::Output(format!(
                    "connection closed before the response to {id}"
                )));
            };
            if msg.get("id") == Some(&json!(id)) {
                return Ok(msg);
            }
            self.notifications.push(msg);
        }
    }

    /// A request and its whole response (`result` or `error`).
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, HarnessError> {
        let id = self.send_request(method, params)?;
        self.wait_response(id)
    }

    /// The `result` of a request that must succeed.
    pub fn result(&mut self, method: &str, params: Value) -> Result<Value, HarnessError> {
        let response = self.request(method, params)?;
        match response.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(HarnessError::Output(format!("{method} failed: {response}"))),
        }
    }
}
