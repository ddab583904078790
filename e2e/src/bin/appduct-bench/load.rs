//! Closed-loop load: a worker keeps `window` requests in flight on one connection and starts
//! the next as soon as one is answered. The same code drives the daemon, the Node relay and the
//! raw echoes, so client costs are the same on both sides of every ratio.
//!
//! Responses are matched by the first `"id":` of the line: every peer measured here writes the
//! JSON-RPC (or frame) id before any payload.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use appduct_sdk::transport::DeviceSocket;
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::Message;

use crate::stats::Sample;

/// How long one answer may take before the run fails.
const ANSWER_WAIT: Duration = Duration::from_secs(30);

pub type BenchResult<T> = Result<T, String>;

fn err(what: &str) -> impl FnOnce(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// The number after the first `"id":` of `line` (an unquoted or `"…"`-quoted integer).
pub fn first_id(line: &str) -> Option<u64> {
    let at = line.find("\"id\":")? + 5;
    let rest = line[at..].trim_start().trim_start_matches('"');
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// A line of a failed call: a JSON-RPC error.
fn is_error(line: &str) -> bool {
    line.contains("\"error\":{")
}

/// Runs `total` requests over a new connection to `socket`, `window` in flight. `request(id)`
/// builds one line (newline included). Returns the sample, or the first error line.
pub async fn uds_load(
    socket: &Path,
    total: usize,
    window: usize,
    request: impl Fn(u64) -> Vec<u8>,
) -> BenchResult<Sample> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(err("control connect"))?;
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::with_capacity(256 * 1024, read).lines();
    let mut sent_at: HashMap<u64, Instant> = HashMap::with_capacity(window * 2);
    let mut latencies = Vec::with_capacity(total);
    let mut next = 1u64;
    let start = Instant::now();
    while (next as usize) <= window.min(total) {
        sent_at.insert(next, Instant::now());
        write
            .write_all(&request(next))
            .await
            .map_err(err("control write"))?;
        next += 1;
    }
    while latencies.len() < total {
        let line = tokio::time::timeout(ANSWER_WAIT, lines.next_line())
            .await
            .map_err(|_| format!("no answer within {ANSWER_WAIT:?}"))?
            .map_err(err("control read"))?
            .ok_or("the peer closed the connection")?;
        let Some(id) = first_id(&line) else {
            continue; // a notification
        };
        let Some(t0) = sent_at.remove(&id) else {
            continue;
        };
        latencies.push(t0.elapsed());
        if is_error(&line) {
            return Err(format!("call failed: {line}"));
        }
        if (next as usize) <= total {
            sent_at.insert(next, Instant::now());
            write
                .write_all(&request(next))
                .await
                .map_err(err("control write"))?;
            next += 1;
        }
    }
    Ok(Sample::new(latencies, start.elapsed()))
}

/// `workers` concurrent [`uds_load`]s of `per_worker` requests each, `window` in flight each;
/// `request(worker, id)` builds a line.
pub async fn uds_load_parallel(
    socket: &Path,
    workers: usize,
    per_worker: usize,
    window: usize,
    request: impl Fn(usize, u64) -> Vec<u8> + Clone + Send + Sync + 'static,
) -> BenchResult<Sample> {
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..workers {
        let socket = socket.to_owned();
        let request = request.clone();
        tasks.spawn(async move {
            uds_load(&socket, per_worker, window, move |id| request(worker, id)).await
        });
    }
    let mut parts = Vec::with_capacity(workers);
    while let Some(done) = tasks.join_next().await {
        parts.push(done.map_err(|e| e.to_string())??);
    }
    Ok(Sample::merge(parts, start.elapsed()))
}

/// The wss leg of the floor: `total` text frames over `socket`, `window` in flight, each
/// echoed back unchanged by the peer. `frame(id)` builds one frame.
pub async fn ws_load(
    socket: DeviceSocket,
    total: usize,
    window: usize,
    frame: impl Fn(u64) -> String,
) -> BenchResult<Sample> {
    let (mut sink, mut stream) = socket.split();
    let mut sent_at: HashMap<u64, Instant> = HashMap::with_capacity(window * 2);
    let mut latencies = Vec::with_capacity(total);
    let mut next = 1u64;
    let start = Instant::now();
    while (next as usize) <= window.min(total) {
        sent_at.insert(next, Instant::now());
        sink.send(Message::text(frame(next)))
            .await
            .map_err(|e| format!("ws send: {e}"))?;
        next += 1;
    }
    while latencies.len() < total {
        let message = tokio::time::timeout(ANSWER_WAIT, stream.next())
            .await
            .map_err(|_| format!("no echo within {ANSWER_WAIT:?}"))?
            .ok_or("the echo closed")?
            .map_err(|e| format!("ws read: {e}"))?;
        let Message::Text(text) = message else {
            continue;
        };
        let Some(t0) = first_id(text.as_str()).and_then(|id| sent_at.remove(&id)) else {
            continue;
        };
        latencies.push(t0.elapsed());
        if (next as usize) <= total {
            sent_at.insert(next, Instant::now());
            sink.send(Message::text(frame(next)))
                .await
                .map_err(|e| format!("ws send: {e}"))?;
            next += 1;
        }
    }
    let wall = start.elapsed();
    let _ = sink.close().await;
    Ok(Sample::new(latencies, wall))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_id_is_read_quoted_or_not_and_errors_are_seen() {
        assert_eq!(
            first_id(r#"{"jsonrpc":"2.0","id":42,"result":{}}"#),
            Some(42)
        );
        assert_eq!(
            first_id(r#"{"type":"tool_call","id":"7","x":{"id":9}}"#),
            Some(7)
        );
        assert_eq!(first_id(r#"{"jsonrpc":"2.0","method":"n"}"#), None);
        assert!(is_error(r#"{"id":1,"error":{"code":1}}"#));
        assert!(!is_error(r#"{"id":1,"result":{"error":"text"}}"#));
    }
}
