//! Control connections at teardown (01 §6.6 step 5, 03 §9.3): owed responses are still written,
//! and a client that stopped reading cannot hold the daemon up.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod daemon_support;

use std::time::Duration;

use appduct_daemon::daemon::{Daemon, DaemonOptions};
use daemon_support::{WAIT, state_dir};
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// 03 §9.3: the daemon flushes the `daemon.shutdown` response before teardown, but a client that
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
