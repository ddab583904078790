//! The tokio client against an in-process fake daemon over real sockets on 127.0.0.1: the pin
//! check, the claim and its snapshots, deltas, calls, cancels, deadlines, oversized replies,
//! resume after a drop, close classification, keepalive, lifecycle and link validation.

use crate::support;

use std::time::Duration;

use appduct_sdk::{
    CallContext, Client, ClientEvent, ClientState, ConnectError, ConnectOptions, SessionEvent,
    ToolError, Transport, Trust,
};
use serde_json::{Value, json};
use support::{Accepted, FakeConn, FakeDaemon, Read, SESSION, TestResult, WAIT};
use tokio::sync::{mpsc, watch};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

fn client() -> Result<Client, appduct_sdk::BuildError> {
    Client::builder()
        .jitter(|| 0.0)
        .device(Some("Acme"), Some("Test Rig"), Some("Linux"))
        .build()
}

async fn state_becomes(rx: &mut watch::Receiver<ClientState>, want: ClientState) -> TestResult {
    timeout(WAIT, rx.wait_for(|s| *s == want)).await??;
    Ok(())
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<ClientEvent>) -> Result<ClientEvent, String> {
    timeout(WAIT, rx.recv())
        .await
        .map_err(|_| "no event".to_owned())?
        .ok_or_else(|| "event stream ended".to_owned())
}

/// Connects `client` to `daemon` and returns the acked connection, its claim snapshots read.
async fn connect(
    client: &Client,
    daemon: &mut FakeDaemon,
    event_registry: bool,
) -> Result<FakeConn, Box<dyn std::error::Error>> {
    let pending = client.start_connect(&daemon.link(), ConnectOptions::default())?;
    let mut conn = daemon.next_conn().await?;
    conn.accept_claim(event_registry).await?;
    timeout(WAIT, pending).await??;
    conn.frame_of("tool_registry_snapshot").await?;
    if event_registry {
        conn.frame_of("event_registry_snapshot").await?;
    }
    Ok(conn)
}

fn echo_tool() -> Value {
    json!({"name": "echo", "description": "Echo.", "input_schema": {"type": "object"},
           "output_schema": {"type": "object"}})
}

// -------------------------------------------------------------------------------------------------
// Pin check
// -------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_wrong_pin_is_refused_inside_the_tls_handshake_before_any_frame() -> TestResult {
    // SEC-13 (Rust device).
    let mut daemon = FakeDaemon::wss().await?;
    let client = Client::builder()
        .trust(Trust::Pin(vec![support::foreign_pin()]))
        .jitter(|| 0.0)
        .build()?;
    let mut states = client.watch_state();
    // The link's own (correct) pin is ignored: embedded pins win.
    let result = client.connect(&daemon.link()).await;
    assert_eq!(result, Err(ConnectError::PinMismatch));
    match daemon.next().await? {
        Accepted::TlsFailed(_) => {}
        Accepted::Upgraded { .. } => panic!("the fake daemon saw an upgrade request"),
    }
    state_becomes(
        &mut states,
        ClientState::Closed {
            reason: "pin_mismatch".into(),
        },
    )
    .await?;
    // One more connection: the `link_refused` frame over plain `ws://` (issue #23), which this
    // TLS-only fake rejects at its TLS handshake; the real daemon's port reads it as its plain
    // route (sdk-rs/tests/it/sealed.rs checks the frame). Then nothing: no retry.
    match daemon.next().await? {
        Accepted::TlsFailed(_) => {}
        Accepted::Upgraded { .. } => panic!("a refusal never upgrades over TLS"),
    }
    assert!(
        !daemon.connection_within(Duration::from_millis(300)).await,
        "a pin mismatch is never retried"
    );
    Ok(())
}

#[tokio::test]
async fn the_link_pin_is_trusted_in_link_mode_and_the_claim_is_sent() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let pending = client.start_connect(&daemon.link(), ConnectOptions::default())?;
    let Accepted::Upgraded { mut conn, path, .. } = daemon.next().await? else {
        panic!("the right pin must pass");
    };
    assert_eq!(path, "/");
    let claim = conn.frame_of("session_claim").await?;
    assert_eq!(
        claim,
        json!({"type": "session_claim", "protocol_version": 2, "session_id": SESSION,
               "token": support::claim_token(), "device_manufacturer": "Acme",
               "device_model": "Test Rig", "device_os": "Linux"})
    );
    conn.ack("resume-1", 600, false).await?;
    let info = timeout(WAIT, pending).await??;
    assert_eq!(info.session_id, SESSION);
    assert_eq!(info.alias, "fake-device");
    assert_eq!(client.state(), ClientState::Active);
    Ok(())
}

// -------------------------------------------------------------------------------------------------
// Registries
// -------------------------------------------------------------------------------------------------

#[tokio::test]
async fn snapshots_follow_the_ack_in_order_then_deltas_in_call_order() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let mut events = client.events();
    client.register_tool(&echo_tool(), |args: Value, _ctx: CallContext| async move {
        Ok::<_, ToolError>(args)
    })?;
    client.declare_event(&json!({"name": "cart.item_added", "description": "Added."}))?;

    let pending = client.start_connect(&daemon.link(), ConnectOptions::default())?;
    let mut conn = daemon.next_conn().await?;
    conn.accept_claim(true).await?;
    let tools = conn.frame_of("tool_registry_snapshot").await?;
    assert_eq!(tools["tools"], json!([echo_tool()]));
    let declared = conn.frame_of("event_registry_snapshot").await?;
    assert_eq!(
        declared["events"],
        json!([{"name": "cart.item_added", "description": "Added."}])
    );
    timeout(WAIT, pending).await??;

    // After the snapshot: deltas, in call order.
    let second = json!({"name": "second", "description": "Two."});
    let reg = client.register_tool(&second, |_: Value, _: CallContext| async move {
        Ok::<_, ToolError>(Value::Null)
    })?;
    assert!(reg.remove());
    assert!(!reg.remove(), "a second remove is a no-op");
    let event = client.declare_event(&json!({"name": "late", "description": "Late."}))?;
    event.remove();
    assert_eq!(
        conn.frame().await?,
        json!({"type": "tool_registry_delta", "session_id": SESSION, "operation": "upsert", "tool": second})
    );
    assert_eq!(
        conn.frame().await?,
        json!({"type": "tool_registry_delta", "session_id": SESSION, "operation": "remove", "name": "second"})
    );
    assert_eq!(conn.frame().await?["operation"], "upsert");
    assert_eq!(
        conn.frame().await?,
        json!({"type": "event_registry_delta", "session_id": SESSION, "operation": "remove", "name": "late"})
    );

    // States and session events arrive in order, each once.
    assert_eq!(
        next_event(&mut events).await?,
        ClientEvent::State(ClientState::Connecting)
    );
    assert_eq!(
        next_event(&mut events).await?,
        ClientEvent::State(ClientState::Active)
    );
    assert!(matches!(
        next_event(&mut events).await?,
        ClientEvent::Session(SessionEvent::Claimed(_))
    ));
    Ok(())
}

#[tokio::test]
async fn invalid_descriptors_are_refused_and_never_sent() -> TestResult {
    let client = client()?;
    let err = client
        .register_tool(
            &json!({"name": "bad name", "description": "d"}),
            |_: Value, _: CallContext| async move { Ok::<_, ToolError>(Value::Null) },
        )
        .unwrap_err();
    assert_eq!(err.field(), Some("name"));
    assert!(client.declare_event(&json!({"name": "e"})).is_err());
    assert!(client.registered_tools().is_empty());
    assert!(client.declared_events().is_empty());
    Ok(())
}

#[tokio::test]
async fn registry_declarations_are_kept_and_checked_before_sending() -> TestResult {
    use appduct_protocol::descriptor::ToolDescriptor;
    use appduct_sdk::{RiskLevel, TestCases};
    let client = client()?;
    let cases = TestCases::from_value(&json!([{"name": "adds", "arguments": {"a": 1},
        "expect": {"schema": {"type": "object"}}}]))?;
    client.register_tool_descriptor(
        &ToolDescriptor::new("typed", "Declared through the builder.")
            .with_risk_level(RiskLevel::Medium)
            .with_required_permissions(vec!["cart.write".to_owned()])
            .with_test_cases(cases),
        |_: Value, _: CallContext| async move { Ok::<_, ToolError>(Value::Null) },
    )?;
    client.register_tool(
        &json!({"name": "json", "description": "Declared as JSON.", "riskLevel": "low",
                "testCases": [{"arguments": {}, "expect": {"error": "tool_execution_error"}}]}),
        |_: Value, _: CallContext| async move { Ok::<_, ToolError>(Value::Null) },
    )?;
    let tools: Vec<Value> = client
        .registered_tools()
        .iter()
        .map(ToolDescriptor::to_value)
        .collect();
    assert_eq!(tools[0]["riskLevel"], "medium");
    assert_eq!(tools[0]["requiredPermissions"], json!(["cart.write"]));
    assert_eq!(tools[0]["testCases"][0]["name"], "adds");
    assert_eq!(
        tools[1]["testCases"],
        json!([{"arguments": {}, "expect": {"error": "tool_execution_error"}}])
    );
    // A bad shape is refused before anything is stored, naming the field.
    let err = client
        .register_tool(
            &json!({"name": "bad", "description": "d", "testCases": [{"arguments": {}}]}),
            |_: Value, _: CallContext| async move { Ok::<_, ToolError>(Value::Null) },
        )
        .unwrap_err();
    assert_eq!(err.field(), Some("testCases"));
    assert_eq!(client.registered_tools().len(), 2);
    Ok(())
}

// -------------------------------------------------------------------------------------------------
// Calls
// -------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_call_reports_progress_and_returns_its_result() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    client.register_tool(&echo_tool(), |args: Value, ctx: CallContext| async move {
        assert!(ctx.progress(Some(0.5), Some("halfway")));
        Ok::<_, ToolError>(json!({"echo": args, "call": ctx.call_id()}))
    })?;
    let mut conn = connect(&client, &mut daemon, false).await?;
    conn.call("call-1", "echo", json!({"x": 1})).await?;
    assert_eq!(
        conn.frame().await?,
        json!({"type": "tool_call_progress", "session_id": SESSION, "id": "call-1",
               "progress": 0.5, "message": "halfway"})
    );
    assert_eq!(
        conn.frame().await?,
        json!({"type": "tool_result", "session_id": SESSION, "id": "call-1",
               "result": {"echo": {"x": 1}, "call": "call-1"}})
    );
    conn.call("call-2", "missing", json!({})).await?;
    let error = conn.frame_of("tool_error").await?;
    assert_eq!(error["error"]["type"], "tool_not_found");
    Ok(())
}

#[tokio::test]
async fn a_cancel_answers_tool_cancelled_at_once_and_aborts_the_handler() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    client.register_tool(
        &json!({"name": "slow", "description": "Waits.", "input_schema": {"type": "object"},
                "output_schema": {"type": "object"}}),
        move |_: Value, ctx: CallContext| {
            let seen_tx = seen_tx.clone();
            async move {
                let reason = ctx.cancelled().await;
                let _ = seen_tx.send(reason);
                // Whatever it returns now is never sent.
                Ok::<_, ToolError>(json!({"late": true}))
            }
        },
    )?;
    let mut conn = connect(&client, &mut daemon, false).await?;
    conn.call("call-1", "slow", json!({})).await?;
    conn.send(
        json!({"type": "tool_cancel", "session_id": SESSION, "id": "call-1",
                     "reason": "client_cancelled"}),
    )
    .await?;
    assert_eq!(
        conn.frame().await?,
        json!({"type": "tool_error", "session_id": SESSION, "id": "call-1",
               "error": {"type": "tool_cancelled", "message": "Tool \"slow\" was cancelled."}})
    );
    assert_eq!(
        timeout(WAIT, seen.recv()).await?.as_deref(),
        Some("client_cancelled")
    );
    // The next frame is the answer to a later call, not the cancelled handler's result.
    client.register_tool(&echo_tool(), |a: Value, _: CallContext| async move {
        Ok::<_, ToolError>(a)
    })?;
    assert_eq!(conn.frame().await?["type"], "tool_registry_delta");
    conn.call("call-2", "echo", json!({})).await?;
    assert_eq!(conn.frame().await?["id"], "call-2");
    Ok(())
}

#[tokio::test]
async fn the_app_side_deadline_answers_tool_timeout() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    client.register_tool(
        &json!({"name": "stuck", "description": "Never answers.", "timeout_ms": 1}),
        move |_: Value, ctx: CallContext| {
            let seen_tx = seen_tx.clone();
            async move {
                let _ = seen_tx.send(ctx.cancelled().await);
                Ok::<_, ToolError>(Value::Null)
            }
        },
    )?;
    let mut conn = connect(&client, &mut daemon, false).await?;
    conn.call("call-1", "stuck", json!({})).await?;
    // `timeout_ms: 1` is clamped to the 1000 ms floor.
    assert_eq!(
        conn.frame().await?,
        json!({"type": "tool_error", "session_id": SESSION, "id": "call-1",
               "error": {"type": "tool_timeout", "message": "Tool \"stuck\" did not respond within 1000ms."}})
    );
    assert_eq!(
        timeout(WAIT, seen.recv()).await?.as_deref(),
        Some("timeout")
    );
    Ok(())
}

#[tokio::test]
async fn an_oversized_reply_becomes_tool_serialization_error() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let mut events = client.events();
    client.register_tool(
        &json!({"name": "huge", "description": "Too big.", "output_schema": {"type": "string"}}),
        |_: Value, _: CallContext| async move { Ok::<_, ToolError>(json!("x".repeat(300_000))) },
    )?;
    let mut conn = connect(&client, &mut daemon, false).await?;
    conn.call("call-1", "huge", json!({})).await?;
    let error = conn.frame_of("tool_error").await?;
    assert_eq!(error["error"]["type"], "tool_serialization_error");
    let bytes = error["error"]["details"]["bytes"].as_u64().ok_or("bytes")?;
    assert_eq!(
        error["error"]["message"],
        format!("Tool \"huge\" returned {bytes} bytes; the frame limit is 262144.")
    );
    // The connection stays open and the app's error listener heard about it.
    assert_eq!(client.state(), ClientState::Active);
    loop {
        if let ClientEvent::Error(report) = next_event(&mut events).await? {
            assert_eq!(report.tool_name.as_deref(), Some("huge"));
            break;
        }
    }
    Ok(())
}

// -------------------------------------------------------------------------------------------------
// Resume and close classification
// -------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_dropped_socket_resumes_with_the_rotated_token() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let mut events = client.events();
    let conn = connect(&client, &mut daemon, false).await?;
    drop(conn);
    let mut resumed = daemon.next_conn().await?;
    assert_eq!(
        resumed.frame().await?,
        json!({"type": "session_resume", "protocol_version": 2, "session_id": SESSION,
               "resume_token": "resume-1"})
    );
    resumed.ack("resume-2", 600, false).await?;
    resumed.frame_of("tool_registry_snapshot").await?;
    drop(resumed);
    let mut again = daemon.next_conn().await?;
    assert_eq!(again.frame().await?["resume_token"], "resume-2");

    let mut seen = Vec::new();
    while seen.len() < 6 {
        seen.push(next_event(&mut events).await?);
    }
    assert!(matches!(
        &seen[..],
        [
            ClientEvent::State(ClientState::Connecting),
            ClientEvent::State(ClientState::Active),
            ClientEvent::Session(SessionEvent::Claimed(_)),
            ClientEvent::State(ClientState::Reconnecting),
            ClientEvent::State(ClientState::Active),
            ClientEvent::Session(SessionEvent::Resumed(_)),
        ]
    ));
    Ok(())
}

#[tokio::test]
async fn a_1008_close_is_terminal() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let mut states = client.watch_state();
    let mut conn = connect(&client, &mut daemon, false).await?;
    conn.close(1008, "invalid_message").await?;
    state_becomes(
        &mut states,
        ClientState::Closed {
            reason: "invalid_message".into(),
        },
    )
    .await?;
    assert!(client.session().is_none());
    assert!(
        !daemon.connection_within(Duration::from_millis(300)).await,
        "jitter is 0, so a retry would be immediate"
    );
    Ok(())
}

#[tokio::test]
async fn a_1000_close_after_the_ack_is_revoked() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let mut events = client.events();
    let mut conn = connect(&client, &mut daemon, false).await?;
    conn.close(1000, "revoked").await?;
    loop {
        if let ClientEvent::Session(SessionEvent::Lost { reason }) = next_event(&mut events).await?
        {
            assert_eq!(reason, "revoked");
            break;
        }
    }
    assert_eq!(
        client.state(),
        ClientState::Closed {
            reason: "revoked".into()
        }
    );
    assert!(!daemon.connection_within(Duration::from_millis(300)).await);
    Ok(())
}

#[tokio::test]
async fn a_claim_refused_with_1008_fails_connect() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let pending = client.start_connect(&daemon.link(), ConnectOptions::default())?;
    let mut conn = daemon.next_conn().await?;
    conn.frame_of("session_claim").await?;
    conn.close(1008, "invalid_token").await?;
    assert_eq!(
        timeout(WAIT, pending).await?,
        Err(ConnectError::Failed {
            close_reason: Some("invalid_token".into())
        })
    );
    assert_eq!(
        client.state(),
        ClientState::Closed {
            reason: "connect_error".into()
        }
    );
    Ok(())
}

#[tokio::test]
async fn a_claim_dropped_before_the_ack_is_retried_with_the_same_token() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let pending = client.start_connect(&daemon.link(), ConnectOptions::default())?;
    let mut first = daemon.next_conn().await?;
    let claim = first.frame_of("session_claim").await?;
    first.close(1011, "internal_error").await?;
    let mut second = daemon.next_conn().await?;
    assert_eq!(second.frame_of("session_claim").await?, claim);
    second.ack("resume-1", 600, false).await?;
    timeout(WAIT, pending).await??;
    assert_eq!(client.state(), ClientState::Active);
    Ok(())
}

// -------------------------------------------------------------------------------------------------
// Keepalive and lifecycle
// -------------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_client_answers_pings_and_pings_at_the_keepalive_interval() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let pending = client.start_connect(&daemon.link(), ConnectOptions::default())?;
    let mut conn = daemon.next_conn().await?;
    conn.frame_of("session_claim").await?;
    conn.ack_with("resume-1", 600, 1, false).await?;
    timeout(WAIT, pending).await??;
    conn.frame_of("tool_registry_snapshot").await?;
    conn.send_message(Message::Ping(b"daemon".to_vec().into()))
        .await?;
    // Whatever else arrives, the pong answers our ping, and the client pings every second on
    // its own (the fake's tungstenite answers those as it reads, so the session stays up).
    let (mut pong, mut pings) = (false, 0);
    while !pong || pings < 2 {
        match conn.read().await? {
            Read::Pong(payload) => {
                assert_eq!(payload, b"daemon");
                pong = true;
            }
            Read::Ping => pings += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(client.state(), ClientState::Active);
    Ok(())
}

#[tokio::test]
async fn a_ping_left_unanswered_until_the_next_tick_is_a_connection_loss() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let pending = client.start_connect(&daemon.link(), ConnectOptions::default())?;
    let mut silent = daemon.next_conn().await?;
    silent.frame_of("session_claim").await?;
    silent.ack_with("resume-1", 600, 1, false).await?;
    timeout(WAIT, pending).await??;
    // `silent` is never read again, so the client's pings go unanswered: after two ticks the
    // client drops it and resumes on a new socket.
    let mut resumed = daemon.next_conn().await?;
    assert_eq!(resumed.frame().await?["resume_token"], "resume-1");
    drop(silent);
    Ok(())
}

#[tokio::test]
async fn background_closes_1001_and_foreground_resumes_at_once() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let mut conn = connect(&client, &mut daemon, false).await?;
    client.background();
    assert_eq!(
        conn.read().await?,
        Read::Close(Some((1001, "app_backgrounded".into())))
    );
    assert_eq!(client.state(), ClientState::Reconnecting);
    assert!(
        !daemon.connection_within(Duration::from_millis(300)).await,
        "no resume while in the background"
    );
    client.foreground();
    let mut resumed = daemon.next_conn().await?;
    assert_eq!(resumed.frame().await?["type"], "session_resume");
    Ok(())
}

#[tokio::test]
async fn disconnect_closes_1000_and_ends_the_session() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let mut conn = connect(&client, &mut daemon, false).await?;
    client.disconnect();
    assert_eq!(
        conn.read().await?,
        Read::Close(Some((1000, "closed_by_app".into())))
    );
    assert_eq!(
        client.state(),
        ClientState::Closed {
            reason: "closed_by_app".into()
        }
    );
    assert!(client.post_event("e", None).is_err(), "no longer active");
    Ok(())
}

#[tokio::test]
async fn events_are_posted_with_a_timestamp() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let mut conn = connect(&client, &mut daemon, false).await?;
    let before = support::now_s() * 1000;
    client.post_event("cart.item_added", Some(json!({"sku": "TEE-42"})))?;
    let event = conn.frame_of("event").await?;
    assert_eq!(event["name"], "cart.item_added");
    assert_eq!(event["payload"], json!({"sku": "TEE-42"}));
    assert!(event["ts"].as_u64().ok_or("ts")? >= before);
    let refused = client.post_event("big", Some(json!("x".repeat(262_144))));
    assert!(refused.is_err());
    assert_eq!(client.state(), ClientState::Active);
    Ok(())
}

#[tokio::test]
async fn the_web_transport_connects_over_plain_loopback_ws() -> TestResult {
    let mut daemon = FakeDaemon::web().await?;
    let client = client()?;
    let options = ConnectOptions {
        transport: Some(Transport::Web),
    };
    let pending = client.start_connect(&daemon.payload(support::now_s() + 300), options)?;
    let Accepted::Upgraded { mut conn, host, .. } = daemon.next().await? else {
        panic!("the web listener must upgrade");
    };
    // The web listener accepts only Host 127.0.0.1:<webPort> (§D2.2).
    assert_eq!(host, format!("127.0.0.1:{}", daemon.addr.port()));
    conn.accept_claim(false).await?;
    timeout(WAIT, pending).await??;
    conn.frame_of("tool_registry_snapshot").await?;
    Ok(())
}

// -------------------------------------------------------------------------------------------------
// Link validation
// -------------------------------------------------------------------------------------------------

#[tokio::test]
async fn links_are_fully_validated_before_touching_a_held_session() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let _conn = connect(&client, &mut daemon, false).await?;
    let pin = daemon.pin.clone().ok_or("pin")?;
    let native = ConnectOptions::default();
    let payload_at = |addr: &str| {
        appduct_protocol::bootstrap::BootstrapPayload::new(
            addr.parse().expect("an address"),
            8443,
            "s",
            appduct_protocol::ids::ClaimToken::from_bytes([1; 32]),
            support::now_s() + 300,
        )
        .encode()
        .expect("encodes")
    };
    let with_pin = |payload: &str| {
        appduct_protocol::link::compose_deep_link("demo", payload, Some(&pin)).expect("a link")
    };
    let cases: Vec<(String, &str)> = vec![
        ("demo:///?pin=x".into(), "missing_payload"),
        ("demo:///?appduct=a&appduct=b".into(), "invalid_url"),
        ("demo:///?appduct=AAAA".into(), "invalid_payload"),
        (
            daemon.link_expiring(support::now_s() - 1),
            "expired_payload",
        ),
        (payload_at("192.168.1.5"), "missing_pin"),
        (with_pin(&payload_at("8.8.8.8")), "address_not_allowed"),
        (with_pin(&payload_at("::1")), "address_not_allowed"),
    ];
    for (link, code) in cases {
        let err = client.start_connect(&link, native).unwrap_err();
        assert_eq!(err.code(), code, "{link}");
    }
    let web = ConnectOptions {
        transport: Some(Transport::Web),
    };
    let err = client
        .start_connect(&payload_at("192.168.1.5"), web)
        .unwrap_err();
    assert_eq!(err.code(), "unsupported_link");
    assert_eq!(
        client.state(),
        ClientState::Active,
        "the held session is untouched"
    );
    Ok(())
}

#[tokio::test]
async fn the_lan_rule_can_be_turned_off_and_pin_mode_needs_pins() -> TestResult {
    assert!(matches!(
        Client::builder().trust(Trust::Pin(Vec::new())).build(),
        Err(appduct_sdk::BuildError::EmptyPinSet)
    ));
    let client = Client::builder().allow_private_lan_only(false).build()?;
    let daemon = FakeDaemon::wss().await?;
    let payload = appduct_protocol::bootstrap::BootstrapPayload::new(
        "8.8.8.8".parse()?,
        9,
        "s",
        appduct_protocol::ids::ClaimToken::from_bytes([1; 32]),
        support::now_s() + 300,
    )
    .encode()?;
    let link = appduct_protocol::link::compose_deep_link("demo", &payload, daemon.pin.as_ref())?;
    let pending = client.start_connect(&link, ConnectOptions::default());
    assert!(pending.is_ok(), "allowed once the LAN rule is off");
    client.disconnect();
    assert_eq!(
        timeout(WAIT, pending?).await?,
        Err(ConnectError::ClosedByApp)
    );
    Ok(())
}

#[tokio::test]
async fn handle_url_connects_links_and_reports_failures_to_the_error_listener() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = client()?;
    let mut events = client.events();
    assert!(!client.handle_url("demo:///?other=1"));
    assert!(client.handle_url("demo:///?appduct=AAAA"));
    loop {
        if let ClientEvent::Error(report) = next_event(&mut events).await? {
            assert_eq!(report.phase, appduct_sdk::ErrorPhase::Bootstrap);
            assert_eq!(report.code.as_deref(), Some("invalid_payload"));
            break;
        }
    }
    assert!(client.handle_url(&daemon.link()));
    let mut conn = daemon.next_conn().await?;
    conn.accept_claim(false).await?;
    let mut states = client.watch_state();
    state_becomes(&mut states, ClientState::Active).await?;
    Ok(())
}

#[test]
fn clients_and_contexts_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Client>();
    send_sync::<appduct_sdk::CallContext>();
    send_sync::<appduct_sdk::ToolRegistration>();
    send_sync::<appduct_sdk::PendingConnect>();
}
