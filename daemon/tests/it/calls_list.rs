//! `calls.list` (§C8.40): every unsettled call daemon-wide, asked from another control
//! connection, with its state (`running`, `cancelling`), deadline and the app's last progress,
//! and gone once the call settles. The parked state is covered in `calls_approvals.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;

use calls_support::*;
use serde_json::json;

#[tokio::test]
async fn calls_in_flight_are_listed_with_state_deadline_and_last_progress() {
    let mut f = Fixture::new().await;
    let mut viewer = Wire::new(&f.daemon);
    let empty = viewer.request(1, "calls.list", json!({})).await;
    assert_eq!(empty["result"], json!({"calls": []}), "{empty}");

    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "c-1", "progress": true, "timeoutMs": 15000}),
        )
        .await;
    let (wire_id, _) = f.device.tool_call().await;
    f.device.progress(&wire_id, 0.5, "halfway").await;
    f.wire
        .notification("tool_call_progress", |p| p["message"] == "halfway")
        .await;

    let listed = viewer.request(2, "calls.list", json!({})).await;
    let calls = listed["result"]["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{listed}");
    let c = &calls[0];
    assert_eq!(c["callId"], "c-1");
    assert_eq!(c["wireId"], wire_id.as_str());
    assert_eq!(c["sessionId"], f.device.session_id.as_str());
    assert_eq!(c["alias"], "pixel-8");
    assert_eq!(c["tool"], "slow_task");
    assert_eq!(c["caller"], "cli", "the default caller");
    assert_eq!(c["state"], "running");
    assert_eq!(c["deadlineMs"], 15000);
    assert_eq!(
        c["progress"],
        json!({"progress": 0.5, "message": "halfway"})
    );
    assert!(c.get("approvalId").is_none(), "{c}");
    let started = c["startedAt"].as_str().unwrap();
    assert!(started.ends_with('Z') && started.len() == 24, "{started}");
    assert!(c["elapsedMs"].as_u64().is_some());
    let expires = c["expiresAt"].as_u64().unwrap();
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        expires > now_s && expires <= now_s + 16,
        "{expires} vs {now_s}"
    );

    // A requested cancel shows until the app answers.
    let cancel = viewer
        .request(3, "tools.cancel", json!({"callId": "c-1"}))
        .await;
    assert_eq!(cancel["result"]["cancelled"], true, "{cancel}");
    let (cancelled, _) = f.device.tool_cancel().await;
    assert_eq!(cancelled, wire_id);
    let listed = viewer.request(4, "calls.list", json!({})).await;
    assert_eq!(
        listed["result"]["calls"][0]["state"], "cancelling",
        "{listed}"
    );

    f.device
        .error(
            &wire_id,
            json!({"type": "tool_cancelled", "message": "stopped"}),
        )
        .await;
    let response = f.wire.response(1).await;
    assert_eq!(
        response["error"]["data"]["type"], "tool_cancelled",
        "{response}"
    );
    let listed = viewer.request(5, "calls.list", json!({})).await;
    assert_eq!(listed["result"], json!({"calls": []}), "{listed}");
    f.stop().await;
}

#[tokio::test]
async fn calls_list_takes_no_params() {
    let f = Fixture::new().await;
    let mut viewer = Wire::new(&f.daemon);
    let refused = viewer
        .request(1, "calls.list", json!({"state": "running"}))
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    f.stop().await;
}

#[tokio::test]
async fn a_parked_call_is_listed_as_awaiting_approval_until_decided() {
    let mut f = Fixture::with_config(
        |config| {
            crate::calls_support::slow_task_needs_an_operator(config);
        },
        standard_tools(),
    )
    .await;
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "p-1", "progress": true}),
        )
        .await;
    let note = f
        .wire
        .notification("tool_call_progress", |p| p["callId"] == "p-1")
        .await;
    let approval_id = note["params"]["approvalId"].as_str().unwrap().to_owned();
    let mut viewer = Wire::new(&f.daemon);
    let listed = viewer.request(1, "calls.list", json!({})).await;
    let c = &listed["result"]["calls"][0];
    assert_eq!(c["callId"], "p-1", "{listed}");
    assert_eq!(c["state"], "awaiting_approval");
    assert_eq!(c["approvalId"], approval_id.as_str());
    assert_eq!(c["deadlineMs"], 0, "not past policy yet");
    assert!(
        c.get("expiresAt").is_none() && c.get("progress").is_none(),
        "{c}"
    );
    f.device.assert_no_frame();

    let denied = viewer
        .request(
            2,
            "approvals.decide",
            json!({"approvalId": approval_id, "decision": "deny"}),
        )
        .await;
    assert_eq!(denied["result"]["decision"], "denied", "{denied}");
    let response = f.wire.response(1).await;
    assert_eq!(
        response["error"]["data"]["type"], "policy_denied",
        "{response}"
    );
    let listed = viewer.request(3, "calls.list", json!({})).await;
    assert_eq!(listed["result"], json!({"calls": []}), "{listed}");
    f.stop().await;
}

#[tokio::test]
async fn the_list_is_bounded_and_says_when_it_left_calls_out() {
    use appduct_protocol::limits::MAX_CALLS_LISTED;
    let mut f = Fixture::new().await;
    let total = i64::try_from(MAX_CALLS_LISTED).unwrap() + 1;
    for id in 1..=total {
        f.wire
            .send(
                id,
                "tools.call",
                json!({"name": "slow_task", "callId": format!("b-{id}"), "timeoutMs": 60000}),
            )
            .await;
    }
    let mut viewer = Wire::new(&f.daemon);
    // Every call is read and pending (the app reads none of them).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut asked = 100;
    loop {
        asked += 1;
        let status = viewer.request(asked, "daemon.status", json!({})).await;
        if status["result"]["pendingCalls"].as_i64() == Some(total) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status}");
        tokio::task::yield_now().await;
    }
    let listed = viewer.request(1, "calls.list", json!({})).await;
    let calls = listed["result"]["calls"].as_array().unwrap();
    assert_eq!(calls.len(), MAX_CALLS_LISTED);
    assert_eq!(listed["result"]["truncated"], true);
    // The oldest are listed: the newest call is the one left out.
    assert_eq!(calls[0]["callId"], "b-1");
    assert!(
        calls
            .iter()
            .all(|c| c["callId"] != format!("b-{total}").as_str())
    );
    f.stop().await;
}
