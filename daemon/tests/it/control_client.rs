//! The typed client against the control server (and against a scripted raw peer), in memory.
#![allow(clippy::unwrap_used)]

use crate::control_support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use appduct_client::client::{CallProgress, ClientError, ControlClient, ToolCallError, classify};
use appduct_daemon::control_server::ServerOptions;
use appduct_protocol::control::{
    EventKind, NoParams, SessionsList, SubscribeParams, ToolsCallParams, ToolsCancel,
    ToolsCancelParams,
};
use appduct_protocol::errors::ErrorType;
use control_support::{Raw, TestHandler, app_event, serve};
use serde_json::{Value, json};

fn connected(h: &Arc<TestHandler>) -> (ControlClient, tokio::task::JoinHandle<()>) {
    let (stream, task) = serve(h.clone(), ServerOptions::default(), 64 * 1024);
    (ControlClient::from_stream(stream), task)
}

fn cancel(call_id: &str) -> ToolsCancelParams {
    ToolsCancelParams::new(call_id)
}

fn tool(name: &str, call_id: Option<&str>) -> ToolsCallParams {
    ToolsCallParams::new(name).with_call_id(call_id.map(str::to_owned))
}

#[tokio::test]
async fn responses_out_of_order_are_correlated_by_id() {
    let h = TestHandler::new(Some("0.1.0"));
    let gate = h.gate("slow");
    let (client, _task) = connected(&h);
    let slow = tokio::spawn({
        let client = client.clone();
        async move { client.call::<ToolsCancel>(cancel("slow")).await }
    });
    // The fast request completes while the slow one is still pending.
    assert_eq!(
        client.call::<SessionsList>(NoParams {}).await.unwrap(),
        vec![]
    );
    assert!(!slow.is_finished());
    gate.send(true).unwrap();
    // `extra` in the result is an unknown key and is ignored.
    assert!(slow.await.unwrap().unwrap().cancelled);
}

#[tokio::test]
async fn requests_are_numbered_from_one_and_errors_keep_their_fields() {
    let (client_io, daemon_io) = tokio::io::duplex(64 * 1024);
    let client = ControlClient::from_stream(client_io);
    let mut daemon = Raw::new(daemon_io);
    let a = tokio::spawn({
        let c = client.clone();
        async move { c.call::<SessionsList>(NoParams {}).await }
    });
    let first = daemon.recv().await.unwrap();
    let b = tokio::spawn({
        let c = client.clone();
        async move { c.call::<ToolsCancel>(cancel("x")).await }
    });
    let second = daemon.recv().await.unwrap();
    assert_eq!(first["id"], 1);
    assert_eq!(first["method"], "sessions.list");
    assert_eq!(first["params"], json!({}));
    assert_eq!(second["id"], 2);
    assert_eq!(second["params"], json!({"callId": "x"}));
    // Answer the second first; an unknown error type reads as internal_error.
    daemon
        .send_line(
            &json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32000, "message": "odd",
            "data": {"type": "brand_new_type", "details": {"k": 1}}}}),
        )
        .await;
    daemon
        .send_line(&json!({"jsonrpc": "2.0", "id": 1, "result": []}))
        .await;
    assert_eq!(a.await.unwrap().unwrap(), vec![]);
    match b.await.unwrap() {
        Err(e @ ClientError::Rpc { .. }) => {
            assert_eq!(classify(&e), (ErrorType::InternalError, 1));
            assert_eq!(e.details(), Some(json!({"k": 1})));
            assert_eq!(e.to_string(), "odd");
        }
        other => panic!("expected an rpc error, got {other:?}"),
    }
}

#[tokio::test]
async fn daemon_errors_map_to_their_type_and_carry_the_call_id() {
    let h = TestHandler::new(Some("0.1.0"));
    let (client, _task) = connected(&h);
    let err = client
        .call_tool(tool("denied", Some("c1")))
        .await
        .unwrap_err();
    assert_eq!(err.classify(), (ErrorType::PolicyDenied, 77));
    assert_eq!(err.call_id.as_deref(), Some("c1"));
    match &err.error {
        ClientError::Rpc {
            code,
            call_id,
            details,
            ..
        } => {
            assert_eq!(*code, -32000);
            assert_eq!(call_id.as_deref(), Some("c1"));
            assert_eq!(details.as_deref(), Some(&json!({"reason": "policy"})));
        }
        other => panic!("{other:?}"),
    }
    // Only connection-class failures get callId added to details.
    assert_eq!(err.details(), Some(json!({"reason": "policy"})));

    let ok = client.call_tool(tool("fine", Some("c2"))).await.unwrap();
    assert_eq!(ok.call_id, "c2");
    assert_eq!(ok.result, Some(json!({"name": "fine"})));
}

#[tokio::test]
async fn pending_requests_fail_with_closed_when_the_connection_drops() {
    let (client_io, daemon_io) = tokio::io::duplex(64 * 1024);
    let client = ControlClient::from_stream(client_io);
    let mut daemon = Raw::new(daemon_io);
    let call = tokio::spawn({
        let c = client.clone();
        async move { c.call_tool(tool("t", Some("c9"))).await }
    });
    assert_eq!(daemon.recv().await.unwrap()["method"], "tools.call");
    let plain = tokio::spawn({
        let c = client.clone();
        async move { c.call::<ToolsCancel>(cancel("slow")).await }
    });
    assert_eq!(daemon.recv().await.unwrap()["method"], "tools.cancel");
    drop(daemon);
    let err: ToolCallError = call.await.unwrap().unwrap_err();
    assert!(matches!(err.error, ClientError::Closed), "{err:?}");
    assert_eq!(err.classify(), (ErrorType::ConnectionError, 70));
    assert_eq!(err.details(), Some(json!({"callId": "c9"})));
    assert!(matches!(plain.await.unwrap(), Err(ClientError::Closed)));
    assert!(!client.is_open());
    assert!(matches!(
        client.call::<SessionsList>(NoParams {}).await,
        Err(ClientError::Closed)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_silent_daemon_times_out_and_the_late_answer_is_ignored() {
    let h = TestHandler::new(Some("0.1.0"));
    let gate = h.gate("slow");
    let (stream, _task) = serve(h, ServerOptions::default(), 64 * 1024);
    let client = ControlClient::from_stream_with(stream, Duration::from_secs(2));
    match client.call::<ToolsCancel>(cancel("slow")).await {
        Err(e @ ClientError::Timeout { .. }) => {
            assert!(
                matches!(e, ClientError::Timeout { method: "tools.cancel", after } if after == Duration::from_secs(2))
            );
            assert_eq!(classify(&e), (ErrorType::ConnectionError, 70));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    gate.send(true).unwrap();
    assert_eq!(
        client.call::<SessionsList>(NoParams {}).await.unwrap(),
        vec![]
    );
    assert!(client.is_open());
}

#[tokio::test(start_paused = true)]
async fn tool_call_watchdog_reports_a_connection_error_with_the_learned_call_id() {
    let h = TestHandler::new(Some("0.1.0"));
    // No callId: the daemon "mints" call_minted and announces it in tool_call_started.
    let _gate = h.gate("call_minted");
    let (client, _task) = connected(&h);
    let mut params = tool("slow_task", None);
    params.timeout_ms = Some(1000);
    let (mut progress, pending) = client.call_tool_with_progress(params);
    assert_eq!(pending.watchdog(), Duration::from_millis(6000));
    assert!(matches!(
        progress.next().await,
        Some(CallProgress::Started(_))
    ));
    let start = tokio::time::Instant::now();
    let err = pending.result().await.unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(5900));
    assert!(
        matches!(
            err.error,
            ClientError::Timeout {
                method: "tools.call",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.call_id.as_deref(), Some("call_minted"));
    assert_eq!(err.classify().0, ErrorType::ConnectionError);
    assert_eq!(err.details(), Some(json!({"callId": "call_minted"})));
}

#[tokio::test]
async fn progress_is_routed_to_its_own_call_and_ends_with_the_response() {
    let h = TestHandler::new(Some("0.1.0"));
    let ga = h.gate("a");
    let gb = h.gate("b");
    let (client, _task) = connected(&h);
    let (mut pa, ra) = client.call_tool_with_progress(tool("first", Some("a")));
    let (mut pb, rb) = client.call_tool_with_progress(tool("second", Some("b")));
    for (stream, name, call_id) in [(&mut pa, "first", "a"), (&mut pb, "second", "b")] {
        match stream.next().await {
            Some(CallProgress::Started(s)) => {
                assert_eq!(s.name, name);
                assert_eq!(s.call_id, call_id);
            }
            other => panic!("{other:?}"),
        }
        for i in 1..=2 {
            match stream.next().await {
                Some(CallProgress::Progress(p)) => {
                    assert_eq!(p.call_id, call_id);
                    assert_eq!(p.message, Some(format!("{name} step {i}")));
                }
                other => panic!("{other:?}"),
            }
        }
    }
    gb.send(true).unwrap();
    assert_eq!(rb.result().await.unwrap().call_id, "b");
    assert_eq!(pb.next().await, None, "the stream ends with the response");
    ga.send(true).unwrap();
    assert_eq!(
        ra.result().await.unwrap().result,
        Some(json!({"name": "first"}))
    );
    assert_eq!(pa.next().await, None);
}

#[tokio::test]
async fn subscription_yields_events_after_the_response_and_skips_unknown_kinds() {
    let h = TestHandler::new(Some("0.1.0"));
    let mut future = app_event(0, "x");
    future["kind"] = json!("kind_from_the_future");
    h.queue_subscribe_events(vec![future, app_event(1, "a"), app_event(2, "b")]);
    let (client, task) = connected(&h);
    let mut events = client
        .subscribe(SubscribeParams::default().with_kinds(Some(vec![EventKind::AppEvent])))
        .await
        .unwrap();
    assert!(events.result().ok);
    let e1 = events.next().await.unwrap();
    assert_eq!((e1.kind(), e1.seq), (EventKind::AppEvent, 1));
    assert_eq!(events.next().await.unwrap().seq, 2);
    // Closing the connection ends the stream.
    task.abort();
    assert_eq!(events.next().await, None);
}

#[tokio::test]
async fn client_accepts_lines_of_64_mib() {
    let (client_io, daemon_io) = tokio::io::duplex(1 << 20);
    let client = ControlClient::from_stream(client_io);
    let mut daemon = Raw::new(daemon_io);
    let call = tokio::spawn({
        let c = client.clone();
        async move { c.call::<ToolsCancel>(cancel("x")).await }
    });
    let req = daemon.recv().await.unwrap();
    let pad = "p".repeat(64 * 1024 * 1024);
    daemon
        .send_line(
            &json!({"jsonrpc": "2.0", "id": req["id"], "result": {"cancelled": true, "pad": pad}}),
        )
        .await;
    assert!(call.await.unwrap().unwrap().cancelled);
}

#[tokio::test]
async fn garbage_from_the_daemon_fails_pending_requests_as_internal_errors() {
    let (client_io, daemon_io) = tokio::io::duplex(64 * 1024);
    let client = ControlClient::from_stream(client_io);
    let mut daemon = Raw::new(daemon_io);
    let call = tokio::spawn({
        let c = client.clone();
        async move { c.call::<SessionsList>(NoParams {}).await }
    });
    daemon.recv().await.unwrap();
    daemon.send(b"this is not json\n").await;
    match call.await.unwrap() {
        Err(e @ ClientError::Protocol(_)) => {
            assert_eq!(classify(&e), (ErrorType::InternalError, 1))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn classify_maps_every_variant() {
    let io = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    let cases: Vec<(ClientError, ErrorType, u8)> = vec![
        (
            ClientError::Unreachable {
                socket: PathBuf::from("/s"),
                source: io(),
            },
            ErrorType::ConnectionError,
            70,
        ),
        (
            ClientError::SpawnFailed {
                reason: "exited".into(),
                log_tail: "boom".into(),
            },
            ErrorType::ConnectionError,
            70,
        ),
        (
            ClientError::Timeout {
                method: "daemon.status",
                after: Duration::from_secs(10),
            },
            ErrorType::ConnectionError,
            70,
        ),
        (
            ClientError::VersionMismatch {
                daemon: "0.1.0".into(),
                client: "0.2.0".into(),
                sessions: 1,
                pending_links: 0,
                pending_calls: 2,
                reason: appduct_client::client::MismatchReason::DaemonBusy,
            },
            ErrorType::ConnectionError,
            70,
        ),
        (ClientError::Closed, ErrorType::ConnectionError, 70),
        (
            ClientError::Protocol("bad".into()),
            ErrorType::InternalError,
            1,
        ),
        (
            ClientError::Rpc {
                code: -32000,
                error_type: ErrorType::ToolTimeout,
                message: "late".into(),
                details: None,
                call_id: None,
            },
            ErrorType::ToolTimeout,
            72,
        ),
        (
            ClientError::Rpc {
                code: -32602,
                error_type: ErrorType::InvalidRequest,
                message: "bad param".into(),
                details: Some(Box::new(json!({"param": "name"}))),
                call_id: None,
            },
            ErrorType::InvalidRequest,
            65,
        ),
    ];
    for (e, t, code) in cases {
        assert_eq!(classify(&e), (t, code), "{e:?}");
    }
    let spawn = ClientError::SpawnFailed {
        reason: "it exited with status 1".into(),
        log_tail: "line a\nline b\n".into(),
    };
    assert!(spawn.to_string().contains("line b"), "{spawn}");
    let unreachable = ClientError::Unreachable {
        socket: PathBuf::from("/tmp/x/daemon.sock"),
        source: io(),
    };
    assert!(unreachable.to_string().contains("/tmp/x/daemon.sock"));
    assert_eq!(ClientError::Closed.details(), None::<Value>);
}

/// A call parked for an operator (§C11.1): the parking notice moves the watchdog to the
/// approval's expiry + the deadline + 5 s, so an answer after the first watchdog still counts;
/// past the moved watchdog the call still times out.
#[tokio::test(start_paused = true)]
async fn a_parking_notice_extends_the_tool_call_watchdog() {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for (answer_after_s, answered) in [(33, true), (45, false)] {
        let (client_io, daemon_io) = tokio::io::duplex(64 * 1024);
        let client = ControlClient::from_stream(client_io);
        let mut daemon = Raw::new(daemon_io);
        let mut params = tool("slow_task", Some("parked"));
        params.timeout_ms = Some(1000);
        let (mut progress, pending) = client.call_tool_with_progress(params);
        assert_eq!(pending.watchdog(), Duration::from_millis(6000));
        let call = tokio::spawn(pending.result());
        let request = daemon.recv().await.unwrap();
        // Parked for 30 s: the watchdog now ends ~30-31 s + 1 s deadline + 5 s slack from now.
        daemon
            .send_line(
                &json!({"jsonrpc": "2.0", "method": "tool_call_progress", "params": {
                "requestId": request["id"], "callId": "parked", "sessionId": "s",
                "approvalId": "apr_x", "expiresAt": now_s + 30, "ts": 1}}),
            )
            .await;
        match progress.next().await {
            Some(CallProgress::Progress(p)) => assert_eq!(p.expires_at, Some(now_s + 30)),
            other => panic!("{other:?}"),
        }
        let started = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_secs(answer_after_s)).await;
        daemon
            .send_line(&json!({"jsonrpc": "2.0", "id": request["id"], "result": {
                "callId": "parked", "sessionId": "s", "alias": "a", "result": 1, "durationMs": 1}}))
            .await;
        let outcome = call.await.unwrap();
        if answered {
            assert_eq!(outcome.unwrap().result, Some(json!(1)));
        } else {
            let err = outcome.unwrap_err();
            assert!(
                matches!(
                    err.error,
                    ClientError::Timeout {
                        method: "tools.call",
                        ..
                    }
                ),
                "{err:?}"
            );
            assert!(
                started.elapsed() >= Duration::from_secs(35),
                "{:?}",
                started.elapsed()
            );
        }
    }
}
