//! The engine on the wire: every close code and reason the daemon sends (§D11), the
//! validation order of §D6.2, keepalive (§D6), registries (§D8.3), app events, call
//! frames and `send_to_session`, and the daemon-level frame-limit vectors (§D15).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::engine_support;

use std::sync::Arc;
use std::time::Duration;

use appduct_daemon::device_socket::{AppEvent, Incoming, MemoryApp};
use appduct_daemon::events::SinceQuery;
use appduct_daemon::sessions::{CallFrame, CallsEnded, EngineOptions, SendFailure};
use appduct_protocol::control::{AppEventData, EventData, EventKind, SuspendReason, Transport};
use appduct_protocol::frames::{AppFrame, DaemonFrame, EventFrame, ToolCall, ToolCancel};
use appduct_protocol::limits::{MAX_MESSAGE_BYTES, MAX_REGISTRY_ENTRIES};
use engine_support::*;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

/// A claimed session whose first socket was closed by the daemon for `message`, asserting the
/// close and the suspension it causes (§D6.2: reasons 3–6 and oversize/binary suspend).
async fn acked_close(
    h: &mut Harness,
    send: impl AsyncFnOnce(&MemoryApp, &str),
    code: u16,
    reason: &str,
) {
    let mut c = h.claim(None).await;
    h.router.take();
    send(&c.app, &c.session_id).await;
    assert_closed(&mut c.app, code, reason).await;
    let e = h.event_of(EventKind::SessionSuspended).await;
    assert!(
        matches!(e.data, EventData::SessionSuspended(ref d) if d.reason == SuspendReason::ConnectionLost),
        "{reason}"
    );
    assert_eq!(
        h.router.take(),
        [RouterCall::Ended(
            c.session_id.clone(),
            CallsEnded::Suspended(SuspendReason::ConnectionLost)
        )]
    );
}

async fn text(app: &MemoryApp, v: Value) {
    app.send_text(v.to_string()).await.unwrap();
}

// ---- pre-claim ------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn pre_claim_timeout_closes_after_10_s_and_releases_the_slot() {
    // SEC-31 (silence, paused clock).
    let h = Harness::new();
    let guard = Arc::new(());
    let start = Instant::now();
    let mut app = h.connect_with_guard(Transport::Native, Arc::clone(&guard));
    // Pings are answered while waiting, and do not count as a claim.
    app.ping(b"hi".to_vec()).await.unwrap();
    assert_eq!(next(&mut app).await, AppEvent::Pong(b"hi".to_vec()));
    assert_closed(&mut app, 1008, "pre_claim_timeout").await;
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    settle().await;
    assert_eq!(Arc::strong_count(&guard), 1);
}

#[tokio::test(start_paused = true)]
async fn pre_claim_rejections_in_validation_order() {
    let h = Harness::new();
    let too_big_garbage = "x".repeat(MAX_MESSAGE_BYTES + 1);
    let cases: Vec<(Incoming, u16, &str)> = vec![
        (Incoming::Message(appduct_daemon::device_socket::WireMessage::Binary(4)), 1003, "binary_frame_not_supported"),
        // Size is checked before JSON.
        (Incoming::Message(appduct_daemon::device_socket::WireMessage::Text(too_big_garbage)), 1009, "message_too_big"),
        (Incoming::TooBig { size: 300_000 }, 1009, "message_too_big"),
        (Incoming::Message(appduct_daemon::device_socket::WireMessage::Text("nope".into())), 1008, "invalid_json"),
        (Incoming::Message(appduct_daemon::device_socket::WireMessage::Text("[1]".into())), 1008, "invalid_json"),
        (Incoming::Message(appduct_daemon::device_socket::WireMessage::Text(
            json!({"type": "tool_result", "session_id": "s", "id": "c", "result": 1}).to_string())), 1008, "expected_claim_or_resume"),
        (Incoming::Message(appduct_daemon::device_socket::WireMessage::Text(
            json!({"type": "session_claim", "protocol_version": 1, "session_id": "s", "token": "t"}).to_string())), 1008, "expected_claim_or_resume"),
        (Incoming::Message(appduct_daemon::device_socket::WireMessage::Text(
            json!({"type": "session_claim", "protocol_version": 2, "session_id": "s", "token": "t",
                   "device_model": "m".repeat(257)}).to_string())), 1008, "expected_claim_or_resume"),
        (Incoming::Message(appduct_daemon::device_socket::WireMessage::Text(
            json!({"type": "session_resume", "protocol_version": 2, "session_id": "s"}).to_string())), 1008, "expected_claim_or_resume"),
        (Incoming::Message(appduct_daemon::device_socket::WireMessage::Text(
            json!({"type": "session_claim", "protocol_version": 2, "session_id": "AAAAAAAAAAAAAAAA", "token": "t"}).to_string())), 1008, "unknown_session"),
    ];
    for (item, code, reason) in cases {
        let mut app = h.connect(Transport::Native);
        app.inject(item).await.unwrap();
        assert_closed(&mut app, code, reason).await;
        // The daemon drops the connection within the close wait.
        assert_eq!(next(&mut app).await, AppEvent::Gone, "{reason}");
    }
    assert_eq!(h.mgr.session_count(), 0);
    settle().await;
    assert_eq!(h.mgr.connection_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_ack_that_cannot_be_queued_leaves_the_link_claimable() {
    use appduct_daemon::device_socket::OUTGOING_QUEUE;
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    let mut app = h.connect(Transport::Native);
    // A peer that never reads: the engine's pongs fill its outgoing queue.
    for _ in 0..=OUTGOING_QUEUE {
        app.ping(Vec::new()).await.unwrap();
    }
    text(&app, claim_frame(&link.session_id, &token, None)).await;
    // Still not reading: the last pong gives up after 1 s, the claim is processed, and the
    // close cannot be queued either.
    for _ in 0..4 {
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
    }
    let mut pongs = 0;
    loop {
        match tokio::time::timeout(WAIT, app.recv()).await.unwrap() {
            AppEvent::Pong(_) => pongs += 1,
            // Not even the 1011 send_failed close fits, so the connection is dropped.
            AppEvent::Terminated => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(pongs, OUTGOING_QUEUE);
    assert_eq!(h.mgr.session_count(), 0);
    assert_eq!(h.mgr.pending_links(), 1);
    let mut app = h.connect(Transport::Native);
    text(&app, claim_frame(&link.session_id, &token, None)).await;
    assert_eq!(expect_text(&mut app).await["type"], "session_ack");
    h.event_of(EventKind::SessionClaimed).await;
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_leaves_before_claiming_changes_nothing() {
    let mut h = Harness::new();
    let (link, _) = h.link(json!({}));
    let mut app = h.connect(Transport::Native);
    app.close(Some(1000), "").await.unwrap();
    let mut other = h.connect(Transport::Native);
    other.drop_connection();
    settle().await;
    assert_eq!(h.mgr.connection_count(), 0);
    assert_eq!(h.mgr.pending_links(), 1);
    assert!(h.mgr.resolve(Some(&link.session_id)).is_err());
    let kinds: Vec<EventKind> = h.drain_events().iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, [EventKind::LinkCreated]);
}

// ---- after the ack --------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn acked_rejections_close_and_suspend() {
    let mut h = Harness::new();
    acked_close(
        &mut h,
        async |app, _| app.send_binary(10).await.unwrap(),
        1003,
        "binary_frame_not_supported",
    )
    .await;
    acked_close(
        &mut h,
        async |app, _| {
            app.inject(Incoming::TooBig { size: 400_000 })
                .await
                .unwrap()
        },
        1009,
        "message_too_big",
    )
    .await;
    acked_close(
        &mut h,
        async |app, _| {
            app.send_text("x".repeat(MAX_MESSAGE_BYTES + 1))
                .await
                .unwrap()
        },
        1009,
        "message_too_big",
    )
    .await;
    acked_close(
        &mut h,
        async |app, _| app.send_text("{").await.unwrap(),
        1008,
        "invalid_json",
    )
    .await;
    acked_close(
        &mut h,
        async |app, _| app.send_text("\"str\"").await.unwrap(),
        1008,
        "invalid_json",
    )
    .await;
    // A second claim or resume, a missing type, an unknown type.
    acked_close(
        &mut h,
        async |app, sid| text(app, claim_frame(sid, "t", None)).await,
        1008,
        "unknown_message_type",
    )
    .await;
    acked_close(
        &mut h,
        async |app, sid| text(app, resume_frame(sid, "t")).await,
        1008,
        "unknown_message_type",
    )
    .await;
    acked_close(
        &mut h,
        async |app, sid| text(app, json!({"session_id": sid})).await,
        1008,
        "unknown_message_type",
    )
    .await;
    // The type check comes before the session check.
    acked_close(
        &mut h,
        async |app, _| text(app, json!({"type": "nope", "session_id": "other"})).await,
        1008,
        "unknown_message_type",
    )
    .await;
    // The session check comes before the field guard.
    acked_close(
        &mut h,
        async |app, _| text(app, json!({"type": "tool_result", "session_id": "other"})).await,
        1008,
        "session_mismatch",
    )
    .await;
    // Field guards: registry frames → invalid_registry, others → invalid_message.
    acked_close(&mut h, async |app, sid| text(app, json!({"type": "tool_registry_snapshot", "session_id": sid, "tools": [{"name": "a b", "description": "d"}]})).await, 1008, "invalid_registry").await;
    acked_close(
        &mut h,
        async |app, _| {
            text(
                app,
                json!({"type": "event_registry_delta", "operation": "remove", "name": "e"}),
            )
            .await
        },
        1008,
        "invalid_registry",
    )
    .await;
    acked_close(
        &mut h,
        async |app, sid| {
            text(
                app,
                json!({"type": "event", "session_id": sid, "name": "", "ts": 1}),
            )
            .await
        },
        1008,
        "invalid_message",
    )
    .await;
    acked_close(
        &mut h,
        async |app, sid| {
            text(
                app,
                json!({"type": "tool_result", "session_id": sid, "id": "c"}),
            )
            .await
        },
        1008,
        "invalid_message",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn pings_from_the_app_are_answered_after_the_ack() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    c.app.ping(b"x".to_vec()).await.unwrap();
    assert_eq!(next(&mut c.app).await, AppEvent::Pong(b"x".to_vec()));
}

// ---- keepalive ------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_silent_client_is_terminated_three_intervals_after_the_ack() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    let acked_at = Instant::now();
    let mut pings = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, c.app.recv()).await.unwrap() {
            AppEvent::Ping(_) => pings.push(acked_at.elapsed()),
            AppEvent::Terminated => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        pings,
        [Duration::from_secs(15), Duration::from_secs(30)],
        "a ping every interval"
    );
    assert_eq!(
        acked_at.elapsed(),
        Duration::from_secs(45),
        "no close frame, 3 intervals"
    );
    let e = h.event_of(EventKind::SessionSuspended).await;
    assert!(matches!(
        e.data,
        EventData::SessionSuspended(ref d) if d.reason == SuspendReason::ConnectionLost
    ));
}

#[tokio::test(start_paused = true)]
async fn a_pong_resets_the_missed_count() {
    let options = EngineOptions {
        keepalive_interval_s: 5,
        ..EngineOptions::default()
    };
    let mut h = Harness::with_options(options, 16);
    let mut c = h.claim(None).await;
    let acked_at = Instant::now();
    let mut n = 0;
    loop {
        match tokio::time::timeout(WAIT, c.app.recv()).await.unwrap() {
            AppEvent::Ping(p) => {
                n += 1;
                // Answer only the second ping: 5 s unanswered, 10 s missed=1 then answered,
                // 15 s ping, 20 s missed=1, 25 s missed=2 → terminated.
                if n == 2 {
                    c.app.pong(p).await.unwrap();
                }
            }
            AppEvent::Terminated => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(acked_at.elapsed(), Duration::from_secs(25));
    assert_eq!(c.ack["keepalive_interval_s"], 5);
    h.event_of(EventKind::SessionSuspended).await;
}

// ---- registries -----------------------------------------------------------------------------

fn tool(name: &str) -> Value {
    json!({"name": name, "description": format!("{name} tool")})
}

#[tokio::test(start_paused = true)]
async fn registry_snapshots_replace_and_deltas_upsert_or_remove() {
    let mut h = Harness::new();
    let c = h.claim(None).await;
    let sid = c.session_id.as_str();
    let counts = async |h: &mut Harness| match h.next_event().await.data {
        EventData::ToolsChanged(d) => d.tool_count,
        EventData::EventsChanged(d) => d.event_count + 1000,
        other => panic!("{other:?}"),
    };
    text(
        &c.app,
        json!({"type": "tool_registry_snapshot", "session_id": sid,
                        "tools": [tool("b"), tool("a"), {"name": "c", "description": "d",
                                  "input_schema": {"z": 1, "a": 2}, "timeoutMs": 5}]}),
    )
    .await;
    assert_eq!(counts(&mut h).await, 3);
    let names: Vec<String> = h
        .mgr
        .tools_of(sid)
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["a", "b", "c"], "listed in code-point order");
    // Schemas are kept as received (key order), unknown fields are not stored.
    let c_tool = h.mgr.tool_of(sid, "c").unwrap();
    assert_eq!(
        c_tool.to_value(),
        json!({"name": "c", "description": "d", "input_schema": {"z": 1, "a": 2}})
    );
    assert_eq!(
        serde_json::to_string(&c_tool.input_schema).unwrap(),
        r#"{"z":1,"a":2}"#
    );
    text(
        &c.app,
        json!({"type": "tool_registry_delta", "session_id": sid, "operation": "upsert",
                        "tool": {"name": "a", "description": "replaced"}}),
    )
    .await;
    assert_eq!(counts(&mut h).await, 3);
    assert_eq!(h.mgr.tool_of(sid, "a").unwrap().description, "replaced");
    text(&c.app, json!({"type": "tool_registry_delta", "session_id": sid, "operation": "remove", "name": "b"})).await;
    assert_eq!(counts(&mut h).await, 2);
    text(&c.app, json!({"type": "tool_registry_delta", "session_id": sid, "operation": "remove", "name": "zzz"})).await;
    assert_eq!(
        counts(&mut h).await,
        2,
        "removing an unknown name is a no-op"
    );
    text(
        &c.app,
        json!({"type": "tool_registry_snapshot", "session_id": sid, "tools": []}),
    )
    .await;
    assert_eq!(counts(&mut h).await, 0);

    text(&c.app, json!({"type": "event_registry_snapshot", "session_id": sid,
                        "events": [{"name": "cart.item_added", "description": "d", "payload_schema": {"type": "object"}}]})).await;
    assert_eq!(counts(&mut h).await, 1001);
    text(
        &c.app,
        json!({"type": "event_registry_delta", "session_id": sid, "operation": "upsert",
                        "event": {"name": "a b", "description": "d"}}),
    )
    .await;
    assert_eq!(counts(&mut h).await, 1002);
    text(&c.app, json!({"type": "event_registry_delta", "session_id": sid, "operation": "remove", "name": "cart.item_added"})).await;
    assert_eq!(counts(&mut h).await, 1001);
    let events = h.mgr.events_of(sid).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].name, "a b");
    assert_eq!(h.mgr.list()[0].event_count, 1);
}

#[tokio::test(start_paused = true)]
async fn a_rejected_registry_frame_leaves_the_registry_unchanged() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    let sid = c.session_id.clone();
    text(
        &c.app,
        json!({"type": "tool_registry_snapshot", "session_id": sid, "tools": [tool("keep")]}),
    )
    .await;
    h.event_of(EventKind::ToolsChanged).await;
    text(
        &c.app,
        json!({"type": "tool_registry_snapshot", "session_id": sid,
                        "tools": [tool("x"), tool("x")]}),
    )
    .await;
    assert_closed(&mut c.app, 1008, "invalid_registry").await;
    h.event_of(EventKind::SessionSuspended).await;
    let names: Vec<String> = h
        .mgr
        .tools_of(&sid)
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["keep"]);
}

#[tokio::test(start_paused = true)]
async fn the_registry_cap_is_2048_per_kind() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    let sid = c.session_id.clone();
    let full: Vec<Value> = (0..MAX_REGISTRY_ENTRIES)
        .map(|i| tool(&format!("t{i}")))
        .collect();
    text(
        &c.app,
        json!({"type": "tool_registry_snapshot", "session_id": sid, "tools": full}),
    )
    .await;
    assert!(matches!(
        h.event_of(EventKind::ToolsChanged).await.data,
        EventData::ToolsChanged(ref d) if d.tool_count == 2048
    ));
    // Replacing an existing name at the cap is fine.
    text(&c.app, json!({"type": "tool_registry_delta", "session_id": sid, "operation": "upsert", "tool": tool("t7")})).await;
    h.event_of(EventKind::ToolsChanged).await;
    text(&c.app, json!({"type": "tool_registry_delta", "session_id": sid, "operation": "upsert", "tool": tool("one_more")})).await;
    assert_closed(&mut c.app, 1008, "invalid_registry").await;
    h.event_of(EventKind::SessionSuspended).await;
    assert_eq!(h.mgr.tools_of(&sid).unwrap().len(), 2048);
    assert!(h.mgr.tool_of(&sid, "one_more").is_none());

    // Events have their own cap.
    let (mut app, _) = h.resume(Transport::Native, &sid, &c.resume_token).await;
    h.event_of(EventKind::SessionResumed).await;
    let events: Vec<Value> = (0..MAX_REGISTRY_ENTRIES)
        .map(|i| json!({"name": format!("e{i}"), "description": "d"}))
        .collect();
    text(
        &app,
        json!({"type": "event_registry_snapshot", "session_id": sid, "events": events}),
    )
    .await;
    h.event_of(EventKind::EventsChanged).await;
    text(
        &app,
        json!({"type": "event_registry_delta", "session_id": sid, "operation": "upsert",
                      "event": {"name": "extra", "description": "d"}}),
    )
    .await;
    assert_closed(&mut app, 1008, "invalid_registry").await;
    assert_eq!(h.mgr.events_of(&sid).unwrap().len(), 2048);
}

// ---- app events -----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn event_frames_become_app_events_in_causal_order() {
    let mut h = Harness::new();
    let (link, token) = h.link(json!({}));
    let mut app = h.connect(Transport::Native);
    text(&app, claim_frame(&link.session_id, &token, Some("Pixel 8"))).await;
    expect_text(&mut app).await;
    let sid = link.session_id.as_str();
    text(
        &app,
        json!({"type": "tool_registry_snapshot", "session_id": sid, "tools": []}),
    )
    .await;
    text(
        &app,
        json!({"type": "event", "session_id": sid, "name": "checkout_completed",
                      "payload": {"orderId": "A-17"}, "ts": 1_764_493_923_101_u64}),
    )
    .await;
    text(
        &app,
        json!({"type": "event", "session_id": sid, "name": "no_payload", "ts": 2.5}),
    )
    .await;
    // A lone surrogate is read as U+FFFD, not rejected.
    app.send_text(format!(
        r#"{{"type":"event","session_id":"{sid}","name":"cut\ud83d","ts":3}}"#
    ))
    .await
    .unwrap();
    let mut kinds = Vec::new();
    let mut app_events = Vec::new();
    while app_events.len() < 3 {
        let e = h.next_event().await;
        kinds.push(e.kind());
        if e.kind() == EventKind::AppEvent {
            app_events.push(e);
        }
    }
    assert_eq!(
        kinds,
        [
            EventKind::LinkCreated,
            EventKind::SessionClaimed,
            EventKind::ToolsChanged,
            EventKind::AppEvent,
            EventKind::AppEvent,
            EventKind::AppEvent
        ]
    );
    assert_eq!(
        serde_json::to_value(&app_events[0]).unwrap(),
        json!({"kind": "app_event", "sessionId": sid, "alias": "pixel-8", "ts": START_MS, "seq": 1,
               "data": {"name": "checkout_completed", "payload": {"orderId": "A-17"}, "ts": 1_764_493_923_101_u64}})
    );
    assert_eq!(
        serde_json::to_value(&app_events[1]).unwrap()["data"],
        json!({"name": "no_payload", "payload": null, "ts": 2.5})
    );
    assert_eq!(app_events[2].seq, 3);
    assert!(matches!(
        &app_events[2].data,
        EventData::AppEvent(AppEventData::Full { name, .. }) if name == "cut\u{FFFD}"
    ));
    let r = h.bus.events_since(sid, &SinceQuery::default()).unwrap();
    assert_eq!(r.events.len(), 3);
    assert_eq!(r.cursor, 3);
}

// ---- calls ----------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn call_frames_reach_the_router_and_daemon_frames_reach_the_app() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    let sid = c.session_id.clone();
    h.router.take();
    let call = DaemonFrame::ToolCall(ToolCall::new(
        sid.clone(),
        "call_AAECAwQFBgcICQoLDA0ODw",
        "cart_total",
        Map::new(),
    ));
    h.mgr.send_to_session(&sid, &call).await.unwrap();
    assert_eq!(expect_text(&mut c.app).await, call.to_value());
    for frame in [
        json!({"type": "tool_call_progress", "session_id": sid, "id": "call_AAECAwQFBgcICQoLDA0ODw", "progress": 0.5}),
        json!({"type": "tool_result", "session_id": sid, "id": "call_AAECAwQFBgcICQoLDA0ODw", "result": null}),
        json!({"type": "tool_error", "session_id": sid, "id": "unknown",
               "error": {"type": "tool_cancelled", "message": "m"}}),
    ] {
        text(&c.app, frame).await;
    }
    // Synchronise on a later frame's event.
    text(
        &c.app,
        json!({"type": "event", "session_id": sid, "name": "sync", "ts": 0}),
    )
    .await;
    h.event_of(EventKind::AppEvent).await;
    let seen = h.router.take();
    assert_eq!(seen.len(), 3);
    let ids: Vec<&str> = seen
        .iter()
        .map(|c| match c {
            RouterCall::Frame(s, f) => {
                assert_eq!(s, &sid);
                f.wire_id()
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        ids,
        [
            "call_AAECAwQFBgcICQoLDA0ODw",
            "call_AAECAwQFBgcICQoLDA0ODw",
            "unknown"
        ]
    );
    assert!(matches!(
        &seen[0],
        RouterCall::Frame(_, CallFrame::Progress(_))
    ));
    assert!(
        matches!(&seen[1], RouterCall::Frame(_, CallFrame::Result(r)) if r.result == Some(serde_json::Value::Null))
    );
    assert!(matches!(
        &seen[2],
        RouterCall::Frame(_, CallFrame::Error(_))
    ));

    let cancel = DaemonFrame::ToolCancel(ToolCancel::new(
        sid.clone(),
        "call_AAECAwQFBgcICQoLDA0ODw",
        "client_cancelled",
    ));
    h.mgr.send_to_session(&sid, &cancel).await.unwrap();
    assert_eq!(expect_text(&mut c.app).await["type"], "tool_cancel");
}

#[tokio::test(start_paused = true)]
async fn without_a_router_call_frames_are_dropped_and_the_socket_stays_open() {
    let clock = appduct_daemon::clock::ManualClock::new(START_MS);
    let bus = appduct_daemon::events::EventBus::new(Arc::new(clock.clone()), 8);
    let mgr = appduct_daemon::sessions::SessionManager::new(
        EngineOptions::default(),
        bus.clone(),
        Arc::new(clock),
        Arc::new(appduct_daemon::links::StaticLinkEnv::default()),
    );
    let mut events = bus.subscribe_all();
    let link = mgr
        .create_link(&appduct_protocol::control::LinkCreateParams::default())
        .unwrap();
    let token = appduct_protocol::bootstrap::decode(&link.deep_link_payload)
        .unwrap()
        .token
        .to_base64url();
    let (socket, mut app) = appduct_daemon::device_socket::memory_device_pair();
    mgr.spawn_connection(
        socket,
        Transport::Native,
        Instant::now() + Duration::from_secs(10),
        (),
    );
    text(&app, claim_frame(&link.session_id, &token, None)).await;
    expect_text(&mut app).await;
    let sid = link.session_id.as_str();
    text(
        &app,
        json!({"type": "tool_result", "session_id": sid, "id": "c", "result": 1}),
    )
    .await;
    text(
        &app,
        json!({"type": "event", "session_id": sid, "name": "after", "ts": 0}),
    )
    .await;
    loop {
        let e = events.recv().await.unwrap();
        if e.kind() == EventKind::AppEvent {
            break;
        }
        assert_ne!(e.kind(), EventKind::SessionSuspended);
    }
    assert_eq!(app.try_recv(), None);
}

#[tokio::test(start_paused = true)]
async fn send_to_session_failures() {
    let mut h = Harness::new();
    let mut c = h.claim(None).await;
    let sid = c.session_id.clone();
    let call = |args: Map<String, Value>| {
        DaemonFrame::ToolCall(ToolCall::new(sid.clone(), "call_x", "t", args))
    };
    let mut big = Map::new();
    big.insert("blob".into(), Value::String("x".repeat(MAX_MESSAGE_BYTES)));
    assert!(matches!(
        h.mgr.send_to_session(&sid, &call(big)).await,
        Err(SendFailure::TooLarge(_))
    ));
    assert_eq!(c.app.try_recv(), None, "nothing sent");
    assert_eq!(
        h.mgr
            .send_to_session("AAAAAAAAAAAAAAAA", &call(Map::new()))
            .await,
        Err(SendFailure::UnknownSession)
    );
    c.app.close(Some(1001), "app_backgrounded").await.unwrap();
    h.event_of(EventKind::SessionSuspended).await;
    assert_eq!(
        h.mgr.send_to_session(&sid, &call(Map::new())).await,
        Err(SendFailure::Suspended(SuspendReason::AppBackgrounded))
    );
}

// ---- frame limits (§D15) ----------------------------------------------------------------

fn conformance_dir() -> std::path::PathBuf {
    match std::env::var_os("APPDUCT_CONFORMANCE_DIR") {
        Some(d) => d.into(),
        None => concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../protocol/tests/vectors/appduct-v2"
        )
        .into(),
    }
}

#[tokio::test(start_paused = true)]
async fn frame_limit_vectors_against_the_in_memory_daemon() {
    let path = conformance_dir().join("frame-limits.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(file["limitBytes"], MAX_MESSAGE_BYTES as u64);
    let vectors = file["vectors"].as_array().unwrap();
    assert!(!vectors.is_empty());
    let mut h = Harness::new();
    for v in vectors {
        let name = v["name"].as_str().unwrap();
        let frame_bytes = v["frameBytes"].as_u64().unwrap() as usize;
        let filler = v["filler"].as_str().unwrap();
        let mut c = h.claim(None).await;
        let build = |payload: String| {
            AppFrame::Event(
                EventFrame::new(
                    c.session_id.clone(),
                    "frame_limit",
                    1_764_494_412_345_u64.into(),
                )
                .with_payload(Some(Value::String(payload))),
            )
            .encode()
        };
        let gap = frame_bytes - build(String::new()).len();
        let count = gap / filler.len();
        let frame = build(format!(
            "{}{}",
            filler.repeat(count),
            "a".repeat(gap - count * filler.len())
        ));
        assert_eq!(frame.len(), frame_bytes, "{name}");
        c.app.send_text(frame).await.unwrap();
        if v["sent"].as_bool().unwrap() {
            let e = h.event_of(EventKind::AppEvent).await;
            assert_eq!(
                e.session_id.as_deref(),
                Some(c.session_id.as_str()),
                "{name}"
            );
        } else {
            assert_closed(&mut c.app, 1009, "message_too_big").await;
            h.event_of(EventKind::SessionSuspended).await;
        }
    }
}
