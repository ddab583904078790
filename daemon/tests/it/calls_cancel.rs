//! Deadlines and cancellation on a paused clock (§C10.3, §C10.6; §C8.10): the daemon's timer and
//! its `tool_cancel` with reason `timeout`, the cancel grace, repeated cancels, the race with a
//! result, and the connection-close path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;

use std::time::Duration;

use appduct_protocol::control::{EventKind, SessionState};
use calls_support::*;
use serde_json::json;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn a_caller_deadline_times_out_sends_tool_cancel_and_drops_the_late_answer() {
    let mut f = Fixture::new().await;
    let sent = Instant::now();
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "quick", "timeoutMs": 3000, "callId": "t1", "progress": true}),
        )
        .await;
    let (wire, _) = f.device.tool_call().await;
    let started = f.wire.notification("tool_call_started", |_| true).await;
    assert_eq!(started["params"]["deadlineMs"], 3000);
    // Progress never extends the deadline.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    f.device.progress(&wire, 0.9, "almost").await;

    let response = f.wire.response(1).await;
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_millis(3000) && waited < Duration::from_millis(3100),
        "{waited:?}"
    );
    assert_eq!(
        response["error"],
        json!({"code": -32000, "message": "\"quick\" on pixel-8 did not finish within 3000 ms",
               "data": {"type": "tool_timeout", "callId": "t1",
                        "details": {"deadlineMs": 3000}}})
    );
    assert_eq!(
        f.device.tool_cancel().await,
        (wire.clone(), "timeout".to_owned())
    );

    // The app's own answer to that cancel is dropped; a new call reusing the callId is not
    // settled by it.
    f.wire
        .send(2, "tools.call", json!({"name": "quick", "callId": "t1"}))
        .await;
    let (second, _) = f.device.tool_call().await;
    assert_ne!(second, wire);
    f.device
        .error(
            &wire,
            json!({"type": "tool_cancelled", "message": "stopped"}),
        )
        .await;
    f.device.result(&second, json!("fresh")).await;
    assert_eq!(f.wire.response(2).await["result"]["result"], "fresh");

    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[0]["outcome"], "error");
    assert_eq!(audit[0]["errorType"], "tool_timeout");
    assert!(audit[0]["durationMs"].as_u64().unwrap() >= 3000);
    assert_eq!(audit[1]["outcome"], "ok");
    f.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_declared_timeout_lets_an_eleven_second_tool_finish() {
    let mut f = Fixture::new().await;
    f.wire
        .send(1, "tools.call", json!({"name": "slow_task"}))
        .await;
    let (wire, _) = f.device.tool_call().await;
    let started = next_of(&mut f.events, EventKind::ToolCallStarted).await;
    assert_eq!(data(&started)["deadlineMs"], 20000);
    tokio::time::sleep(Duration::from_secs(11)).await;
    f.device.result(&wire, json!({"slow": true})).await;
    let response = f.wire.response(1).await;
    assert_eq!(response["result"]["result"], json!({"slow": true}));
    assert!(response["result"]["durationMs"].as_u64().unwrap() >= 11_000);
    f.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_default_deadline_is_ten_seconds() {
    let mut f = Fixture::new().await;
    let sent = Instant::now();
    f.wire.send(1, "tools.call", json!({"name": "echo"})).await;
    let (wire, _) = f.device.tool_call().await;
    // Moves the clock most of the way, so the helpers' own 10 s bound cannot fire first.
    tokio::time::sleep(Duration::from_secs(9)).await;
    f.device.assert_no_frame();
    let response = f.wire.response(1).await;
    assert_eq!(response["error"]["data"]["type"], "tool_timeout");
    assert_eq!(
        response["error"]["data"]["details"],
        json!({"deadlineMs": 10000})
    );
    assert!(sent.elapsed() >= Duration::from_secs(10));
    assert_eq!(f.device.tool_cancel().await, (wire, "timeout".to_owned()));
    f.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_silent_app_is_settled_by_the_daemon_after_the_cancel_grace() {
    let mut f = Fixture::new().await;
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "s1"}),
        )
        .await;
    let (wire, _) = f.device.tool_call().await;
    let cancel_at = Instant::now();
    for id in [2, 3] {
        let r = f
            .wire
            .request(id, "tools.cancel", json!({"callId": "s1"}))
            .await;
        assert_eq!(r["result"], json!({"cancelled": true}));
    }
    assert_eq!(
        f.device.tool_cancel().await,
        (wire.clone(), "client_cancelled".to_owned())
    );
    let response = f.wire.response(1).await;
    let waited = cancel_at.elapsed();
    assert!(
        waited >= Duration::from_millis(2000) && waited < Duration::from_millis(2100),
        "{waited:?}"
    );
    assert_eq!(
        response["error"],
        json!({"code": -32000,
               "message": "Call to \"slow_task\" on pixel-8 was cancelled (client_cancelled)",
               "data": {"type": "tool_cancelled", "callId": "s1",
                        "details": {"reason": "client_cancelled", "settledBy": "daemon"}}})
    );
    // Repeated cancels sent one frame; a cancel of a settled call is `false`.
    f.device.assert_no_frame();
    let r = f
        .wire
        .request(4, "tools.cancel", json!({"callId": "s1"}))
        .await;
    assert_eq!(r["result"], json!({"cancelled": false}));
    let audit = audit_lines(&f.daemon).await;
    assert_eq!(
        (&audit[0]["outcome"], &audit[0]["errorType"]),
        (&json!("cancelled"), &json!("tool_cancelled"))
    );
    f.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_result_that_wins_the_race_with_a_cancel_settles_ok() {
    let mut f = Fixture::new().await;
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "r1"}),
        )
        .await;
    let (wire, _) = f.device.tool_call().await;
    let r = f
        .wire
        .request(
            2,
            "tools.cancel",
            json!({"callId": "r1", "reason": "user_abort"}),
        )
        .await;
    assert_eq!(r["result"]["cancelled"], true);
    assert_eq!(
        f.device.tool_cancel().await,
        (wire.clone(), "user_abort".to_owned())
    );
    f.device.result(&wire, json!("finished first")).await;
    let response = f.wire.response(1).await;
    assert_eq!(response["result"]["result"], "finished first");
    let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
    assert_eq!(data(&finished)["outcome"], "ok");
    f.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_deadline_after_a_cancel_settles_as_cancelled_without_a_second_frame() {
    let mut f = Fixture::new().await;
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "d1", "timeoutMs": 1000}),
        )
        .await;
    let (wire, _) = f.device.tool_call().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    f.wire
        .request(2, "tools.cancel", json!({"callId": "d1"}))
        .await;
    assert_eq!(f.device.tool_cancel().await.0, wire);
    let response = f.wire.response(1).await;
    assert_eq!(response["error"]["data"]["type"], "tool_cancelled");
    assert_eq!(response["error"]["data"]["details"]["settledBy"], "daemon");
    f.device.assert_no_frame();
    f.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cancel_lookups_are_daemon_wide_and_respect_a_selector() {
    let mut f = Fixture::new().await;
    let other = connect_device(&f.daemon, "Galaxy S24").await;
    let unknown = f
        .wire
        .request(1, "tools.cancel", json!({"callId": "nothing"}))
        .await;
    assert_eq!(unknown["result"], json!({"cancelled": false}));
    f.wire
        .send(
            2,
            "tools.call",
            json!({"selector": "pixel-8", "name": "slow_task", "callId": "x1"}),
        )
        .await;
    let (wire, _) = f.device.tool_call().await;
    // Another session's selector: not this call.
    let elsewhere = f
        .wire
        .request(
            3,
            "tools.cancel",
            json!({"callId": "x1", "selector": other.session_id}),
        )
        .await;
    assert_eq!(elsewhere["result"], json!({"cancelled": false}));
    let bad = f
        .wire
        .request(
            4,
            "tools.cancel",
            json!({"callId": "x1", "selector": "nobody"}),
        )
        .await;
    assert_eq!(bad["error"]["data"]["type"], "unknown_session");
    let bad = f
        .wire
        .request(
            5,
            "tools.cancel",
            json!({"callId": "x1", "reason": "Not A Token"}),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32602);
    f.device.assert_no_frame();
    // No selector with two sessions connected is never ambiguous.
    let ok = f
        .wire
        .request(6, "tools.cancel", json!({"callId": "x1"}))
        .await;
    assert_eq!(ok["result"], json!({"cancelled": true}));
    assert_eq!(f.device.tool_cancel().await.0, wire);
    f.device
        .error(
            &wire,
            json!({"type": "tool_cancelled", "message": "ok, stopped"}),
        )
        .await;
    assert_eq!(f.wire.response(2).await["error"]["message"], "ok, stopped");
    let closed = other.answer_close();
    f.stop().await;
    closed.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn closing_the_issuing_connection_cancels_with_connection_closed() {
    let mut f = Fixture::new().await;
    let mut issuer = Wire::new(&f.daemon);
    issuer
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "c1"}),
        )
        .await;
    let (first, _) = f.device.tool_call().await;
    issuer
        .send(
            2,
            "tools.call",
            json!({"name": "slow_task", "callId": "c2"}),
        )
        .await;
    let (second, _) = f.device.tool_call().await;
    // c1 is cancelled first from another connection; the close then sends nothing more for it.
    let r = f
        .wire
        .request(1, "tools.cancel", json!({"callId": "c1"}))
        .await;
    assert_eq!(r["result"]["cancelled"], true);
    assert_eq!(
        f.device.tool_cancel().await,
        (first.clone(), "client_cancelled".to_owned())
    );
    issuer.close();
    assert_eq!(
        f.device.tool_cancel().await,
        (second.clone(), "connection_closed".to_owned())
    );
    // The app answers one; the other ends with the grace. Both are audited; no response is
    // written anywhere.
    f.device
        .error(
            &second,
            json!({"type": "tool_cancelled", "message": "stopped"}),
        )
        .await;
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
        outcomes.push((
            data(&finished)["callId"].clone(),
            data(&finished)["outcome"].clone(),
        ));
    }
    assert_eq!(
        outcomes,
        [
            (json!("c2"), json!("cancelled")),
            (json!("c1"), json!("cancelled"))
        ]
    );
    f.device.assert_no_frame();
    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 2);
    let pending = f.wire.request(9, "daemon.hello", json!({})).await;
    assert_eq!(pending["result"]["pendingCalls"], 0);
    f.stop().await;
}

/// A cancel recorded before the `tool_call` frame is written (§C10.6): the device queue holds
/// 64 frames and the app reads none, so the 65th call waits for room. The cancel answers
/// `true` at once, the write stops, the call settles `tool_cancelled` by the daemon, and no
/// frame of it ever reaches the app.
#[tokio::test]
async fn a_cancel_before_the_frame_is_written_stops_the_write() {
    let mut f = Fixture::new().await;
    f.fill_device_queue().await;
    f.blocked_call(None, 100, json!({"name": "slow_task", "callId": "blocked"}))
        .await;
    let r = f
        .wire
        .request(300, "tools.cancel", json!({"callId": "blocked"}))
        .await;
    assert_eq!(r["result"], json!({"cancelled": true}));
    // Settled while the app still reads nothing.
    let response = f.wire.response(100).await;
    assert_eq!(
        response["error"],
        json!({"code": -32000,
               "message": "Call to \"slow_task\" on pixel-8 was cancelled (client_cancelled)",
               "data": {"type": "tool_cancelled", "callId": "blocked",
                        "details": {"reason": "client_cancelled", "settledBy": "daemon"}}})
    );
    let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
    assert_eq!(data(&finished)["callId"], "blocked");
    assert_eq!(data(&finished)["outcome"], "cancelled");
    // Its frame never went out: the queue holds the 64 echoes and nothing after them.
    f.drain_device_queue().await;
    for id in 1..=64 {
        assert!(f.wire.response(id).await["result"].is_object());
    }
    f.device.assert_no_frame();
    let started: Vec<_> = drain(&mut f.events)
        .iter()
        .filter(|e| e.kind() == EventKind::ToolCallStarted)
        .map(|e| data(e)["callId"].clone())
        .collect();
    assert!(!started.contains(&json!("blocked")), "{started:?}");
    let audit = audit_lines(&f.daemon).await;
    let blocked: Vec<_> = audit.iter().filter(|r| r["callId"] == "blocked").collect();
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0]["outcome"], "cancelled");
    f.stop().await;
}

/// The same when the issuing connection closes during the blocked write (§C10.6): the call
/// settles `tool_cancelled` (reason `connection_closed`), audited, and its frame is never sent.
#[tokio::test]
async fn closing_the_issuer_during_a_blocked_write_sends_no_frame() {
    let mut f = Fixture::new().await;
    f.fill_device_queue().await;
    let mut issuer = Wire::new(&f.daemon);
    f.blocked_call(
        Some(&mut issuer),
        1,
        json!({"name": "slow_task", "callId": "closer"}),
    )
    .await;
    issuer.close();
    let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
    assert_eq!(data(&finished)["callId"], "closer");
    assert_eq!(data(&finished)["outcome"], "cancelled");
    f.drain_device_queue().await;
    for id in 1..=64 {
        assert!(f.wire.response(id).await["result"].is_object());
    }
    f.device.assert_no_frame();
    let audit = audit_lines(&f.daemon).await;
    let closer: Vec<_> = audit.iter().filter(|r| r["callId"] == "closer").collect();
    assert_eq!(closer.len(), 1);
    assert_eq!(closer[0]["errorType"], "tool_cancelled");
    f.stop().await;
}

/// §C8.10: `tools.cancel` returns immediately even when the app's queue is full; its
/// `tool_cancel` follows the queued frames, and the cancel grace runs from when it was queued.
#[tokio::test(start_paused = true)]
async fn tools_cancel_answers_at_once_while_the_device_queue_is_full() {
    let mut f = Fixture::new().await;
    f.fill_device_queue().await;
    let asked = Instant::now();
    let r = f
        .wire
        .request(100, "tools.cancel", json!({"callId": "q1"}))
        .await;
    assert_eq!(r["result"], json!({"cancelled": true}));
    assert_eq!(asked.elapsed(), Duration::ZERO);
    let mut wires = Vec::new();
    for _ in 0..64 {
        wires.push(f.device.tool_call().await.0);
    }
    let (cancelled, reason) = f.device.tool_cancel().await;
    assert_eq!(reason, "client_cancelled");
    assert!(wires.contains(&cancelled));
    for wire in wires.iter().filter(|w| **w != cancelled) {
        f.device.result(wire, json!(null)).await;
    }
    let response = f.wire.response(1).await;
    assert_eq!(response["error"]["data"]["type"], "tool_cancelled");
    assert_eq!(response["error"]["data"]["details"]["settledBy"], "daemon");
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(2000) && waited < Duration::from_millis(2100),
        "{waited:?}"
    );
    for id in 2..=64 {
        assert!(f.wire.response(id).await["result"].is_object());
    }
    f.device.assert_no_frame();
    f.stop().await;
}

/// §C10.1 step 8, §C10.3: a `tool_call` the app never makes room for is given up at the
/// effective deadline: `session_not_active` with `{sessionId, alias}`, audited, no
/// `tool_call_started`, and the frame is never sent.
#[tokio::test(start_paused = true)]
async fn a_write_the_app_never_makes_room_for_ends_at_the_deadline() {
    let mut f = Fixture::new().await;
    f.fill_device_queue().await;
    let sent = Instant::now();
    f.blocked_call(
        None,
        100,
        json!({"name": "slow_task", "callId": "stuck", "timeoutMs": 1000}),
    )
    .await;
    let response = f.wire.response(100).await;
    assert_eq!(sent.elapsed(), Duration::from_millis(1000));
    assert_eq!(
        response["error"]["data"],
        json!({"type": "session_not_active", "callId": "stuck",
               "details": {"sessionId": f.device.session_id, "alias": "pixel-8"}})
    );
    let stuck: Vec<EventKind> = drain(&mut f.events)
        .iter()
        .filter(|e| data(e)["callId"] == "stuck")
        .map(|e| e.kind())
        .collect();
    assert_eq!(stuck, [EventKind::ToolCallFinished]);
    f.drain_device_queue().await;
    for id in 1..=64 {
        assert!(f.wire.response(id).await["result"].is_object());
    }
    f.device.assert_no_frame();
    let audit = audit_lines(&f.daemon).await;
    let stuck: Vec<_> = audit.iter().filter(|r| r["callId"] == "stuck").collect();
    assert_eq!(stuck.len(), 1);
    assert_eq!(stuck[0]["errorType"], "session_not_active");
    f.stop().await;
}

/// §C8.10, §C10.6: a cancel whose `tool_cancel` could not be queued is not left recorded
/// as requested, so a later `tools.cancel` answers from the facts (`false`: no usable socket)
/// rather than "already under way". The window: the app broke the protocol while its queue
/// was full, so the daemon's close waits for room (at most 1 s) with the socket already
/// refusing frames and the session still active.
#[tokio::test]
async fn a_cancel_that_could_not_be_sent_is_not_kept_as_requested() {
    let mut f = Fixture::new().await;
    f.fill_device_queue().await;
    f.device.app.send_binary(1).await.unwrap();
    // Cancels queued before the daemon handled the binary frame wait for room (`true`); the
    // first `false` is a cancel the closing socket refused.
    let mut refused = None;
    for k in 1..=64 {
        let r = f
            .wire
            .request(300 + k, "tools.cancel", json!({"callId": format!("q{k}")}))
            .await;
        if r["result"] == json!({"cancelled": false}) {
            refused = Some(k);
            break;
        }
        assert_eq!(r["result"], json!({"cancelled": true}));
    }
    let k = refused.expect("the closing socket never refused a cancel");
    let summary = f.daemon.sessions().summary(&f.device.session_id).unwrap();
    assert_eq!(
        summary.state,
        SessionState::Active,
        "still inside the window"
    );
    let again = f
        .wire
        .request(400, "tools.cancel", json!({"callId": format!("q{k}")}))
        .await;
    assert_eq!(again["result"], json!({"cancelled": false}));
    f.stop().await;
}
