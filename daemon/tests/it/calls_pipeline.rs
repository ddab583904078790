//! The `tools.call` pipeline against the composed daemon and in-memory devices (§C10.1, §C10.5;
//! §C8.9, §C10.2): the round trip, exact correlation by callId and wire id, concurrent calls,
//! progress ordering, app errors verbatim, and every step's failure with its audit and frame
//! behaviour.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::calls_support;

use appduct_protocol::control::EventKind;
use calls_support::*;
use serde_json::{Value, json};

#[tokio::test]
async fn a_call_round_trips_with_its_call_id_and_is_audited_and_emitted() {
    let mut f = Fixture::new().await;
    let args = json!({"b": 1, "a": {"d": [3, {"z": true, "y": null}], "c": "é"}});
    f.wire
        .send(1, "tools.call", json!({"name": "echo", "args": args}))
        .await;
    let (wire_id, frame) = f.device.tool_call().await;
    assert_eq!(frame["name"], "echo");
    assert_eq!(frame["args"], args);

    let started = next_of(&mut f.events, EventKind::ToolCallStarted).await;
    assert_eq!(
        started.session_id.as_deref(),
        Some(f.device.session_id.as_str())
    );
    assert_eq!(started.alias.as_deref(), Some("pixel-8"));
    assert_eq!(started.seq, 0);
    // Without a caller callId the minted callId is the wire id.
    assert_eq!(
        data(&started),
        json!({"name": "echo", "callId": wire_id, "wireId": wire_id, "caller": "cli",
               "deadlineMs": 10000})
    );

    f.device.result(&wire_id, json!({"echoed": true})).await;
    let response = f.wire.response(1).await;
    let result = &response["result"];
    assert_eq!(
        keys(result),
        ["result", "callId", "sessionId", "alias", "durationMs"]
    );
    assert_eq!(result["result"], json!({"echoed": true}));
    assert_eq!(result["callId"], wire_id.as_str());
    assert_eq!(result["sessionId"], f.device.session_id.as_str());
    assert_eq!(result["alias"], "pixel-8");
    assert!(result["durationMs"].is_u64());

    let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
    assert_eq!(
        data(&finished),
        json!({"name": "echo", "callId": wire_id, "caller": "cli",
               "durationMs": result["durationMs"], "outcome": "ok"})
    );

    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 1);
    let record = &audit[0];
    assert_eq!(
        keys(record),
        [
            "ts",
            "callId",
            "sessionId",
            "alias",
            "tool",
            "argsSha256",
            "outcome",
            "durationMs",
            "caller"
        ]
    );
    assert_eq!(record["callId"], wire_id.as_str());
    assert_eq!(record["tool"], "echo");
    // The second vector of §C12.2.
    assert_eq!(
        record["argsSha256"],
        "02172be57d57ea7b7494626b319ee00bdef9f61503b51b3c24bacb0032a3898e"
    );
    assert_eq!(record["outcome"], "ok");
    assert_eq!(record["durationMs"], result["durationMs"]);
    assert!(record["ts"].as_str().unwrap().ends_with('Z'));
    f.stop().await;
}

#[tokio::test]
async fn raw_arguments_never_reach_the_audit_log_or_events_log() {
    let mut f = Fixture::new().await;
    f.wire
        .send(
            1,
            "tools.call",
            json!({"name": "echo", "args": {"password": "hunter2-secret"}}),
        )
        .await;
    let (wire_id, _) = f.device.tool_call().await;
    f.device.result(&wire_id, Value::Null).await;
    let response = f.wire.response(1).await;
    // `null` results pass through verbatim.
    assert_eq!(response["result"]["result"], Value::Null);
    // An omitted `args` is `{}`: the first vector of §C12.2.
    f.wire.send(2, "tools.call", json!({"name": "echo"})).await;
    let (wire_id, frame) = f.device.tool_call().await;
    assert_eq!(frame["args"], json!({}));
    f.device.result(&wire_id, json!(1)).await;
    f.wire.response(2).await;

    let audit = audit_lines(&f.daemon).await;
    assert_eq!(
        audit[1]["argsSha256"],
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    );
    let text = raw_audit(&f.dir.path().join("audit"));
    assert!(!text.contains("hunter2"), "{text}");
    let dir = f.stop().await;
    let events_log = std::fs::read_to_string(dir.path().join("events.log")).unwrap();
    assert!(events_log.contains("tool_call_finished"));
    assert!(!events_log.contains("hunter2"));
}

/// The example of §C10.2 and its required tests.
#[tokio::test]
async fn two_concurrent_calls_of_one_tool_never_cross() {
    let mut f = Fixture::new().await;
    let sid = f.device.session_id.clone();
    f.wire
        .send(
            1,
            "tools.call",
            json!({"selector": sid, "name": "slow_task", "callId": "a", "progress": true}),
        )
        .await;
    let (wire_a, frame_a) = f.device.tool_call().await;
    f.wire
        .send(
            2,
            "tools.call",
            json!({"selector": sid, "name": "slow_task", "callId": "b", "progress": true}),
        )
        .await;
    let (wire_b, frame_b) = f.device.tool_call().await;
    assert_ne!(wire_a, wire_b);
    for frame in [&frame_a, &frame_b] {
        let text = frame.to_string();
        assert_ne!(frame["id"], "a");
        assert_ne!(frame["id"], "b");
        assert!(!text.contains("\"a\"") && !text.contains("\"b\""), "{text}");
    }

    let started_a = f
        .wire
        .notification("tool_call_started", |p| p["callId"] == "a")
        .await;
    assert_eq!(started_a["params"]["requestId"], 1);
    assert_eq!(started_a["params"]["deadlineMs"], 20000);
    assert_eq!(started_a["params"]["name"], "slow_task");
    assert_eq!(started_a["params"]["alias"], "pixel-8");
    let started_b = f
        .wire
        .notification("tool_call_started", |p| p["callId"] == "b")
        .await;
    assert_eq!(started_b["params"]["requestId"], 2);

    f.device.progress(&wire_b, 0.33, "a third").await;
    let progress_b = f.wire.notification("tool_call_progress", |_| true).await;
    assert_eq!(progress_b["params"]["callId"], "b");
    assert_eq!(progress_b["params"]["requestId"], 2);
    assert_eq!(progress_b["params"]["progress"], 0.33);

    let cancel = f
        .wire
        .request(
            3,
            "tools.cancel",
            json!({"callId": "b", "reason": "mcp_client_cancelled"}),
        )
        .await;
    assert_eq!(cancel["result"], json!({"cancelled": true}));
    let (cancelled, reason) = f.device.tool_cancel().await;
    assert_eq!(cancelled, wire_b);
    assert_eq!(reason, "mcp_client_cancelled");
    f.device
        .error(
            &wire_b,
            json!({"type": "tool_cancelled", "message": "Tool \"slow_task\" was cancelled."}),
        )
        .await;
    let b = f.wire.response(2).await;
    assert_eq!(
        b["error"],
        json!({"code": -32000, "message": "Tool \"slow_task\" was cancelled.",
               "data": {"type": "tool_cancelled", "callId": "b"}})
    );

    f.device.result(&wire_a, json!({"done": true})).await;
    let a = f.wire.response(1).await;
    assert_eq!(a["result"]["result"], json!({"done": true}));
    assert_eq!(a["result"]["callId"], "a");

    // Exactly one tool_cancel reached the app.
    f.device.assert_no_frame();
    // Per-call notifications of each call name only that call.
    for message in &f.wire.log {
        if message["method"] == "tool_call_progress" {
            assert_eq!(message["params"]["callId"], "b", "{message}");
        }
    }
    // Events and audit carry callIds, never wire ids in their place.
    let events = drain(&mut f.events);
    let finished: Vec<Value> = events
        .iter()
        .filter(|e| e.kind() == EventKind::ToolCallFinished)
        .map(data)
        .collect();
    assert_eq!(finished.len(), 2);
    assert_eq!(finished[0]["callId"], "b");
    assert_eq!(finished[0]["outcome"], "cancelled");
    assert_eq!(finished[0]["errorType"], "tool_cancelled");
    assert_eq!(finished[1]["callId"], "a");
    let started: Vec<Value> = events
        .iter()
        .filter(|e| e.kind() == EventKind::ToolCallStarted)
        .map(data)
        .collect();
    assert_eq!(started.len(), 2);
    assert_eq!(
        (&started[0]["callId"], &started[0]["wireId"]),
        (&json!("a"), &json!(wire_a))
    );
    assert_eq!(
        (&started[1]["callId"], &started[1]["wireId"]),
        (&json!("b"), &json!(wire_b))
    );
    let audit = audit_lines(&f.daemon).await;
    let ids: Vec<&Value> = audit.iter().map(|r| &r["callId"]).collect();
    assert_eq!(ids, [&json!("b"), &json!("a")]);
    assert_eq!(audit[0]["outcome"], "cancelled");
    assert_eq!(audit[0]["errorType"], "tool_cancelled");
    f.stop().await;
}

#[tokio::test]
async fn three_concurrent_calls_answered_out_of_order_each_get_their_own_result() {
    let mut f = Fixture::new().await;
    let mut wires = Vec::new();
    for (id, call_id) in [(1, "c1"), (2, "c2"), (3, "c3")] {
        f.wire
            .send(
                id,
                "tools.call",
                json!({"name": "echo", "callId": call_id, "args": {"n": id}}),
            )
            .await;
        let (wire, frame) = f.device.tool_call().await;
        assert_eq!(frame["args"]["n"], id);
        wires.push(wire);
    }
    for (index, wire) in [(2usize, &wires[2]), (0, &wires[0]), (1, &wires[1])] {
        f.device.result(wire, json!({"answer": index + 1})).await;
    }
    for id in [1i64, 2, 3] {
        let response = f.wire.response(id).await;
        assert_eq!(response["result"]["result"]["answer"], id);
        assert_eq!(response["result"]["callId"], format!("c{id}"));
    }
    f.stop().await;
}

#[tokio::test]
async fn progress_is_forwarded_in_order_and_never_after_the_response() {
    let mut f = Fixture::new().await;
    f.wire
        .send(
            7,
            "tools.call",
            json!({"name": "slow_task", "progress": true}),
        )
        .await;
    let (wire, _) = f.device.tool_call().await;
    f.device.progress(&wire, 0.25, "step 1").await;
    f.device
        .send(
            json!({"type": "tool_call_progress", "session_id": f.device.session_id,
                     "id": wire}),
        )
        .await;
    f.device.progress(&wire, 0.75, "step 3").await;
    f.device.result(&wire, json!("done")).await;
    // Dropped: the call is settled.
    f.device.progress(&wire, 0.99, "late").await;
    let response = f.wire.response(7).await;
    assert_eq!(response["result"]["result"], "done");
    // A later request's response proves nothing else was queued for call 7.
    let listed = f.wire.request(8, "tools.list", json!({})).await;
    assert!(listed["result"].is_object());

    let methods: Vec<(String, Value)> = f
        .wire
        .log
        .iter()
        .map(|m| {
            (
                m["method"].as_str().unwrap_or("response").to_owned(),
                m["params"].clone(),
            )
        })
        .collect();
    let names: Vec<&str> = methods.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        names,
        [
            "tool_call_started",
            "tool_call_progress",
            "tool_call_progress",
            "tool_call_progress",
            "response",
            "response"
        ]
    );
    let started = &methods[0].1;
    assert_eq!(started["requestId"], 7);
    assert_eq!(started["callId"], wire.as_str());
    assert_eq!(started["sessionId"], f.device.session_id.as_str());
    assert!(started["ts"].is_u64());
    assert_eq!(
        (&methods[1].1["progress"], &methods[1].1["message"]),
        (&json!(0.25), &json!("step 1"))
    );
    // Absent fields stay absent.
    assert!(methods[2].1.get("progress").is_none() && methods[2].1.get("message").is_none());
    assert_eq!(methods[3].1["message"], "step 3");

    // Bus: started, three progress events (seq 0, callId only), finished.
    let kinds: Vec<EventKind> = drain(&mut f.events)
        .iter()
        .filter(|e| e.seq == 0)
        .map(|e| e.kind())
        .filter(|k| k.as_str().starts_with("tool_call"))
        .collect();
    assert_eq!(
        kinds,
        [
            EventKind::ToolCallStarted,
            EventKind::ToolCallProgress,
            EventKind::ToolCallProgress,
            EventKind::ToolCallProgress,
            EventKind::ToolCallFinished
        ]
    );
    f.stop().await;
}

#[tokio::test]
async fn answers_by_call_id_or_for_unknown_wire_ids_are_dropped() {
    // SEC-37: forged or caller-chosen ids settle nothing; `tool_call()` checks every id is minted.
    let mut f = Fixture::new().await;
    f.wire
        .send(1, "tools.call", json!({"name": "echo", "callId": "mine"}))
        .await;
    let (wire, _) = f.device.tool_call().await;
    // Matched by wire id only: naming the callId settles nothing, and the socket stays open.
    f.device.result("mine", json!("wrong")).await;
    f.device
        .result("call_AAAAAAAAAAAAAAAAAAAAAA", json!("stranger"))
        .await;
    f.device
        .error(
            "call_BBBBBBBBBBBBBBBBBBBBBB",
            json!({"type": "tool_execution_error", "message": "x"}),
        )
        .await;
    f.device.result(&wire, json!("right")).await;
    let response = f.wire.response(1).await;
    assert_eq!(response["result"]["result"], "right");
    assert_eq!(f.daemon.sessions().session_count(), 1);
    assert_eq!(audit_lines(&f.daemon).await.len(), 1);
    f.stop().await;
}

#[tokio::test]
async fn app_errors_pass_through_verbatim() {
    let mut f = Fixture::new().await;
    f.wire
        .send(1, "tools.call", json!({"name": "echo", "callId": "e1"}))
        .await;
    let (wire, _) = f.device.tool_call().await;
    f.device
        .error(
            &wire,
            json!({"type": "tool_execution_error", "message": "Cart service unavailable",
                   "details": {"name": "HttpError", "status": 503}}),
        )
        .await;
    let response = f.wire.response(1).await;
    assert_eq!(
        response["error"],
        json!({"code": -32000, "message": "Cart service unavailable",
               "data": {"type": "tool_execution_error", "callId": "e1",
                        "details": {"name": "HttpError", "status": 503}}})
    );
    let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
    assert_eq!(data(&finished)["outcome"], "error");
    assert_eq!(data(&finished)["errorType"], "tool_execution_error");
    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit[0]["outcome"], "error");
    assert_eq!(audit[0]["errorType"], "tool_execution_error");
    f.stop().await;
}

#[tokio::test]
async fn parameter_and_call_id_failures_are_neither_audited_nor_sent() {
    let mut f = Fixture::new().await;
    // Step 1: params.
    let bad = f
        .wire
        .request(
            1,
            "tools.call",
            json!({"name": "echo", "callId": "has space"}),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32602);
    assert_eq!(bad["error"]["data"]["details"]["param"], "callId");
    let bad = f
        .wire
        .request(
            2,
            "tools.call",
            json!({"name": "echo", "consent": "operator"}),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32602);
    let bad = f
        .wire
        .request(3, "tools.call", json!({"name": "echo", "args": [1]}))
        .await;
    assert_eq!(bad["error"]["data"]["details"]["param"], "args");
    // 261,120 bytes of compact JSON pass; one more byte does not, and nothing is sent.
    let filler = |n: usize| json!({"t": "x".repeat(n - 8)});
    assert_eq!(filler(261_121).to_string().len(), 261_121);
    let big = f
        .wire
        .request(
            4,
            "tools.call",
            json!({"name": "echo", "args": filler(261_121)}),
        )
        .await;
    assert_eq!(big["error"]["code"], -32602);
    assert_eq!(big["error"]["data"]["type"], "invalid_request");
    assert_eq!(big["error"]["data"]["details"]["maxArgsBytes"], 261_120);
    f.device.assert_no_frame();
    f.wire
        .send(
            5,
            "tools.call",
            json!({"name": "echo", "args": filler(261_120)}),
        )
        .await;
    let (wire, _) = f.device.tool_call().await;

    // Step 2: the callId is reserved daemon-wide while unsettled.
    f.wire
        .send(
            6,
            "tools.call",
            json!({"name": "slow_task", "callId": "held"}),
        )
        .await;
    let (held_wire, _) = f.device.tool_call().await;
    let clash = f
        .wire
        .request(7, "tools.call", json!({"name": "echo", "callId": "held"}))
        .await;
    assert_eq!(
        clash["error"],
        json!({"code": -32000,
               "message": "callId \"held\" is already used by a call that has not settled",
               "data": {"type": "invalid_request",
                        "details": {"reason": "call_id_in_use", "callId": "held"}}})
    );
    f.device.assert_no_frame();
    f.device.result(&wire, json!(1)).await;
    f.device.result(&held_wire, json!(2)).await;
    f.wire.response(5).await;
    f.wire.response(6).await;
    // Released at settling: the callId may be used again.
    f.wire
        .send(8, "tools.call", json!({"name": "echo", "callId": "held"}))
        .await;
    let (again, _) = f.device.tool_call().await;
    assert_ne!(again, held_wire, "a fresh wire id every time");
    f.device.result(&again, json!(3)).await;
    assert_eq!(f.wire.response(8).await["result"]["callId"], "held");

    // Only the three settled calls were audited.
    assert_eq!(audit_lines(&f.daemon).await.len(), 3);
    f.stop().await;
}

#[tokio::test]
async fn selector_failures_carry_the_call_id_and_are_not_audited() {
    let dir = state_dir();
    let daemon = appduct_daemon::daemon::Daemon::start(
        appduct_daemon::daemon::DaemonOptions::for_tests(dir.path()),
    )
    .await
    .unwrap();
    let mut wire = Wire::new(&daemon);
    let none = wire
        .request(1, "tools.call", json!({"name": "echo", "callId": "n1"}))
        .await;
    assert_eq!(none["error"]["data"]["type"], "no_session");
    assert_eq!(none["error"]["data"]["callId"], "n1");
    let unknown = wire
        .request(
            2,
            "tools.call",
            json!({"name": "echo", "selector": "nobody"}),
        )
        .await;
    assert_eq!(unknown["error"]["data"]["type"], "unknown_session");
    assert_eq!(
        unknown["error"]["data"]["details"],
        json!({"selector": "nobody"})
    );
    assert!(is_wire_id(
        unknown["error"]["data"]["callId"].as_str().unwrap()
    ));

    let one = connect_device(&daemon, "Pixel 8").await;
    let two = connect_device(&daemon, "Pixel 8").await;
    let ambiguous = wire.request(3, "tools.call", json!({"name": "echo"})).await;
    assert_eq!(ambiguous["error"]["data"]["type"], "ambiguous_session");
    assert!(audit_lines(&daemon).await.is_empty());
    let (c1, c2) = (one.answer_close(), two.answer_close());
    daemon.shutdown().await;
    c1.await.unwrap();
    c2.await.unwrap();
}

#[tokio::test]
async fn suspended_and_not_found_fail_at_once_audited_without_a_frame() {
    let mut f = Fixture::new().await;
    // Step 5: not in the registry.
    let missing = f
        .wire
        .request(1, "tools.call", json!({"name": "nope", "callId": "nf"}))
        .await;
    let error = &missing["error"];
    assert_eq!(error["data"]["type"], "tool_not_found");
    assert_eq!(error["data"]["callId"], "nf");
    assert_eq!(
        error["data"]["details"],
        json!({"name": "nope", "sessionId": f.device.session_id, "alias": "pixel-8"})
    );
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("\"nope\"")
            && message.contains("pixel-8")
            && message.contains("tools.list")
    );
    f.device.assert_no_frame();
    let finished = next_of(&mut f.events, EventKind::ToolCallFinished).await;
    assert_eq!(
        data(&finished),
        json!({"name": "nope", "callId": "nf", "caller": "cli",
               "durationMs": data(&finished)["durationMs"], "outcome": "error",
               "errorType": "tool_not_found"})
    );

    // Step 4: suspended, backgrounded.
    f.device
        .app
        .close(Some(1001), "app_backgrounded")
        .await
        .unwrap();
    next_of(&mut f.events, EventKind::SessionSuspended).await;
    let suspended = f
        .wire
        .request(2, "tools.call", json!({"name": "echo", "caller": "mcp"}))
        .await;
    let error = &suspended["error"];
    assert_eq!(error["data"]["type"], "session_suspended");
    assert_eq!(
        error["message"],
        "The app on pixel-8 is in the background; bring it to the foreground and retry."
    );
    assert_eq!(
        error["data"]["details"],
        json!({"sessionId": f.device.session_id, "alias": "pixel-8",
               "suspendReason": "app_backgrounded"})
    );
    let events = drain(&mut f.events);
    assert!(
        events
            .iter()
            .all(|e| e.kind() != EventKind::ToolCallStarted),
        "no tool_call_started without a frame"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind() == EventKind::ToolCallFinished)
            .count(),
        1
    );

    // tools.list still answers for the suspended session.
    let listed = f.wire.request(3, "tools.list", json!({})).await;
    assert_eq!(listed["result"]["total"], 4);

    let audit = audit_lines(&f.daemon).await;
    assert_eq!(audit.len(), 2);
    assert_eq!(
        (&audit[0]["tool"], &audit[0]["errorType"]),
        (&json!("nope"), &json!("tool_not_found"))
    );
    assert_eq!(audit[1]["errorType"], "session_suspended");
    assert_eq!(audit[1]["caller"], "mcp");
    f.daemon.shutdown().await;
}

#[tokio::test]
async fn hello_advertises_the_calls_features_and_counts_pending_calls() {
    let mut f = Fixture::new().await;
    f.wire
        .send(1, "tools.call", json!({"name": "slow_task"}))
        .await;
    let (wire, _) = f.device.tool_call().await;
    let hello = f.wire.request(2, "daemon.hello", json!({})).await;
    assert_eq!(
        hello["result"]["features"],
        json!([
            "calls.callId",
            "calls.progress",
            "consent.records",
            "events.subscribe.since",
            "events.list",
            "tools.groups",
            "approvals",
            "sessions.lease",
            "calls.results"
        ])
    );
    assert_eq!(hello["result"]["pendingCalls"], 1);
    f.device.result(&wire, json!(null)).await;
    f.wire.response(1).await;
    let status = f.wire.request(3, "daemon.status", json!({})).await;
    assert_eq!(status["result"]["pendingCalls"], 0);
    f.stop().await;
}
