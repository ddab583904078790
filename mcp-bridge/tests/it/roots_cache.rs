//! The roots cache: a `roots/list_changed` during a read makes the next call read again,
//! concurrent first resolutions share one read, and a read that times out is cancelled
//! (§M13).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use appduct_client::command_runner::ScriptedCommandRunner;
use appduct_mcp::Bridge;
use serde_json::{Value, json};
use support::*;

// ---------------------------------------------------------------------------------------------
// The roots cache
// ---------------------------------------------------------------------------------------------

fn roots_client(roots_timeout: Duration) -> LineClient {
    let fake = FakeDaemon::new(&[]);
    let options = appduct_mcp::BridgeOptions {
        roots_timeout,
        ..test_options()
    };
    let bridge = Bridge::with_runner(
        Arc::new(FakeConnector {
            fake: fake.clone(),
            no_daemon_without_spawn: true,
        }),
        options,
        test_env(),
        Arc::new(ScriptedCommandRunner::new()),
    );
    LineClient::with_bridge(bridge, fake)
}

fn status_line(id: i64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "appduct_status", "arguments": {}}})
    .to_string()
}

fn roots_answer(request: &Value, dirs: &[&std::path::Path]) -> String {
    let roots: Vec<Value> = dirs
        .iter()
        .map(|d| json!({"uri": format!("file://{}", d.display())}))
        .collect();
    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"roots": roots}}).to_string()
}

/// The next message, which must be a `roots/list` request.
async fn expect_roots_request(c: &mut LineClient) -> Value {
    let m = c.next().await;
    assert_eq!(
        m["method"], "roots/list",
        "expected a roots/list request: {m}"
    );
    m
}

fn project_dir(response: &Value) -> String {
    response["result"]["structuredContent"]["project"]["dir"]
        .as_str()
        .unwrap_or_else(|| panic!("a status result: {response}"))
        .to_owned()
}

fn canonical(d: &tempfile::TempDir) -> String {
    std::fs::canonicalize(d.path())
        .unwrap()
        .display()
        .to_string()
}

#[tokio::test]
async fn a_list_changed_during_a_roots_read_makes_the_next_call_read_again() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut c = roots_client(Duration::from_secs(10));
    c.initialize_with(json!({"roots": {"listChanged": true}}))
        .await;
    c.send_line(&status_line(1)).await;
    let read = expect_roots_request(&mut c).await;
    // The roots change while the client is still answering the old list.
    c.send_line(r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#)
        .await;
    let pong = json!({"jsonrpc": "2.0", "id": 50, "method": "ping"}).to_string();
    c.send_line(&pong).await;
    assert_eq!(c.next().await["id"], 50);
    c.send_line(&roots_answer(&read, &[a.path()])).await;
    assert_eq!(project_dir(&c.next().await), canonical(&a));
    // The old answer is not kept as current: the next call asks again.
    c.send_line(&status_line(2)).await;
    let read = expect_roots_request(&mut c).await;
    c.send_line(&roots_answer(&read, &[b.path()])).await;
    assert_eq!(project_dir(&c.next().await), canonical(&b));
    // And that answer is cached.
    c.send_line(&status_line(3)).await;
    assert_eq!(project_dir(&c.next().await), canonical(&b));
}

#[tokio::test]
async fn concurrent_first_resolutions_share_one_roots_read() {
    let a = tempfile::tempdir().unwrap();
    let mut c = roots_client(Duration::from_secs(10));
    c.initialize_with(json!({"roots": {}})).await;
    c.send_line(&status_line(1)).await;
    c.send_line(&status_line(2)).await;
    let read = expect_roots_request(&mut c).await;
    // Both calls are under way once a later ping is answered.
    let pong = json!({"jsonrpc": "2.0", "id": 50, "method": "ping"}).to_string();
    c.send_line(&pong).await;
    let mut seen = vec![c.until_response(50).await];
    c.send_line(&roots_answer(&read, &[a.path()])).await;
    let mut answered = 0;
    while answered < 2 {
        let m = c.next().await;
        if m["method"] == "roots/list" {
            c.send_line(&roots_answer(&m, &[a.path()])).await;
        }
        if m.get("result").is_some() {
            assert_eq!(project_dir(&m), canonical(&a));
            answered += 1;
        }
        seen.push(vec![m]);
    }
    let reads = seen
        .iter()
        .flatten()
        .filter(|m| m["method"] == "roots/list")
        .count();
    assert_eq!(
        reads, 0,
        "the second call waited for the first read: {seen:?}"
    );
}

#[tokio::test]
async fn a_roots_read_that_times_out_is_cancelled() {
    let mut c = roots_client(Duration::from_millis(200));
    c.initialize_with(json!({"roots": {}})).await;
    c.send_line(&status_line(1)).await;
    let read = expect_roots_request(&mut c).await;
    // Never answered: the bridge gives up, cancels its request, and falls through.
    let (mut cancelled, mut answered) = (false, false);
    while !(cancelled && answered) {
        let m = c.next().await;
        if m["method"] == "notifications/cancelled" {
            assert_eq!(m["params"]["requestId"], read["id"], "{m}");
            cancelled = true;
        } else if m["id"] == 1 {
            assert_eq!(
                m["result"]["structuredContent"]["project"]["cwdSource"], "server",
                "{m}"
            );
            answered = true;
        }
    }
}
