//! Control connections at teardown (§S3.6 step 5, §C8.3): owed responses are still written,
//! and a client that stopped reading cannot hold the daemon up.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;
use crate::daemon_support;

use std::time::Duration;

use appduct_daemon::daemon::{Daemon, DaemonOptions};
use calls_support::Fixture;
use daemon_support::{RawControl, WAIT, state_dir};
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// Step 5 stops reading, but the response to a request still in flight is written before the
/// connection closes. The request is a `tools.call` the device answers only once the closing
/// has begun.
#[tokio::test]
async fn closing_control_connections_still_writes_responses_in_flight() {
    let mut f = Fixture::new().await;
    let mut raw = RawControl::new(&f.daemon);
    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools.call",
                    "params": {"name": "slow_task"}}))
        .await;
    let (wire_id, _) = f.device.tool_call().await;
    let closing = tokio::spawn({
        let handler = f.daemon.handler().clone();
        async move { handler.close_connections(WAIT).await }
    });
    tokio::task::yield_now().await;
    f.device.result(&wire_id, json!({"answered": true})).await;
    let response = raw.next().await.expect("EOF before the owed response");
    assert_eq!(response["id"], 1);
    assert_eq!(response["result"]["result"], json!({"answered": true}));
    assert_eq!(raw.next().await, None);
    tokio::time::timeout(WAIT, closing).await.unwrap().unwrap();
    f.stop().await;
}

/// §C8.3: the daemon flushes the `daemon.shutdown` response before teardown, but a client that
/// never reads must not keep it from stopping: the flush is bounded by the drain timeout.
#[tokio::test]
async fn daemon_shutdown_from_a_client_that_never_reads_still_stops_the_daemon() {
    let dir = state_dir();
    let mut opts = DaemonOptions::for_tests(dir.path());
    opts.control_drain_timeout = Duration::from_millis(200);
    let daemon = Daemon::start(opts).await.unwrap();
    let stream = daemon.control_stream();
    let (_unread, mut writer) = tokio::io::split(stream);
    // Far more response bytes than the in-memory pipe holds, all under the buffer cap.
    let mut lines = Vec::new();
    for id in 1..=2000 {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "daemon.hello", "params": {}});
        lines.extend_from_slice(format!("{request}\n").as_bytes());
    }
    lines.extend_from_slice(
        format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "id": 0, "method": "daemon.shutdown", "params": {}})
        )
        .as_bytes(),
    );
    let writing = tokio::spawn(async move {
        writer.write_all(&lines).await.unwrap();
        writer
    });
    tokio::time::timeout(WAIT, daemon.wait())
        .await
        .expect("the daemon waits forever to flush a response nobody reads");
    assert!(daemon.is_stopped());
    drop(writing);
}
