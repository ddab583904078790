//! Real device sockets against the composed daemon (§D2, §D3; §S3.6): a native app that
//! checks the daemon's SPKI pin before sending anything claims over TLS on the wss listener, a
//! web page claims on the loopback web listener, and both receive `1001 daemon_shutdown` when
//! the daemon stops.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;
use crate::tls_support;

use std::net::{Ipv4Addr, SocketAddr};

use appduct_daemon::daemon::DaemonHandle;
use appduct_protocol::control::{
    EventKind, LinkCreate, LinkCreateParams, LinkCreateResult, NoParams, SessionsList, Transport,
};
use appduct_protocol::pin::SpkiPin;
use daemon_support::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

async fn tls_connect(
    port: u16,
    pin: SpkiPin,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, std::io::Error> {
    tls_support::connect(
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        "127.0.0.1",
        pin,
    )
    .await
}

async fn next_json<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) -> Value {
    loop {
        match timeout(WAIT, ws.next()).await.unwrap().unwrap().unwrap() {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text message, got {other:?}"),
        }
    }
}

/// The close frame the daemon sends, as `(code, reason)`.
async fn next_close<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
) -> (u16, String) {
    loop {
        match timeout(WAIT, ws.next()).await.unwrap().unwrap().unwrap() {
            Message::Close(Some(frame)) => {
                // Polling on answers the close, so the daemon's handshake wait ends at once.
                while let Ok(Some(Ok(_))) = timeout(WAIT, ws.next()).await {}
                return (u16::from(frame.code), frame.reason.to_string());
            }
            Message::Ping(_) | Message::Pong(_) | Message::Text(_) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    }
}

async fn claim_over<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    link: &LinkCreateResult,
    model: &str,
) -> Value {
    ws.send(Message::Text(
        claim_frame(&link.session_id, &claim_token(link), model)
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    next_json(ws).await
}

async fn create_link(daemon: &DaemonHandle, transport: Transport) -> LinkCreateResult {
    memory_client(daemon)
        .call::<LinkCreate>(LinkCreateParams::default().with_transport(Some(transport)))
        .await
        .unwrap()
}

#[tokio::test]
async fn native_and_web_claims_over_real_sockets_then_shutdown_closes_both_1001() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut bus = daemon.events().subscribe_all();

    // Native: TLS to the wss port, pin checked before any frame.
    let native = create_link(&daemon, Transport::Native).await;
    assert_eq!(native.pin, daemon.pin().to_string());
    assert_eq!(native.endpoint.port, daemon.wss_addr().port());
    let tls = tls_connect(native.endpoint.port, SpkiPin::parse(&native.pin).unwrap())
        .await
        .unwrap();
    let (_, server) = tls.get_ref();
    let served = server.peer_certificates().unwrap()[0].clone();
    assert_eq!(served, daemon.leaf_der());
    let (mut app, response) = timeout(
        WAIT,
        tokio_tungstenite::client_async("wss://127.0.0.1/", tls),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(response.status(), 101);
    let ack = claim_over(&mut app, &native, "Pixel 8").await;
    assert_eq!(ack["type"], "session_ack", "{ack}");
    assert_eq!(ack["alias"], "pixel-8");
    event_of(&mut bus, EventKind::SessionClaimed).await;

    // Web: plain ws on the loopback web listener.
    let web = create_link(&daemon, Transport::Web).await;
    assert_eq!(web.endpoint.port, daemon.web_addr().port());
    let tcp = TcpStream::connect(daemon.web_addr()).await.unwrap();
    let (mut page, response) = timeout(
        WAIT,
        tokio_tungstenite::client_async(format!("ws://{}/", daemon.web_addr()), tcp),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(response.status(), 101);
    let ack = claim_over(&mut page, &web, "Pixel 8").await;
    assert_eq!(ack["type"], "session_ack", "{ack}");
    assert_ne!(
        ack["alias"], "pixel-8",
        "aliases are unique among live sessions"
    );
    event_of(&mut bus, EventKind::SessionClaimed).await;

    let sessions = memory_client(&daemon)
        .call::<SessionsList>(NoParams {})
        .await
        .unwrap();
    let mut transports: Vec<Transport> = sessions.iter().map(|s| s.transport).collect();
    transports.sort_by_key(|t| t.as_str());
    assert_eq!(transports, [Transport::Native, Transport::Web]);

    // A link is claimable only on its own listener: a web link over wss is refused.
    let wrong = create_link(&daemon, Transport::Web).await;
    let tls = tls_connect(daemon.wss_addr().port(), daemon.pin())
        .await
        .unwrap();
    let (mut stray, _) = tokio_tungstenite::client_async("wss://127.0.0.1/", tls)
        .await
        .unwrap();
    stray
        .send(Message::Text(
            claim_frame(&wrong.session_id, &claim_token(&wrong), "X")
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
    let (code, _) = next_close(&mut stray).await;
    assert_eq!(code, 1008);

    let shutdown = {
        let daemon = daemon.clone();
        tokio::spawn(async move { daemon.shutdown().await })
    };
    for ws_close in [next_close(&mut app).await, next_close(&mut page).await] {
        assert_eq!(ws_close, (1001, "daemon_shutdown".to_owned()));
    }
    shutdown.await.unwrap();
    assert!(!dir.path().join("daemon.sock").exists());
    // The listeners are closed.
    assert!(TcpStream::connect(daemon.web_addr()).await.is_err());
    assert!(
        TcpStream::connect(SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            daemon.wss_addr().port()
        )))
        .await
        .is_err()
    );
}

#[tokio::test]
async fn a_client_pinning_another_key_never_completes_the_handshake() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let other = SpkiPin::from_spki_der(b"not the daemon's key");
    assert!(tls_connect(daemon.wss_addr().port(), other).await.is_err());
    daemon.shutdown().await;
}

/// The next ping or pong from the daemon (text frames skipped).
async fn next_control<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) -> Message {
    loop {
        match timeout(WAIT, ws.next()).await.unwrap().unwrap().unwrap() {
            Message::Text(_) => continue,
            other => return other,
        }
    }
}

#[tokio::test]
async fn a_claimed_session_answers_each_ping_with_one_pong() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let web = create_link(&daemon, Transport::Web).await;
    let tcp = TcpStream::connect(daemon.web_addr()).await.unwrap();
    let (mut page, _) = timeout(
        WAIT,
        tokio_tungstenite::client_async(format!("ws://{}/", daemon.web_addr()), tcp),
    )
    .await
    .unwrap()
    .unwrap();
    let ack = claim_over(&mut page, &web, "Pixel 8").await;
    assert_eq!(ack["type"], "session_ack", "{ack}");
    // Each ping waits for its pong: a second pong for the first ping (issue #24: the socket
    // adapter and the session engine both answered) would arrive before the second one's.
    for payload in [b"first".as_slice(), b"second", b"third"] {
        page.send(Message::Ping(payload.to_vec().into()))
            .await
            .unwrap();
        assert_eq!(
            next_control(&mut page).await,
            Message::Pong(payload.to_vec().into())
        );
    }
    daemon.shutdown().await;
}
