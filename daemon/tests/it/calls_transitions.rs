//! Pending calls across session transitions and daemon shutdown (§C10.7, §D12.4): each
//! transition settles the session's calls with its error type and `details`, after the
//! transition's own event, without a `tool_cancel`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;
use crate::daemon_support;

use appduct_protocol::control::EventKind;
use calls_support::*;
use serde_json::json;

#[tokio::test]
async fn a_suspension_fails_the_call_and_a_resumed_session_serves_the_next_one() {
    let mut f = Fixture::new().await;
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "s1"}),
        )
        .await;
    let (wire, _) = f.device.tool_call().await;
    next_of(&mut f.events, EventKind::ToolCallStarted).await;
    f.device.app.drop_connection();
    let response = f.wire.response(1).await;
    assert_eq!(
        response["error"],
        json!({"code": -32000,
               "message": "pixel-8 lost its connection; the session is suspended until the app reconnects.",
               "data": {"type": "session_suspended", "callId": "s1",
                        "details": {"sessionId": f.device.session_id, "alias": "pixel-8",
                                    "suspendReason": "connection_lost"}}})
    );
    // The transition's event comes first.
    let kinds: Vec<EventKind> = drain(&mut f.events).iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        [EventKind::SessionSuspended, EventKind::ToolCallFinished]
    );

    // Resume, re-register; the old wire id is forgotten, a new call succeeds.
    let mut device = resume_device(&f.daemon, &f.device.session_id, &f.device.resume_token).await;
    device.register(&f.daemon, standard_tools()).await;
    device.result(&wire, json!("late")).await;
    f.wire
        .send(2, "tools.call", json!({"name": "echo", "callId": "s1"}))
        .await;
    let (fresh, _) = device.tool_call().await;
    device.result(&fresh, json!("after resume")).await;
    assert_eq!(f.wire.response(2).await["result"]["result"], "after resume");
    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[0]["errorType"], "session_suspended");
    let closed = device.answer_close();
    f.daemon.shutdown().await;
    closed.await.unwrap();
}

#[tokio::test]
async fn a_backgrounded_app_fails_the_call_with_the_background_message() {
    let mut f = Fixture::new().await;
    f.wire
        .send(1, "tools.call", json!({"name": "slow_task"}))
        .await;
    f.device.tool_call().await;
    f.device
        .app
        .close(Some(1001), "app_backgrounded")
        .await
        .unwrap();
    let response = f.wire.response(1).await;
    assert_eq!(
        response["error"]["message"],
        "The app on pixel-8 is in the background; bring it to the foreground and retry."
    );
    assert_eq!(
        response["error"]["data"]["details"]["suspendReason"],
        "app_backgrounded"
    );
    f.daemon.shutdown().await;
}

#[tokio::test]
async fn a_resume_that_replaces_the_socket_fails_calls_as_session_replaced() {
    let mut f = Fixture::new().await;
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "r1"}),
        )
        .await;
    f.device.tool_call().await;
    let replacement = resume_device(&f.daemon, &f.device.session_id, &f.device.resume_token).await;
    let response = f.wire.response(1).await;
    let error = &response["error"];
    assert_eq!(error["data"]["type"], "session_suspended");
    assert_eq!(
        error["data"]["details"],
        json!({"sessionId": f.device.session_id, "alias": "pixel-8",
               "reason": "session_replaced"})
    );
    // The old socket got its close and no tool_cancel.
    assert_eq!(
        f.device.close_frame().await,
        (1000, "session_replaced".to_owned())
    );
    f.device.app.close(Some(1000), "").await.unwrap();
    let closed = replacement.answer_close();
    f.daemon.shutdown().await;
    closed.await.unwrap();
}

#[tokio::test]
async fn a_revoke_fails_calls_as_unknown_session() {
    let mut f = Fixture::new().await;
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "v1"}),
        )
        .await;
    f.device.tool_call().await;
    let mut admin = Wire::new(&f.daemon);
    let revoked = admin
        .request(1, "sessions.revoke", json!({"selector": "pixel-8"}))
        .await;
    assert_eq!(revoked["result"]["revoked"], "session");
    let response = f.wire.response(1).await;
    assert_eq!(response["error"]["data"]["type"], "unknown_session");
    assert_eq!(response["error"]["data"]["callId"], "v1");
    assert_eq!(
        response["error"]["data"]["details"],
        json!({"sessionId": f.device.session_id, "reason": "revoked"})
    );
    assert_eq!(f.device.close_frame().await, (1000, "revoked".to_owned()));
    f.device.app.close(Some(1000), "").await.unwrap();
    let kinds: Vec<EventKind> = drain(&mut f.events).iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        [
            EventKind::ToolCallStarted,
            EventKind::SessionRevoked,
            EventKind::ToolCallFinished
        ]
    );
    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit[0]["errorType"], "unknown_session");
    f.daemon.shutdown().await;
}

#[tokio::test]
async fn shutdown_rejects_pending_calls_writes_their_responses_and_audits_them() {
    let mut f = Fixture::new().await;
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "slow_task", "callId": "z1"}),
        )
        .await;
    f.device.tool_call().await;
    let Fixture {
        dir,
        daemon,
        mut wire,
        device,
        mut events,
    } = f;
    let closed = device.answer_close();
    daemon.shutdown().await;
    let response = wire.response(1).await;
    assert_eq!(
        response["error"],
        json!({"code": -32000, "message": "The daemon is shutting down",
               "data": {"type": "session_not_active", "callId": "z1",
                        "details": {"reason": "daemon_shutdown"}}})
    );
    // No tool_cancel: the socket closes 1001.
    assert_eq!(closed.await.unwrap(), (1001, "daemon_shutdown".to_owned()));
    let finished = next_of(&mut events, EventKind::ToolCallFinished).await;
    assert_eq!(data(&finished)["errorType"], "session_not_active");
    let audit = read_audit(&dir.path().join("audit"));
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["callId"], "z1");
    assert_eq!(audit[0]["errorType"], "session_not_active");
}

/// A small deterministic generator, so a failing interleaving can be replayed from its seed.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Across seeded interleavings of claims, drops, revokes (freeing aliases for reuse) and calls
/// by alias or by id, a call's frame reaches exactly the session its selector resolved to, and
/// nothing reaches any other device.
#[tokio::test]
async fn calls_only_ever_reach_the_resolved_session() {
    // SEC-47 (daemon side): routed by session id, never by alias.
    for seed in [0x9e37_79b9_7f4a_7c15u64, 0x2545_f491_4f6c_dd1d, 7] {
        let dir = state_dir();
        let daemon = appduct_daemon::daemon::Daemon::start(
            appduct_daemon::daemon::DaemonOptions::for_tests(dir.path()),
        )
        .await
        .unwrap();
        let mut wire = Wire::new(&daemon);
        let mut rng = XorShift(seed);
        // Live devices (active or suspended) and their state.
        let mut devices: Vec<(Device, bool)> = Vec::new();
        let mut id = 0i64;
        let mut routed = 0;
        for _ in 0..40 {
            id += 1;
            match rng.below(6) {
                0 if devices.len() < 4 => {
                    let model = ["Pixel 8", "Galaxy S24"][rng.below(2)];
                    let device = connect_device(&daemon, model).await;
                    device.register(&daemon, standard_tools()).await;
                    devices.push((device, true));
                }
                1 if !devices.is_empty() => {
                    let i = rng.below(devices.len());
                    if devices[i].1 {
                        devices[i].0.app.drop_connection();
                        devices[i].1 = false;
                        let sessions = daemon.sessions().clone();
                        let sid = devices[i].0.session_id.clone();
                        daemon_support::until(move || {
                            sessions.summary(&sid).is_some_and(|s| {
                                s.state == appduct_protocol::control::SessionState::Suspended
                            })
                        })
                        .await;
                    }
                }
                2 if !devices.is_empty() => {
                    let i = rng.below(devices.len());
                    let (device, _) = devices.remove(i);
                    let r = wire
                        .request(
                            id,
                            "sessions.revoke",
                            json!({"selector": device.session_id}),
                        )
                        .await;
                    assert_eq!(r["result"]["revoked"], "session");
                }
                _ if !devices.is_empty() => {
                    let i = rng.below(devices.len());
                    let selector = if rng.below(2) == 0 {
                        devices[i].0.alias.clone()
                    } else {
                        devices[i].0.session_id.clone()
                    };
                    let described = wire
                        .request(id, "sessions.describe", json!({"selector": selector}))
                        .await;
                    let resolved = described["result"]["sessionId"]
                        .as_str()
                        .unwrap()
                        .to_owned();
                    id += 1;
                    wire.send(
                        id,
                        "tools.call",
                        json!({"selector": selector, "name": "echo"}),
                    )
                    .await;
                    let target = devices
                        .iter()
                        .position(|(d, _)| d.session_id == resolved)
                        .unwrap();
                    if devices[target].1 {
                        let (wire_id, _) = devices[target].0.tool_call().await;
                        devices[target].0.result(&wire_id, json!("here")).await;
                        let response = wire.response(id).await;
                        assert_eq!(response["result"]["sessionId"], resolved.as_str());
                        routed += 1;
                    } else {
                        let response = wire.response(id).await;
                        assert_eq!(response["error"]["data"]["type"], "session_suspended");
                    }
                    for (device, active) in &mut devices {
                        if *active {
                            device.assert_no_frame();
                        }
                    }
                }
                _ => {}
            }
        }
        assert!(routed >= 3, "seed {seed:#x} routed only {routed} calls");
        let mut closing = Vec::new();
        for (device, active) in devices {
            if active {
                closing.push(device.answer_close());
            }
        }
        daemon.shutdown().await;
        for closed in closing {
            closed.await.unwrap();
        }
    }
}

/// §D12.4, §C13.1: a revoke while the call's `tool_call` write waits for room in the
/// device queue settles it `unknown_session` and stops the write: no `tool_call_started`,
/// and its frame never reaches the app.
#[tokio::test]
async fn a_revoke_during_a_blocked_write_sends_no_frame() {
    let mut f = Fixture::new().await;
    f.fill_device_queue().await;
    f.blocked_call(None, 100, json!({"name": "slow_task", "callId": "blocked"}))
        .await;
    let mut admin = Wire::new(&f.daemon);
    let revoked = admin
        .request(1, "sessions.revoke", json!({"selector": "pixel-8"}))
        .await;
    assert_eq!(revoked["result"]["revoked"], "session");
    let response = f.wire.response(100).await;
    assert_eq!(response["error"]["data"]["type"], "unknown_session");
    let blocked: Vec<EventKind> = drain(&mut f.events)
        .iter()
        .filter(|e| data(e)["callId"] == "blocked")
        .map(|e| e.kind())
        .collect();
    assert_eq!(blocked, [EventKind::ToolCallFinished]);
    // The app reads the 64 queued echoes, then the revoke's close: nothing else.
    for _ in 0..64 {
        let (_, frame) = f.device.tool_call().await;
        assert_eq!(frame["name"], "echo");
    }
    assert_eq!(f.device.close_frame().await, (1000, "revoked".to_owned()));
    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 65);
    f.daemon.shutdown().await;
}
