//! An async JSON-RPC line connection to the daemon's control socket: requests on one
//! connection run concurrently and are matched by id; notifications go to an optional channel.
//! Dropping it closes the socket (the reader task is aborted with the read half).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};

use super::{SoakResult, lock};

/// How long any answer may take before the soak counts it as lost.
pub const ANSWER_WAIT: Duration = Duration::from_secs(30);

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// One control connection.
#[derive(Debug)]
pub struct Rpc {
    write: tokio::sync::Mutex<OwnedWriteHalf>,
    waiters: Waiters,
    next_id: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

impl Rpc {
    /// Connects; notifications (messages without an id) go to `notifications` when given.
    pub async fn connect(
        socket: &Path,
        notifications: Option<mpsc::UnboundedSender<Value>>,
    ) -> SoakResult<Self> {
        let stream = UnixStream::connect(socket)
            .await
            .map_err(|e| format!("control connect {}: {e}", socket.display()))?;
        let (read, write) = stream.into_split();
        let waiters: Waiters = Arc::default();
        let table = waiters.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(message) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                match message.get("id").and_then(Value::as_u64) {
                    Some(id) => {
                        if let Some(tx) = lock(&table).remove(&id) {
                            let _ = tx.send(message);
                        }
                    }
                    None => {
                        if let Some(tx) = &notifications {
                            let _ = tx.send(message);
                        }
                    }
                }
            }
            // The daemon closed the connection: every waiter learns it now.
            lock(&table).clear();
        });
        Ok(Self {
            write: tokio::sync::Mutex::new(write),
            waiters,
            next_id: AtomicU64::new(1),
            reader,
        })
    }

    /// Sends a request; returns its id and a receiver of the whole response.
    pub async fn send(
        &self,
        method: &str,
        params: Value,
    ) -> SoakResult<(u64, oneshot::Receiver<Value>)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.waiters).insert(id, tx);
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.write
            .lock()
            .await
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("control write ({method}): {e}"))?;
        Ok((id, rx))
    }

    /// A request and its whole response (`result` or `error`).
    pub async fn request(&self, method: &str, params: Value) -> SoakResult<Value> {
        let (_, rx) = self.send(method, params).await?;
        answer(rx, method).await
    }

    /// The `result` of a request that must succeed.
    pub async fn result(&self, method: &str, params: Value) -> SoakResult<Value> {
        let response = self.request(method, params).await?;
        match response.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(format!("{method} failed: {response}")),
        }
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Waits at most [`ANSWER_WAIT`] for the response behind `rx`.
pub async fn answer(rx: oneshot::Receiver<Value>, what: &str) -> SoakResult<Value> {
    match tokio::time::timeout(ANSWER_WAIT, rx).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(_)) => Err(format!("{what}: the connection closed before the answer")),
        Err(_) => Err(format!("{what}: no answer within {ANSWER_WAIT:?}")),
    }
}
