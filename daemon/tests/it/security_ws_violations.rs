//! WebSocket protocol violations get a close frame before TCP ends (issue #20 defect 5; RFC 6455
//! §7.1.7; SECURITY.md): `1002 protocol_error` for framing violations, `1007 invalid_payload` for
//! text that is not UTF-8. Raw clients on 127.0.0.1 upgrade properly, send one violation, and
//! parse the bytes the daemon answers; a healthy session on the same daemon keeps working.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;
use crate::tls_support;

use std::net::{Ipv4Addr, SocketAddr};

use appduct_daemon::daemon::DaemonHandle;
use appduct_protocol::control::{
    EventKind, LinkCreate, LinkCreateParams, LinkCreateResult, Transport,
};
use daemon_support::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// A client frame with `first` as its first byte (FIN, RSV, opcode), masked as RFC 6455 asks.
fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![first];
    match payload.len() {
        len @ 0..=125 => frame.push(0x80 | len as u8),
        len => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(len as u16).to_be_bytes());
        }
    }
    frame.extend_from_slice(&MASK);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    frame
}

/// Each violation of the issue (and two more), with the close code the daemon must answer.
fn violations() -> Vec<(&'static str, Vec<u8>, u16, &'static str)> {
    vec![
        (
            "unmasked text frame",
            vec![0x81, 0x02, b'{', b'}'],
            1002,
            "protocol_error",
        ),
        ("RSV1 set", masked(0xC1, b"{}"), 1002, "protocol_error"),
        (
            "orphan continuation",
            masked(0x80, b"{}"),
            1002,
            "protocol_error",
        ),
        (
            "invalid UTF-8",
            masked(0x81, &[b'{', 0xff, 0xfe, b'}']),
            1007,
            "invalid_payload",
        ),
        (
            "ping over 125 bytes",
            masked(0x89, &[b'p'; 126]),
            1002,
            "protocol_error",
        ),
        (
            "fragmented ping",
            masked(0x09, b"p"),
            1002,
            "protocol_error",
        ),
        ("reserved opcode", masked(0x83, b""), 1002, "protocol_error"),
    ]
}

fn upgrade_request(host: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
}

/// Upgrades `stream`, checks the `101`, and returns any bytes read past the response head.
async fn upgrade<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, host: &str) -> Vec<u8> {
    stream
        .write_all(upgrade_request(host).as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut chunk = [0u8; 512];
    let end = loop {
        let n = timeout(WAIT, stream.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert_ne!(n, 0, "closed during the upgrade");
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    assert!(head.starts_with(b"HTTP/1.1 101 "), "{head:?}");
    head.split_off(end)
}

/// Everything the daemon sends until it ends the connection (EOF or reset, within WAIT).
async fn read_to_end<S: AsyncRead + Unpin>(stream: &mut S, mut received: Vec<u8>) -> Vec<u8> {
    let mut chunk = [0u8; 1024];
    loop {
        match timeout(WAIT, stream.read(&mut chunk))
            .await
            .expect("the daemon kept the connection open")
        {
            Ok(0) | Err(_) => return received,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The first server frame in `bytes`, which must be a close frame: its code and reason.
fn close_frame(bytes: &[u8]) -> (u16, String) {
    assert!(bytes.len() >= 4, "no close frame before the end: {bytes:?}");
    assert_eq!(bytes[0], 0x88, "not a final close frame: {bytes:?}");
    let len = usize::from(bytes[1]);
    assert!(
        len <= 125 && bytes[1] & 0x80 == 0,
        "server frames are unmasked"
    );
    let payload = &bytes[2..2 + len];
    let code = u16::from_be_bytes([payload[0], payload[1]]);
    (code, String::from_utf8(payload[2..].to_vec()).unwrap())
}

async fn create_link(daemon: &DaemonHandle, transport: Transport) -> LinkCreateResult {
    memory_client(daemon)
        .call::<LinkCreate>(LinkCreateParams::default().with_transport(Some(transport)))
        .await
        .unwrap()
}

async fn next_json<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) -> Value {
    loop {
        match timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Text(text))) => return serde_json::from_str(text.as_str()).unwrap(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a text message, got {other:?}"),
        }
    }
}

/// A web session claimed over a real socket.
async fn healthy_web_session(daemon: &DaemonHandle) -> WebSocketStream<TcpStream> {
    let link = create_link(daemon, Transport::Web).await;
    let tcp = TcpStream::connect(daemon.web_addr()).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{}/", daemon.web_addr()), tcp)
        .await
        .unwrap();
    ws.send(Message::Text(
        claim_frame(&link.session_id, &claim_token(&link), "Healthy")
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    assert_eq!(next_json(&mut ws).await["type"], "session_ack");
    ws
}

async fn still_answers_pings(ws: &mut WebSocketStream<TcpStream>) {
    ws.send(Message::Ping(b"alive".to_vec().into()))
        .await
        .unwrap();
    loop {
        match timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Pong(payload))) => {
                assert_eq!(payload.as_ref(), b"alive");
                return;
            }
            Some(Ok(_)) => continue,
            other => panic!("the healthy session ended: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_violation_on_the_web_listener_gets_its_close_code_before_tcp_ends() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut healthy = healthy_web_session(&daemon).await;
    let host = format!("127.0.0.1:{}", daemon.web_addr().port());
    for (name, bytes, code, reason) in violations() {
        let mut stream = TcpStream::connect(daemon.web_addr()).await.unwrap();
        let early = upgrade(&mut stream, &host).await;
        stream.write_all(&bytes).await.unwrap();
        let received = read_to_end(&mut stream, early).await;
        assert_eq!(
            close_frame(&received),
            (code, reason.to_owned()),
            "{name}: {received:?}"
        );
    }
    still_answers_pings(&mut healthy).await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_violation_over_tls_on_the_wss_listener_gets_its_close_code() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut healthy = healthy_web_session(&daemon).await;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, daemon.wss_addr().port()));
    for (name, bytes, code, reason) in violations() {
        let mut tls = tls_support::connect(addr, "127.0.0.1", daemon.pin())
            .await
            .unwrap();
        let early = upgrade(&mut tls, "127.0.0.1").await;
        tls.write_all(&bytes).await.unwrap();
        tls.flush().await.unwrap();
        let received = read_to_end(&mut tls, early).await;
        assert_eq!(
            close_frame(&received),
            (code, reason.to_owned()),
            "{name}: {received:?}"
        );
    }
    still_answers_pings(&mut healthy).await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_violation_after_the_ack_closes_1002_and_suspends_the_session_for_a_resume() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut bus = daemon.events().subscribe_all();
    let link = create_link(&daemon, Transport::Web).await;
    let mut stream = TcpStream::connect(daemon.web_addr()).await.unwrap();
    let host = format!("127.0.0.1:{}", daemon.web_addr().port());
    let mut early = upgrade(&mut stream, &host).await;
    let claim = claim_frame(&link.session_id, &claim_token(&link), "Broken").to_string();
    stream
        .write_all(&masked(0x81, claim.as_bytes()))
        .await
        .unwrap();
    event_of(&mut bus, EventKind::SessionClaimed).await;
    // RSV1 on an otherwise valid frame of the claimed session.
    stream.write_all(&masked(0xC1, b"{}")).await.unwrap();
    let received = read_to_end(&mut stream, std::mem::take(&mut early)).await;
    // The ack comes first: skip that text frame (unmasked, 7-bit or 16-bit length).
    assert_eq!(received[0], 0x81, "{received:?}");
    let (skip, len) = match received[1] {
        126 => (
            4,
            usize::from(u16::from_be_bytes([received[2], received[3]])),
        ),
        len => (2, usize::from(len)),
    };
    let rest = &received[skip + len..];
    assert_eq!(close_frame(rest), (1002, "protocol_error".to_owned()));
    // 1002 is not terminal: the session waits for a resume.
    event_of(&mut bus, EventKind::SessionSuspended).await;
    daemon.shutdown().await;
}
