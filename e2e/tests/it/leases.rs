//! Leases and kept results across real processes (issue #19; control.md §C10.9, §C10.10;
//! docs/mcp.md §M17): two `appduct mcp` bridges contend for one lease, the holder's exit
//! releases it, and a bridge killed mid-call leaves an outcome that a new bridge fetches by
//! callId with `appduct_call_result` (§M8.10).

use std::time::Duration;

use appduct_e2e::control::Control;
use appduct_e2e::device::{RawDevice, mint};
use appduct_e2e::harness::Sandbox;
use appduct_e2e::mcp::Mcp;
use appduct_e2e::{OrFail as _, blocking};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

fn call_args(lease: bool) -> Value {
    json!({"name": "appduct_call_tool", "arguments": {"name": "quick", "lease": lease}})
}

fn error_type(response: &Value) -> Value {
    response["result"]["_meta"]["appduct/error"]["type"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_bridges_contend_for_one_lease_and_the_holders_exit_releases_it() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, _ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    device
        .register(json!([{"name": "quick", "description": "Answers at once."}]))
        .await
        .or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 1)
    ));
    let mut a = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| a.initialize("2025-11-25")).or_fail();
    let mut b = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| b.initialize("2025-11-25")).or_fail();

    // A takes the lease with its call.
    let id = blocking(|| a.send_request("tools/call", call_args(true))).or_fail();
    let call = device.expect_frame("tool_call").await.or_fail();
    device.reply(&call, json!("a")).await.or_fail();
    let r = blocking(|| a.wait_response(id)).or_fail();
    assert_ne!(r["result"]["isError"], true, "{r}");

    // B is refused, with or without `lease`, and the error names the holder.
    for lease in [false, true] {
        let r = blocking(|| b.request("tools/call", call_args(lease))).or_fail();
        assert_eq!(error_type(&r), "session_leased", "{r}");
        let details = &r["result"]["_meta"]["appduct/error"]["details"];
        assert_eq!(details["holder"]["client"], "appduct-mcp", "{r}");
        assert_eq!(details["holder"]["pid"], a.proc().pid(), "{r}");
        assert!(details["expiresAt"].as_u64().is_some(), "{r}");
    }
    let listed = blocking(|| sb.sessions()).or_fail();
    assert_eq!(listed[0]["lease"]["holder"]["pid"], a.proc().pid());

    // A exits: its connection closes and the lease ends; B's call runs.
    a.close_stdin();
    assert!(blocking(|| a.proc().wait_exit(WAIT)).is_some());
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l[0].get("lease").is_none())
    ));
    let id = blocking(|| b.send_request("tools/call", call_args(true))).or_fail();
    let call = device.expect_frame("tool_call").await.or_fail();
    device.reply(&call, json!("b")).await.or_fail();
    let r = blocking(|| b.wait_response(id)).or_fail();
    assert_ne!(r["result"]["isError"], true, "{r}");
    b.close_stdin();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_killed_mid_call_leaves_an_outcome_fetched_by_call_id() {
    let sb = Sandbox::with_config(r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, _ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    device
        // A deadline well past the first heartbeat (3 s by default) and the quiet check below.
        .register(
            json!([{"name": "quick", "description": "Answers when told.", "timeout_ms": 40000}]),
        )
        .await
        .or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 1)
    ));
    let mut first = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| first.initialize("2025-11-25")).or_fail();
    let mut params = call_args(false);
    params["_meta"] = json!({"progressToken": "t1"});
    blocking(|| first.send_request("tools/call", params)).or_fail();
    let call = device.expect_frame("tool_call").await.or_fail();

    // The agent learns the callId from the first heartbeat of the silent call (§M17: one
    // interval, 3 s by default, after the start), …
    let heard = blocking(|| {
        let deadline = std::time::Instant::now() + Duration::from_secs(40);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let msg = first.next_message(left)?;
            if msg["method"] == "notifications/progress" {
                return Ok::<_, appduct_e2e::harness::HarnessError>(msg);
            }
        }
    })
    .or_fail();
    let message = heard["params"]["message"].as_str().unwrap_or_default();
    let call_id = message
        .rsplit_once("callId ")
        .map(|(_, id)| id.trim_end_matches(')').to_owned())
        .unwrap_or_default();
    assert!(call_id.starts_with("mcp_"), "{heard}");
    // … the same one every client of the daemon sees.
    let mut control = blocking(|| Control::connect(&sb.socket(), WAIT)).or_fail();
    let calls = blocking(|| control.result("calls.list", json!({}))).or_fail();
    assert_eq!(calls["calls"][0]["callId"], call_id.as_str(), "{calls}");

    // Killed mid-call: the app is not told to cancel, and answers later.
    assert!(first.proc().signal("KILL"));
    assert!(blocking(|| first.proc().wait_exit(WAIT)).is_some());
    // Nothing reaches the app for longer than the daemon's 2 s cancel grace: a call that was
    // not detached would get its tool_cancel now, and settle cancelled when the grace ends.
    let quiet = tokio::time::timeout(Duration::from_secs(3), device.next_frame()).await;
    assert!(quiet.is_err(), "a frame reached the app: {quiet:?}");
    // A new bridge asks for the outcome by callId while the call still runs (§M8.10): the
    // daemon holds the request until the app answers.
    let mut second = blocking(|| Mcp::spawn(&sb)).or_fail();
    blocking(|| second.initialize("2025-11-25")).or_fail();
    let asked = blocking(|| {
        second.send_request(
            "tools/call",
            json!({"name": "appduct_call_result", "arguments": {"callId": call_id, "waitMs": 10000}}),
        )
    })
    .or_fail();
    device.reply(&call, json!({"total": 42})).await.or_fail();
    let r = blocking(|| second.wait_response(asked)).or_fail();
    let result = &r["result"];
    assert_ne!(result["isError"], true, "{r}");
    assert_eq!(result["structuredContent"], json!({"total": 42}), "{r}");
    assert_eq!(result["_meta"]["appduct/call"]["callId"], call_id.as_str());
    assert!(
        result["_meta"]["appduct/call"]["sessionId"].is_string(),
        "{r}"
    );

    // Any client of the daemon sees the same kept outcome.
    let fetched = blocking(|| control.result("tools.result", json!({"callId": call_id}))).or_fail();
    assert_eq!(fetched["state"], "ok", "{fetched}");
    assert_eq!(fetched["response"]["result"], json!({"total": 42}));
    assert_eq!(fetched["response"]["callId"], call_id.as_str());
    second.close_stdin();
}
