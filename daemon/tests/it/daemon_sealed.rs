//! The sealed transport against the composed daemon (issue #23; PROTOCOL.md "Sealed
//! transport"): a real Noise initiator (`appduct_protocol::sealed`) over a loopback plain
//! WebSocket to the wss port. Claims, calls, the close table of the plain route, cleartext
//! claims, wrong transports both ways, and the pre-claim budget under pending handshakes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;
use crate::tls_support;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use appduct_daemon::daemon::{Daemon, DaemonHandle, DaemonOptions};
use appduct_daemon::links::random_bytes;
use appduct_protocol::bootstrap;
use appduct_protocol::control::{
    DaemonStatus, EventKind, LinkCreate, LinkCreateParams, LinkCreateResult, NoParams, RngSource,
    SessionsList, Transport,
};
use appduct_protocol::sealed::{
    self, Initiator, Opened, RngSource as HelloRng, SealedReceiver, SealedSender, StaticKeypair,
};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use daemon_support::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

type Ws = WebSocketStream<TcpStream>;

async fn create_link(daemon: &DaemonHandle, transport: Transport) -> LinkCreateResult {
    memory_client(daemon)
        .call::<LinkCreate>(LinkCreateParams::default().with_transport(Some(transport)))
        .await
        .unwrap()
}

fn wss_v4(daemon: &DaemonHandle) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, daemon.wss_addr().port()))
}

/// The static key a sealed link carries.
fn link_key(link: &LinkCreateResult) -> [u8; 32] {
    bootstrap::decode_sealed(&link.deep_link_payload)
        .unwrap()
        .static_key
}

fn sealed_claim_token(link: &LinkCreateResult) -> String {
    bootstrap::decode_sealed(&link.deep_link_payload)
        .unwrap()
        .payload
        .token
        .to_base64url()
}

/// A plain WebSocket to the wss port (the plain route), upgraded.
async fn plain_ws(addr: SocketAddr) -> Ws {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (ws, response) = timeout(
        WAIT,
        tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(response.status(), 101);
    ws
}

/// An app's end of a sealed channel.
struct SealedApp {
    ws: Ws,
    tx: SealedSender,
    rx: SealedReceiver,
    /// Every record sent, for replay tests.
    sent: Vec<Vec<u8>>,
}

/// What ended a connection, seen from the app.
#[derive(Debug, PartialEq, Eq)]
struct Ended {
    /// The close record, when the channel could still seal one.
    record: Option<(u16, String)>,
    /// The WebSocket close frame.
    close: Option<(u16, String)>,
}

fn message1(key: [u8; 32]) -> (Initiator, Vec<u8>) {
    let mut initiator = Initiator::new(key, random_bytes::<32>().unwrap(), HelloRng::Drbg).unwrap();
    let m1 = initiator.write_message1().unwrap();
    (initiator, m1)
}

/// Runs the handshake; `Err` is how the daemon ended the connection instead.
async fn sealed_connect(addr: SocketAddr, key: [u8; 32]) -> Result<SealedApp, Ended> {
    let mut ws = plain_ws(addr).await;
    let (mut initiator, m1) = message1(key);
    ws.send(Message::Binary(m1.into())).await.unwrap();
    loop {
        match timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Binary(m2))) => {
                initiator.read_message2(&m2).unwrap();
                let (tx, rx) = initiator.into_transport().unwrap().split();
                return Ok(SealedApp {
                    ws,
                    tx,
                    rx,
                    sent: Vec::new(),
                });
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(frame))) => {
                let close = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                drain(&mut ws).await;
                return Err(Ended {
                    record: None,
                    close,
                });
            }
            other => panic!("expected message 2, got {other:?}"),
        }
    }
}

async fn drain<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) {
    while let Ok(Some(Ok(_))) = timeout(WAIT, ws.next()).await {}
}

/// A close frame (and what precedes it is ignored), for connections without a channel.
async fn expect_plain_close(ws: &mut Ws) -> (u16, String) {
    loop {
        match timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Close(Some(frame)))) => {
                drain(ws).await;
                return (u16::from(frame.code), frame.reason.to_string());
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    }
}

impl SealedApp {
    async fn send_frame(&mut self, frame: &Value) {
        for record in self.tx.seal_frame(&frame.to_string()).unwrap() {
            self.sent.push(record.clone());
            self.ws.send(Message::Binary(record.into())).await.unwrap();
        }
    }

    async fn send_raw(&mut self, record: Vec<u8>) {
        self.ws.send(Message::Binary(record.into())).await.unwrap();
    }

    /// The next v2 frame; panics on anything else.
    async fn next_frame(&mut self) -> Value {
        loop {
            match timeout(WAIT, self.ws.next()).await.unwrap() {
                Some(Ok(Message::Binary(record))) => match self.rx.open_record(&record).unwrap() {
                    Some(Opened::Frame(text)) => return serde_json::from_str(&text).unwrap(),
                    Some(other) => panic!("expected a frame, got {other:?}"),
                    None => continue,
                },
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => panic!("expected a record, got {other:?}"),
            }
        }
    }

    /// Reads until the connection ends; frames before the close are skipped.
    async fn ended(mut self) -> Ended {
        let mut record = None;
        loop {
            match timeout(WAIT, self.ws.next()).await.unwrap() {
                Some(Ok(Message::Binary(bytes))) => {
                    if let Ok(Some(Opened::Close { code, reason })) = self.rx.open_record(&bytes) {
                        record = Some((code, reason));
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    drain(&mut self.ws).await;
                    return Ended {
                        record,
                        close: frame.map(|f| (u16::from(f.code), f.reason.to_string())),
                    };
                }
                Some(Ok(_)) => continue,
                None | Some(Err(_)) => {
                    return Ended {
                        record,
                        close: None,
                    };
                }
            }
        }
    }

    async fn claim(&mut self, link: &LinkCreateResult, model: &str) -> Value {
        let frame = claim_frame(&link.session_id, &sealed_claim_token(link), model);
        self.send_frame(&frame).await;
        self.next_frame().await
    }
}

/// A close with a close record is followed by a bare `1000` WebSocket close (the code and
/// reason travel only sealed); without one, the WebSocket close carries them.
fn ended_with(code: u16, reason: &str, record: bool) -> Ended {
    let pair = (code, reason.to_owned());
    if record {
        Ended {
            record: Some(pair),
            close: Some((1000, String::new())),
        }
    } else {
        Ended {
            record: None,
            close: Some(pair),
        }
    }
}

/// Claims a fresh sealed link over the plain route; the app and its ack.
async fn sealed_claim(daemon: &DaemonHandle, model: &str) -> (SealedApp, Value, LinkCreateResult) {
    let link = create_link(daemon, Transport::Sealed).await;
    let mut app = sealed_connect(wss_v4(daemon), link_key(&link))
        .await
        .unwrap();
    let ack = app.claim(&link, model).await;
    assert_eq!(ack["type"], "session_ack", "{ack}");
    (app, ack, link)
}

/// A loopback TCP relay that records every byte both ways.
struct Recorder {
    addr: SocketAddr,
    bytes: Arc<Mutex<Vec<u8>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&bytes);
        let task = tokio::spawn(async move {
            let mut pipes = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(upstream).await.unwrap();
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                pipes.spawn(pipe(cr, sw, Arc::clone(&seen)));
                pipes.spawn(pipe(sr, cw, Arc::clone(&seen)));
            }
        });
        Self {
            addr,
            bytes,
            _task: task,
        }
    }

    fn captured(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().clone()
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    seen: Arc<Mutex<Vec<u8>>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        seen.lock().unwrap().extend_from_slice(&buf[..n]);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// The daemon's sealed key derived as PROTOCOL.md says, from the PKCS#8 DER of `key.pem`.
fn expected_sealed_key(daemon: &DaemonHandle) -> String {
    let pem = std::fs::read_to_string(daemon.state_dir().path().join("key.pem")).unwrap();
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN PRIVATE KEY-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    let der = STANDARD.decode(body).unwrap();
    URL_SAFE_NO_PAD.encode(StaticKeypair::from_host_key_der(&der).public_key())
}

#[tokio::test]
async fn sealed_claim_and_call_round_trip_with_nothing_in_cleartext() {
    let dir = state_dir();
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()))
        .await
        .unwrap();
    let mut bus = daemon.events().subscribe_all();
    let client = memory_client(&daemon);

    // The link: v3 payload with the daemon's key, on the wss port, `sealedKey` beside it.
    let link = create_link(&daemon, Transport::Sealed).await;
    assert_eq!(link.transport, Transport::Sealed);
    assert_eq!(link.endpoint.port, daemon.wss_addr().port());
    assert!(
        bootstrap::decode(&link.deep_link_payload).is_err(),
        "v2 decoders refuse it"
    );
    let status = client.call::<DaemonStatus>(NoParams {}).await.unwrap();
    let key_text = expected_sealed_key(&daemon);
    assert_eq!(status.sealed_key.as_deref(), Some(key_text.as_str()));
    assert_eq!(link.sealed_key.as_deref(), Some(key_text.as_str()));
    assert_eq!(URL_SAFE_NO_PAD.encode(link_key(&link)), key_text);

    let recorder = Recorder::start(wss_v4(&daemon)).await;
    let mut app = sealed_connect(recorder.addr, link_key(&link))
        .await
        .unwrap();
    let ack = app.claim(&link, "Pixel 8").await;
    assert_eq!(ack["type"], "session_ack", "{ack}");
    let resume_token = ack["resume_token"].as_str().unwrap().to_owned();
    event_of(&mut bus, EventKind::SessionClaimed).await;

    app.send_frame(
        &json!({"type": "tool_registry_snapshot", "session_id": link.session_id,
        "tools": [{"name": "needle_tool_name", "description": "Finds needles."}]}),
    )
    .await;
    let sessions = daemon.sessions().clone();
    let id = link.session_id.clone();
    until(move || sessions.tools_of(&id).is_some_and(|t| t.len() == 1)).await;

    let mut raw = RawControl::new(&daemon);
    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools.call",
        "params": {"name": "needle_tool_name", "args": {"q": "needle-argument-value"}}}))
        .await;
    let call = app.next_frame().await;
    assert_eq!(call["type"], "tool_call", "{call}");
    assert_eq!(call["name"], "needle_tool_name");
    assert_eq!(call["args"], json!({"q": "needle-argument-value"}));
    app.send_frame(
        &json!({"type": "tool_result", "session_id": link.session_id,
        "id": call["id"], "result": {"found": "needle-result-value"}}),
    )
    .await;
    let reply = raw.next().await.unwrap();
    assert_eq!(
        reply["result"]["result"],
        json!({"found": "needle-result-value"})
    );

    // The session shows its transport and the app's randomness source.
    let listed = client.call::<SessionsList>(NoParams {}).await.unwrap();
    assert_eq!(listed[0].transport, Transport::Sealed);
    assert_eq!(listed[0].rng, Some(RngSource::Drbg));

    // The end: the reason travels only in the close record; the WebSocket close is bare.
    raw.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "sessions.revoke",
        "params": {"selector": link.session_id}}),
    )
    .await;
    assert_eq!(app.ended().await, ended_with(1000, "revoked", true));

    // The wire: no tool name, argument, result, token, frame type or close reason in the clear.
    let wire = recorder.captured();
    assert!(wire.len() > 500, "the relay saw the session");
    for secret in [
        "needle_tool_name",
        "needle-argument-value",
        "needle-result-value",
        "Finds needles",
        "session_claim",
        "tool_call",
        "Pixel 8",
        sealed_claim_token(&link).as_str(),
        resume_token.as_str(),
        "revoked",
    ] {
        assert!(!contains(&wire, secret), "{secret:?} in cleartext");
    }
    daemon.shutdown().await;
}

#[tokio::test]
async fn wrong_static_key_fails_the_handshake_and_the_link_stays_claimable() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let link = create_link(&daemon, Transport::Sealed).await;
    let other = *StaticKeypair::from_private_bytes([9; 32]).public_key();
    let refused = sealed_connect(wss_v4(&daemon), other).await.err().unwrap();
    assert_eq!(refused, ended_with(1008, "sealed_handshake_failed", false));
    let mut app = sealed_connect(wss_v4(&daemon), link_key(&link))
        .await
        .unwrap();
    assert_eq!(app.claim(&link, "Pixel 8").await["type"], "session_ack");
    daemon.shutdown().await;
}

#[tokio::test]
async fn garbage_and_malformed_handshakes_get_defined_closes() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let addr = wss_v4(&daemon);
    let key = link_key(&create_link(&daemon, Transport::Sealed).await);

    // Neither TLS nor HTTP: TCP ends, nothing is answered.
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"\x00garbage").await.unwrap();
    let mut buf = Vec::new();
    let read = timeout(WAIT, tcp.read_to_end(&mut buf)).await.unwrap();
    assert!(read.is_err() || buf.is_empty(), "answered {buf:?}");

    // Message 1 too short, too long, or undecryptable.
    for bad in [vec![0u8; 47], vec![0u8; 305], vec![0u8; 48], vec![7u8; 120]] {
        let mut ws = plain_ws(addr).await;
        ws.send(Message::Binary(bad.clone().into())).await.unwrap();
        assert_eq!(
            expect_plain_close(&mut ws).await,
            (1008, "sealed_handshake_failed".to_owned()),
            "{} bytes",
            bad.len()
        );
    }
    // Message 1 with a payload that is not the agreed JSON.
    let mut initiator =
        Initiator::with_hello_payload(key, random_bytes::<32>().unwrap(), b"not json".to_vec())
            .unwrap();
    let mut ws = plain_ws(addr).await;
    ws.send(Message::Binary(initiator.write_message1().unwrap().into()))
        .await
        .unwrap();
    assert_eq!(
        expect_plain_close(&mut ws).await,
        (1008, "sealed_handshake_failed".to_owned())
    );
    // A first message over a record's size: refused before it is buffered.
    let mut ws = plain_ws(addr).await;
    let _ = ws
        .send(Message::Binary(
            vec![0u8; sealed::MAX_RECORD_BYTES + 1].into(),
        ))
        .await;
    assert_eq!(
        expect_plain_close(&mut ws).await,
        (1009, "message_too_big".to_owned())
    );
    // Text that is not a link refusal.
    let mut ws = plain_ws(addr).await;
    ws.send(Message::Text("hello".into())).await.unwrap();
    assert_eq!(
        expect_plain_close(&mut ws).await,
        (1008, "expected_sealed_handshake".to_owned())
    );

    // The daemon still serves sealed claims.
    let (_app, _, _) = sealed_claim(&daemon, "Pixel 8").await;
    daemon.shutdown().await;
}

#[tokio::test]
async fn bad_records_close_sealed_record_invalid_and_spare_other_sessions() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut bus = daemon.events().subscribe_all();
    // The bystander: a sealed session with a tool.
    let (mut other, _, other_link) = sealed_claim(&daemon, "Bystander").await;
    other
        .send_frame(
            &json!({"type": "tool_registry_snapshot", "session_id": other_link.session_id,
            "tools": [{"name": "ping", "description": "Answers."}]}),
        )
        .await;
    let sessions = daemon.sessions().clone();
    let id = other_link.session_id.clone();
    until(move || sessions.tools_of(&id).is_some_and(|t| t.len() == 1)).await;

    type Spoil = fn(&mut SealedApp) -> Vec<u8>;
    let spoilers: [(&str, Spoil); 4] = [
        ("tampered", |app| {
            let mut record = app
                .tx
                .seal_frame(&json!({"type": "event"}).to_string())
                .unwrap()
                .remove(0);
            record[3] ^= 0x40;
            record
        }),
        ("replayed", |app| app.sent[0].clone()),
        ("truncated", |app| {
            let mut record = app.tx.seal_frame("{}").unwrap().remove(0);
            record.pop();
            record
        }),
        ("shorter than a tag", |_| vec![1, 2, 3]),
    ];
    for (what, spoil) in spoilers {
        let (mut app, _, link) = sealed_claim(&daemon, what).await;
        let record = spoil(&mut app);
        app.send_raw(record).await;
        assert_eq!(
            app.ended().await,
            ended_with(1008, "sealed_record_invalid", false),
            "{what}"
        );
        // Suspended like any socket loss, not revoked.
        loop {
            let e = event_of(&mut bus, EventKind::SessionSuspended).await;
            if e.session_id.as_deref() == Some(link.session_id.as_str()) {
                break;
            }
        }
    }

    // A message over a record's size after the handshake: 1009, sealed as a close record first.
    let (mut app, _, _) = sealed_claim(&daemon, "Bigger").await;
    let _ = app
        .ws
        .send(Message::Binary(
            vec![0u8; sealed::MAX_RECORD_BYTES + 1].into(),
        ))
        .await;
    assert_eq!(app.ended().await, ended_with(1009, "message_too_big", true));

    // A text message after the handshake: 1002, sealed as a close record first.
    let (mut app, _, _) = sealed_claim(&daemon, "Texter").await;
    app.ws.send(Message::Text("{}".into())).await.unwrap();
    assert_eq!(app.ended().await, ended_with(1002, "protocol_error", true));

    // The bystander still works.
    let mut raw = RawControl::new(&daemon);
    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools.call",
        "params": {"selector": "bystander", "name": "ping"}}))
        .await;
    let call = other.next_frame().await;
    assert_eq!(call["name"], "ping");
    other
        .send_frame(
            &json!({"type": "tool_result", "session_id": other_link.session_id,
            "id": call["id"], "result": "pong"}),
        )
        .await;
    assert_eq!(raw.next().await.unwrap()["result"]["result"], "pong");

    // A v2 close sent by the daemon is sealed: revoke gives a close record, then the close.
    raw.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "sessions.revoke",
        "params": {"selector": "bystander"}}),
    )
    .await;
    assert_eq!(other.ended().await, ended_with(1000, "revoked", true));
    daemon.shutdown().await;
}

#[tokio::test]
async fn cleartext_claims_on_the_plain_route_are_refused_and_a_leaked_token_revokes() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    let mut bus = daemon.events().subscribe_all();
    let addr = wss_v4(&daemon);
    let link = create_link(&daemon, Transport::Sealed).await;

    // A wrong token in cleartext: refused, nothing counted or revoked.
    let mut ws = plain_ws(addr).await;
    let forged = claim_frame(&link.session_id, &URL_SAFE_NO_PAD.encode([0u8; 32]), "X");
    ws.send(Message::Text(forged.to_string().into()))
        .await
        .unwrap();
    assert_eq!(
        expect_plain_close(&mut ws).await,
        (1008, "wrong_transport".to_owned())
    );
    assert_eq!(daemon.sessions().pending_links(), 1);

    // The right token in cleartext: refused the same way, and the link is revoked.
    let mut ws = plain_ws(addr).await;
    let leaked = claim_frame(&link.session_id, &sealed_claim_token(&link), "X");
    ws.send(Message::Text(leaked.to_string().into()))
        .await
        .unwrap();
    assert_eq!(
        expect_plain_close(&mut ws).await,
        (1008, "wrong_transport".to_owned())
    );
    let revoked = event_of(&mut bus, EventKind::SessionRevoked).await;
    assert_eq!(
        revoked.session_id.as_deref(),
        Some(link.session_id.as_str())
    );
    let mut app = sealed_connect(addr, link_key(&link)).await.unwrap();
    app.send_frame(&claim_frame(
        &link.session_id,
        &sealed_claim_token(&link),
        "Late",
    ))
    .await;
    assert_eq!(app.ended().await, ended_with(1008, "unknown_session", true));

    // A live session's resume token in cleartext: the session is revoked.
    let (app, ack, live) = sealed_claim(&daemon, "Pixel 8").await;
    let mut ws = plain_ws(addr).await;
    let resume = json!({"type": "session_resume", "protocol_version": 2,
        "session_id": live.session_id, "resume_token": ack["resume_token"]});
    ws.send(Message::Text(resume.to_string().into()))
        .await
        .unwrap();
    assert_eq!(
        expect_plain_close(&mut ws).await,
        (1008, "wrong_transport".to_owned())
    );
    assert_eq!(app.ended().await, ended_with(1000, "revoked", true));
    assert!(daemon.sessions().list().is_empty());
    daemon.shutdown().await;
}

#[tokio::test]
async fn links_are_refused_on_the_other_transport_both_ways() {
    let dir = state_dir();
    let daemon = start(dir.path()).await;
    // A sealed link over TLS.
    let link = create_link(&daemon, Transport::Sealed).await;
    let tls = tls_support::connect(wss_v4(&daemon), "127.0.0.1", daemon.pin())
        .await
        .unwrap();
    let (mut wss, _) = tokio_tungstenite::client_async("wss://127.0.0.1/", tls)
        .await
        .unwrap();
    let frame = claim_frame(&link.session_id, &sealed_claim_token(&link), "X");
    wss.send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
    let close = loop {
        match timeout(WAIT, wss.next()).await.unwrap() {
            Some(Ok(Message::Close(Some(f)))) => break (u16::from(f.code), f.reason.to_string()),
            Some(Ok(_)) => continue,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(close, (1008, "wrong_transport".to_owned()));

    // A native link over the sealed route.
    let native = create_link(&daemon, Transport::Native).await;
    let key = link_key(&link);
    let mut app = sealed_connect(wss_v4(&daemon), key).await.unwrap();
    app.send_frame(&claim_frame(&native.session_id, &claim_token(&native), "X"))
        .await;
    assert_eq!(app.ended().await, ended_with(1008, "wrong_transport", true));

    // Both links are still claimable on their own transports.
    let mut app = sealed_connect(wss_v4(&daemon), key).await.unwrap();
    assert_eq!(app.claim(&link, "Pixel 8").await["type"], "session_ack");
    daemon.shutdown().await;
}

#[tokio::test]
async fn pending_handshakes_are_bounded_by_the_preclaim_budget_and_deadline() {
    let dir = state_dir();
    let daemon = Daemon::start(
        DaemonOptions::for_tests(dir.path())
            .pre_claim_timeout(Duration::from_millis(1500))
            .max_preclaim_connections(32),
    )
    .await
    .unwrap();
    let addr = wss_v4(&daemon);
    let link = create_link(&daemon, Transport::Sealed).await;
    let key = link_key(&link);

    // Hundreds of plain-route connections that upgrade and never send message 1, and some
    // that finish the handshake and never claim: each ends (evicted or timed out), none stays.
    let mut waiters = JoinSet::new();
    let (settled_tx, mut settled) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..200 {
        let settled_tx = settled_tx.clone();
        waiters.spawn(async move {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let upgraded = timeout(
                WAIT,
                tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp),
            )
            .await;
            let Ok(Ok((mut ws, _))) = upgraded else {
                let _ = settled_tx.send(());
                return; // evicted during the upgrade
            };
            if i % 10 == 0 {
                let (_, m1) = message1(key);
                let _ = ws.send(Message::Binary(m1.into())).await;
            }
            let _ = settled_tx.send(());
            // Ends with a close or TCP loss, well within the bound.
            timeout(WAIT, async { while let Some(Ok(_)) = ws.next().await {} })
                .await
                .expect("a pending handshake outlived the pre-claim deadline");
        });
    }
    // A real app still gets through while the flood holds the budget.
    for _ in 0..200 {
        timeout(WAIT, settled.recv()).await.unwrap();
    }
    let mut app = sealed_connect(addr, key).await.unwrap();
    assert_eq!(app.claim(&link, "Pixel 8").await["type"], "session_ack");
    while let Some(done) = waiters.join_next().await {
        done.unwrap();
    }
    until({
        let sessions = daemon.sessions().clone();
        move || sessions.connection_count() == 1
    })
    .await;
    daemon.shutdown().await;
}
