//! The `testing` feature's raw-frame escape hatch: anything can be put on the wire, and the pin
//! check is skipped only when explicitly asked for.

#![cfg(feature = "testing")]

use crate::support;

use std::net::IpAddr;

use appduct_protocol::control::Transport;
use appduct_sdk::core::Endpoint;
use appduct_sdk::testing::{RawFrame, RawMessage, RawSocket};
use appduct_sdk::transport::DialError;
use appduct_sdk::{Client, ConnectOptions, Trust};
use support::{FakeDaemon, Read, TestResult, WAIT};
use tokio::time::timeout;

fn endpoint(daemon: &FakeDaemon, pins: Vec<appduct_sdk::SpkiPin>) -> Endpoint {
    Endpoint {
        transport: Transport::Native,
        address: IpAddr::from([127, 0, 0, 1]),
        port: daemon.addr.port(),
        pins,
        sealed_key: None,
    }
}

#[tokio::test]
async fn raw_frames_reach_the_daemon_unchecked() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = Client::builder().jitter(|| 0.0).build()?;
    assert!(
        !client.send_raw(RawFrame::Text("early".into())),
        "no socket yet"
    );
    let pending = client.start_connect(&daemon.link(), ConnectOptions::default())?;
    let mut conn = daemon.next_conn().await?;
    conn.accept_claim(false).await?;
    timeout(WAIT, pending).await??;
    conn.frame_of("tool_registry_snapshot").await?;

    assert!(client.send_raw(RawFrame::Binary(vec![1, 2, 3])));
    assert_eq!(conn.read().await?, Read::Binary(vec![1, 2, 3]));
    let oversized = format!("{{\"type\":\"event\",\"pad\":\"{}\"}}", "a".repeat(300_000));
    assert!(client.send_raw(RawFrame::Text(oversized)));
    let Read::Frame(frame) = conn.read().await? else {
        panic!("the oversized text frame must arrive as is");
    };
    assert_eq!(frame["pad"].as_str().map(str::len), Some(300_000));
    assert!(client.send_raw(RawFrame::Close {
        code: 4000,
        reason: "hostile".into()
    }));
    assert_eq!(
        conn.read().await?,
        Read::Close(Some((4000, "hostile".into())))
    );
    Ok(())
}

#[tokio::test]
async fn a_raw_socket_checks_the_pin_unless_told_not_to() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let wrong = endpoint(&daemon, vec![support::foreign_pin()]);
    assert_eq!(
        RawSocket::connect(&wrong, false).await.err(),
        Some(DialError::PinMismatch)
    );
    assert!(matches!(
        daemon.next().await?,
        support::Accepted::TlsFailed(_)
    ));

    let mut skipped = RawSocket::connect(&wrong, true).await?;
    let mut conn = daemon.next_conn().await?;
    skipped.send_text(r#"{"type":"raw"}"#).await?;
    assert_eq!(
        conn.read().await?,
        Read::Frame(serde_json::json!({"type": "raw"}))
    );
    conn.send(serde_json::json!({"type": "hello"})).await?;
    assert_eq!(
        skipped.recv().await,
        Some(RawMessage::Text("{\"type\":\"hello\"}".into()))
    );

    let right = endpoint(&daemon, daemon.pin.clone().into_iter().collect());
    let mut pinned = RawSocket::connect(&right, false).await?;
    let mut conn = daemon.next_conn().await?;
    pinned.send(RawFrame::Ping(b"x".to_vec())).await?;
    // The fake reads the ping (its tungstenite queues the pong) and writes the pong with its
    // next frame.
    assert_eq!(conn.read().await?, Read::Ping);
    conn.send(serde_json::json!({"type": "after"})).await?;
    let received = [pinned.recv().await, pinned.recv().await];
    assert!(
        received.contains(&Some(RawMessage::Pong(b"x".to_vec()))),
        "{received:?}"
    );
    assert!(received.contains(&Some(RawMessage::Text(r#"{"type":"after"}"#.into()))));
    Ok(())
}

#[tokio::test]
async fn skipping_the_pin_check_must_be_asked_for() -> TestResult {
    let mut daemon = FakeDaemon::wss().await?;
    let client = Client::builder()
        .trust(Trust::Pin(vec![support::foreign_pin()]))
        .danger_skip_pin_check()
        .build()?;
    let pending = client.start_connect(&daemon.link(), ConnectOptions::default())?;
    let mut conn = daemon.next_conn().await?;
    conn.accept_claim(false).await?;
    timeout(WAIT, pending).await??;
    Ok(())
}
