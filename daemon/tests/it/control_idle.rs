//! Idle control connections (issue #20 defect 6, project decision in SECURITY.md 4.4): the
//! daemon accepts any number of control connections (§C1.2) and never closes one for being
//! idle; what an idle one holds is bounded instead (`control_server::reader`, unit-tested there).
#![allow(clippy::unwrap_used)]

use crate::control_support;

use std::time::Duration;

use appduct_daemon::control_server::ServerOptions;
use control_support::{Raw, TestHandler, request, serve};
use serde_json::json;

/// A client may keep one connection for many requests (§C1.2), hours apart: a week of silence
/// with no subscription and nothing in flight does not close it.
#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_never_closed_for_being_idle() {
    let h = TestHandler::new(Some("0.1.0"));
    let (stream, task) = serve(h, ServerOptions::default(), 64 * 1024);
    let mut raw = Raw::new(stream);
    raw.send_line(&request(1, "sessions.list", json!({}))).await;
    assert_eq!(
        raw.recv().await,
        Some(json!({"jsonrpc":"2.0","id":1,"result":[]}))
    );

    tokio::time::advance(Duration::from_secs(7 * 24 * 60 * 60)).await;
    assert!(!task.is_finished(), "the connection task is still serving");
    raw.send_line(&request(2, "sessions.list", json!({}))).await;
    assert_eq!(
        raw.recv().await,
        Some(json!({"jsonrpc":"2.0","id":2,"result":[]}))
    );
}
