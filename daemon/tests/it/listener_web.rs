//! Real-socket tests of the loopback web listener (§D2.2, §D6; SEC-25..27, SEC-33) and of the
//! tungstenite adapter behind it.

use crate::listener_support;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use appduct_daemon::device_socket::{ConnectionEnd, Incoming, WireMessage};
use appduct_daemon::listener::{self, RunningListener, Transport};
use appduct_protocol::limits;
use futures_util::{SinkExt, StreamExt};
use listener_support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

const CONFIGURED: &str = "http://devbox.lan:5173";

fn start_web(harness: &Harness) -> Result<RunningListener, Box<dyn std::error::Error>> {
    let listener = listener::bind_web()?;
    Ok(listener::serve_web(
        listener,
        vec![CONFIGURED.to_owned()],
        harness.ctx.clone(),
    )?)
}

fn upgrade_request(host: &str, origins: &[&str]) -> String {
    let mut request = format!(
        "GET /any/path?q=1 HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\n\
         Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: appduct\r\n"
    );
    for origin in origins {
        request.push_str(&format!("Origin: {origin}\r\n"));
    }
    request.push_str("\r\n");
    request
}

async fn client(
    addr: SocketAddr,
) -> Result<WebSocketStream<TcpStream>, Box<dyn std::error::Error>> {
    let tcp = TcpStream::connect(addr).await?;
    let url = format!("ws://{addr}/ignored/path?x=1");
    let (ws, response) = timeout(WAIT, tokio_tungstenite::client_async(url, tcp)).await??;
    assert_eq!(response.status(), 101);
    Ok(ws)
}

async fn client_message(
    ws: &mut WebSocketStream<TcpStream>,
) -> Result<Message, Box<dyn std::error::Error>> {
    Ok(timeout(WAIT, ws.next())
        .await?
        .ok_or("client stream ended")??)
}

#[tokio::test]
async fn refused_upgrades_get_426_or_403_and_deliver_nothing() -> TestResult {
    let mut h = harness(8, LONG);
    let web = start_web(&h)?;
    let addr = web.local_addr();
    let host = format!("127.0.0.1:{}", addr.port());

    let plain = exchange(addr, &format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n")).await?;
    assert!(plain.starts_with("HTTP/1.1 426 "), "{plain}");
    assert!(
        plain
            .to_ascii_lowercase()
            .contains("\r\nupgrade: websocket\r\n"),
        "{plain}"
    );

    let post = exchange(
        addr,
        &format!("POST / HTTP/1.1\r\nHost: {host}\r\nContent-Length: 3\r\n\r\nabc"),
    )
    .await?;
    assert!(post.starts_with("HTTP/1.1 426 "), "{post}");

    let bad_host = exchange(
        addr,
        &upgrade_request(&format!("evil.example:{}", addr.port()), &[]),
    )
    .await?;
    assert!(bad_host.starts_with("HTTP/1.1 403 "), "{bad_host}");
    let wrong_port = exchange(addr, &upgrade_request("localhost:1", &[])).await?;
    assert!(wrong_port.starts_with("HTTP/1.1 403 "), "{wrong_port}");

    for origins in [
        &["https://evil.example"][..],
        &["null"],
        &["http://localhost.evil.example"],
        &["http://localhost:3000/"],
        &["http://localhost:3000", "http://localhost:3000"],
        &["http://localhost:3000", CONFIGURED],
    ] {
        let answer = exchange(addr, &upgrade_request(&host, origins)).await?;
        assert!(answer.starts_with("HTTP/1.1 403 "), "{origins:?}: {answer}");
    }

    assert!(
        h.devices.try_recv().is_err(),
        "a refused upgrade delivers nothing"
    );
    Ok(())
}

#[tokio::test]
async fn loopback_and_configured_origins_upgrade_without_a_subprotocol() -> TestResult {
    let mut h = harness(32, LONG);
    let web = start_web(&h)?;
    let addr = web.local_addr();
    assert_eq!(addr.ip(), Ipv4Addr::LOCALHOST);
    let port = addr.port();

    let cases: Vec<(String, Vec<&str>)> = vec![
        (format!("127.0.0.1:{port}"), vec![]),
        (format!("LOCALHOST:{port}"), vec!["http://localhost:3000"]),
        (format!("[::1]:{port}"), vec!["https://127.0.0.1"]),
        (format!("localhost:{port}"), vec!["http://[::1]:8080"]),
        (format!("127.0.0.1:{port}"), vec![CONFIGURED]),
        (format!("127.0.0.1:{port}"), vec!["HTTP://DEVBOX.LAN:5173"]),
    ];
    for (host, origins) in cases {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(upgrade_request(&host, &origins).as_bytes())
            .await?;
        let head = read_head(&mut stream).await?;
        assert!(
            head.starts_with("HTTP/1.1 101 "),
            "{host} {origins:?}: {head}"
        );
        let lower = head.to_ascii_lowercase();
        assert!(head.contains("\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(
            !lower.contains("sec-websocket-protocol"),
            "never selects a subprotocol"
        );
        let device = next_device(&mut h.devices).await?;
        assert_eq!(device.transport, Transport::Web);
        assert_eq!(device.peer.ip(), Ipv4Addr::LOCALHOST);
    }
    Ok(())
}

#[tokio::test]
async fn adapter_round_trips_and_enforces_the_size_limit() -> TestResult {
    // SEC-30: 262144 accepted, 262145 closes 1009.
    let mut h = harness(8, Duration::from_secs(30));
    let web = start_web(&h)?;
    let started = Instant::now();
    let mut ws = client(web.local_addr()).await?;
    let mut device = next_device(&mut h.devices).await?;
    // The deadline runs from TCP accept, which lies between these two instants.
    assert!(device.claim_deadline >= started + Duration::from_secs(30));
    assert!(device.claim_deadline <= Instant::now() + Duration::from_secs(30));

    ws.send(Message::Text("{\"type\":\"session_claim\"}".into()))
        .await?;
    assert_eq!(
        timeout(WAIT, device.socket.recv()).await?,
        Incoming::Message(WireMessage::Text("{\"type\":\"session_claim\"}".to_owned()))
    );
    device
        .socket
        .sender()
        .send_text("{\"type\":\"session_ack\"}".to_owned())
        .await?;
    assert_eq!(
        client_message(&mut ws).await?,
        Message::Text("{\"type\":\"session_ack\"}".into())
    );

    ws.send(Message::Binary(vec![1, 2, 3].into())).await?;
    assert_eq!(
        timeout(WAIT, device.socket.recv()).await?,
        Incoming::Message(WireMessage::Binary(3))
    );

    ws.send(Message::Ping(b"hb".to_vec().into())).await?;
    assert_eq!(
        client_message(&mut ws).await?,
        Message::Pong(b"hb".to_vec().into())
    );
    assert_eq!(
        timeout(WAIT, device.socket.recv()).await?,
        Incoming::Message(WireMessage::Ping(b"hb".to_vec()))
    );

    let exact = "x".repeat(limits::MAX_MESSAGE_BYTES);
    ws.send(Message::Text(exact.clone().into())).await?;
    assert_eq!(
        timeout(WAIT, device.socket.recv()).await?,
        Incoming::Message(WireMessage::Text(exact))
    );

    ws.send(Message::Text(
        "y".repeat(limits::MAX_MESSAGE_BYTES + 1).into(),
    ))
    .await?;
    assert_eq!(
        timeout(WAIT, device.socket.recv()).await?,
        Incoming::TooBig {
            size: limits::MAX_MESSAGE_BYTES + 1
        }
    );
    match client_message(&mut ws).await? {
        Message::Close(Some(frame)) => {
            assert_eq!(u16::from(frame.code), 1009);
            assert_eq!(frame.reason.as_str(), "message_too_big");
        }
        other => panic!("expected close 1009, got {other:?}"),
    }
    drop(ws);
    assert_eq!(
        timeout(WAIT, device.socket.recv()).await?,
        Incoming::Ended(ConnectionEnd::Closed)
    );
    Ok(())
}

#[tokio::test]
async fn a_full_budget_evicts_the_oldest_connection_that_has_not_sent_a_message() -> TestResult {
    let mut h = harness(2, LONG);
    let web = start_web(&h)?;
    let addr = web.local_addr();
    let mut first_ws = client(addr).await?;
    let mut first = next_device(&mut h.devices).await?;
    let mut second_ws = client(addr).await?;
    let mut second = next_device(&mut h.devices).await?;
    assert_eq!(h.ctx.preclaim.in_use(), 2);

    // The first one's claim reaches the engine: it can no longer be evicted.
    first_ws.send(Message::Text("{}".into())).await?;
    assert_eq!(
        timeout(WAIT, first.socket.recv()).await?,
        Incoming::Message(WireMessage::Text("{}".to_owned()))
    );
    // A third connection evicts the oldest unprotected one (the second): TCP dropped, no close.
    let _third_ws = client(addr).await?;
    let third = next_device(&mut h.devices).await?;
    assert_eq!(third.transport, Transport::Web);
    assert_eq!(
        timeout(WAIT, second.socket.recv()).await?,
        Incoming::Ended(ConnectionEnd::Terminated)
    );
    let next = client_message(&mut second_ws).await;
    assert!(next.is_err(), "no frame after an eviction: {next:?}");
    assert_eq!(h.ctx.preclaim.in_use(), 2);
    // The first one is untouched.
    first.socket.sender().send_text("{}".to_owned()).await?;
    assert_eq!(
        client_message(&mut first_ws).await?,
        Message::Text("{}".into())
    );
    Ok(())
}

#[tokio::test]
async fn a_stalled_upgrade_is_dropped_at_the_preclaim_deadline() -> TestResult {
    let timeout_ms = 300;
    let mut h = harness(4, Duration::from_millis(timeout_ms));
    let web = start_web(&h)?;
    let started = Instant::now();
    let mut stream = TcpStream::connect(web.local_addr()).await?;
    stream.write_all(b"GET / HTTP/1.1\r\n").await?;
    let (received, _) = read_until_closed(&mut stream).await?;
    assert!(received.is_empty(), "dropped without an HTTP answer");
    assert!(started.elapsed() >= Duration::from_millis(timeout_ms));
    assert!(h.devices.try_recv().is_err());
    Ok(())
}

#[tokio::test]
async fn shutdown_stops_accepting_and_drops_handshakes() -> TestResult {
    let h = harness(4, LONG);
    let web = start_web(&h)?;
    let addr = web.local_addr();
    let mut pending = TcpStream::connect(addr).await?;
    // Wait until the listener took the connection, so shutdown finds it mid-handshake.
    pending.write_all(b"GET / HTTP/1.1\r\n").await?;
    timeout(WAIT, async {
        while h.ctx.preclaim.in_use() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await?;
    h.shutdown.send_replace(true);
    timeout(WAIT, web.stopped()).await?;
    let (received, _) = read_until_closed(&mut pending).await?;
    assert!(received.is_empty());
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
    Ok(())
}
