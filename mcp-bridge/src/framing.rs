//! The stdio framing of `appduct mcp` (§M6, §M15): one JSON-RPC message per line in
//! both directions. It replaces rmcp's stock line transport, which ignores a line that is not
//! JSON and answers a message that is not JSON-RPC with an error lacking `id`. Here a line that
//! is not JSON gets `-32700` and a JSON value that is not a JSON-RPC message gets `-32600`, both
//! with the message's `id` when one can be read and `"id": null` otherwise (JSON-RPC 2.0 §5).
//! Notifications and responses are never answered, even when malformed.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::JsonRpcMessage;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, Notify, mpsc};

use crate::tasks::{Action, Tasks};

/// Longest accepted line (16 MiB, rmcp's own bound); longer ones are dropped unanswered.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// What one input line is.
#[derive(Debug)]
pub enum Incoming {
    /// A JSON-RPC message for rmcp.
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// An error response owed to the peer (compact JSON, no newline).
    Reply(String),
    /// Nothing to do: an empty line, or a malformed notification or response.
    Skip,
}

/// Classifies one line (without its `\n`).
pub fn classify(line: &[u8]) -> Incoming {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Skip;
    }
    if let Ok(message) = serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        return Incoming::Message(Box::new(message));
    }
    let value = match serde_json::from_slice::<Value>(line) {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!("a stdin line is not JSON: {e}");
            return Incoming::Reply(error_line(Value::Null, -32700, "Parse error"));
        }
    };
    if let Some(object) = value.as_object() {
        let has_method = object.contains_key("method");
        let is_notification = has_method && !object.contains_key("id");
        let is_response =
            !has_method && (object.contains_key("result") || object.contains_key("error"));
        if is_notification || is_response {
            tracing::debug!("ignoring a malformed JSON-RPC notification or response");
            return Incoming::Skip;
        }
    }
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned()
        .unwrap_or(Value::Null);
    tracing::debug!("a stdin message is not a JSON-RPC request");
    Incoming::Reply(error_line(id, -32600, "Invalid Request"))
}

fn error_line(id: Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// One outgoing message as a line (without `\n`); an error without an id gets `"id": null`.
/// Everything else is written straight from the typed message: going through a `Value` first
/// would copy every result once more.
pub fn encode(item: &TxJsonRpcMessage<RoleServer>) -> serde_json::Result<String> {
    let JsonRpcMessage::Error(_) = item else {
        return serde_json::to_string(item);
    };
    let mut value = serde_json::to_value(item)?;
    if let Some(object) = value.as_object_mut() {
        object.entry("id").or_insert(Value::Null);
    }
    serde_json::to_string(&value)
}

type SharedWriter<W> = Arc<Mutex<Option<W>>>;

/// Writes one line under the writer lock, so lines never interleave.
async fn write_line<W: AsyncWrite + Unpin>(
    writer: &SharedWriter<W>,
    mut line: String,
) -> std::io::Result<()> {
    line.push('\n');
    let mut slot = writer.lock().await;
    let Some(w) = slot.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the MCP output is closed",
        ));
    };
    w.write_all(line.as_bytes()).await?;
    w.flush().await
}

/// The server side of the line framing over any reader and writer (stdin and stdout in
/// production, a duplex in tests).
pub struct LineTransport<R, W> {
    reader: LineReader<R>,
    writer: SharedWriter<W>,
    eof: Option<Arc<Notify>>,
    /// MCP tasks (§M19) and the lines they hand to rmcp.
    tasks: Option<(Arc<Tasks>, mpsc::UnboundedReceiver<Vec<u8>>)>,
}

struct LineReader<R> {
    read: BufReader<R>,
    /// The line being read; kept across cancelled `receive` calls.
    line: Vec<u8>,
    /// Dropping the rest of an oversized line.
    discarding: bool,
}

impl<R, W> std::fmt::Debug for LineTransport<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineTransport")
            .field("buffered", &self.reader.line.len())
            .field("discarding", &self.reader.discarding)
            .finish_non_exhaustive()
    }
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        Self {
            reader: LineReader {
                read: BufReader::new(read),
                line: Vec::new(),
                discarding: false,
            },
            writer: Arc::new(Mutex::new(Some(write))),
            eof: None,
            tasks: None,
        }
    }

    /// Serves MCP tasks (§M19) with this table (the bridge's own).
    pub fn with_tasks(mut self, tasks: Arc<Tasks>) -> Self {
        let injected = tasks.injected();
        self.tasks = Some((tasks, injected));
        self
    }

    /// Notifies `eof` (once) when the input ends.
    pub fn with_eof_signal(mut self, eof: Arc<Notify>) -> Self {
        self.eof = Some(eof);
        self
    }
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Reads until a whole line is in `self.line`; `false` at end of input. Cancel safe: the
    /// bytes read so far stay in `self.line` and nothing is consumed twice.
    async fn read_line(&mut self) -> std::io::Result<bool> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(false);
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            if self.discarding {
                if newline.is_some() {
                    self.discarding = false;
                }
            } else if self.line.len() + take > MAX_LINE_BYTES {
                tracing::error!(
                    "an MCP message exceeded {MAX_LINE_BYTES} bytes and was dropped unanswered"
                );
                self.line.clear();
                self.discarding = newline.is_none();
            } else {
                self.line.extend_from_slice(&available[..take]);
                if newline.is_some() {
                    self.read.consume(take);
                    return Ok(true);
                }
            }
            self.read.consume(take);
        }
    }
}

impl<R, W> LineTransport<R, W>
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// Writes `reply` by its own task: `receive` may be cancelled at any await, and a
    /// half-written line would break the output.
    /// Writes the line `reply` yields, if any (a task's answer that comes through rmcp has none).
    fn spawn_reply(&self, reply: impl Future<Output = Option<String>> + Send + 'static) {
        let writer = self.writer.clone();
        tokio::spawn(async move {
            let Some(line) = reply.await else {
                return;
            };
            if let Err(e) = write_line(&writer, line).await {
                tracing::debug!("cannot write a task answer: {e}");
            }
        });
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = self.writer.clone();
        let line = match &self.tasks {
            Some((tasks, _)) => tasks.outgoing(&item),
            None => Some(encode(&item)),
        };
        async move {
            match line {
                // A task request's answer: kept by the task table (§M19).
                None => Ok(()),
                Some(line) => write_line(&writer, line.map_err(std::io::Error::other)?).await,
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let injected = async {
                match &mut self.tasks {
                    Some((_, rx)) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            let read = tokio::select! {
                r = self.reader.read_line() => r,
                Some(line) = injected => {
                    if let Incoming::Message(m) = classify(&line) {
                        return Some(*m);
                    }
                    continue;
                }
            };
            match read {
                Ok(true) => {}
                Ok(false) => {
                    if let Some(eof) = &self.eof {
                        eof.notify_one();
                    }
                    return None;
                }
                Err(e) => {
                    tracing::error!("cannot read the MCP input: {e}");
                    if let Some(eof) = &self.eof {
                        eof.notify_one();
                    }
                    return None;
                }
            }
            let line = std::mem::take(&mut self.reader.line);
            let line = line.strip_suffix(b"\n").unwrap_or(&line);
            let action = self.tasks.as_ref().and_then(|(t, _)| t.intercept(line));
            let forwarded;
            let line = match action {
                None => line,
                Some(Action::ReplyThenForward { reply, forward }) => {
                    self.spawn_reply(async move { Some(reply) });
                    forwarded = forward;
                    &forwarded[..]
                }
                Some(Action::Reply(reply)) => {
                    self.spawn_reply(async move { Some(reply) });
                    continue;
                }
                Some(Action::Later(reply)) => {
                    self.spawn_reply(reply);
                    continue;
                }
                Some(Action::Consumed) => continue,
            };
            match classify(line) {
                Incoming::Message(m) => return Some(*m),
                Incoming::Reply(reply) => {
                    // Written by its own task: `receive` may be cancelled at any await, and a
                    // half-written line would break the output.
                    let writer = self.writer.clone();
                    tokio::spawn(async move {
                        if let Err(e) = write_line(&writer, reply).await {
                            tracing::debug!("cannot answer a malformed message: {e}");
                        }
                    });
                }
                Incoming::Skip => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut slot = self.writer.lock().await;
        if let Some(mut w) = slot.take() {
            let _ = w.shutdown().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(line: &str) -> Value {
        match classify(line.as_bytes()) {
            Incoming::Reply(r) => serde_json::from_str(&r).unwrap(),
            other => panic!("{line}: expected a reply, got {other:?}"),
        }
    }

    #[test]
    fn lines_are_classified_as_messages_replies_or_nothing() {
        // Valid messages pass, with or without a BOM and a trailing CR.
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\r",
        ] {
            assert!(
                matches!(classify(line.as_bytes()), Incoming::Message(_)),
                "{line}"
            );
        }
        assert_eq!(
            reply("this is not json"),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}})
        );
        assert_eq!(reply("{\"jsonrpc\":").get("id"), Some(&Value::Null));
        let r = reply(r#"{"jsonrpc":"2.0","id":77}"#);
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            (json!(77), json!(-32600))
        );
        for line in [
            "[1,2]",
            "[]",
            "42",
            r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#,
        ] {
            let r = reply(line);
            assert_eq!(r["id"], Value::Null, "{line}");
            assert_eq!(r["error"]["code"], -32600, "{line}");
        }
        assert_eq!(reply(r#"{"id":"a","method":"ping"}"#)["id"], "a");
        // Never answered: blank lines, malformed notifications and responses.
        for line in [
            "",
            "  ",
            r#"{"jsonrpc":"2.0","method":"x/y","params":[1]}"#,
            r#"{"jsonrpc":"1.0","id":3,"result":{}}"#,
        ] {
            assert!(
                matches!(classify(line.as_bytes()), Incoming::Skip),
                "{line:?}"
            );
        }
    }

    #[test]
    fn an_error_without_an_id_is_written_with_a_null_id() {
        let item: TxJsonRpcMessage<RoleServer> =
            JsonRpcMessage::error(rmcp::model::ErrorData::invalid_request("x", None), None);
        let v: Value = serde_json::from_str(&encode(&item).unwrap()).unwrap();
        assert_eq!(v["id"], Value::Null);
        assert!(v.as_object().unwrap().contains_key("id"));
    }
}
