//! The sealed transport (issue #23) of the tokio client against an in-process responder
//! (`appduct_protocol::sealed`) over a real loopback WebSocket: the handshake, the claim and
//! calls carried in records, fragmentation, close records against bare WebSocket closes, a
//! wrong static key, a forged message 2, a tampered record, and the transport choice rules.

use crate::support;

use std::time::Duration;

use appduct_protocol::bootstrap::{BootstrapPayload, SealedBootstrapPayload};
use appduct_protocol::ids::ClaimToken;
use appduct_protocol::link::{
    RefusalReason, compose_deep_link, compose_sealed_deep_link, verify_refusal_proof,
};
use appduct_protocol::sealed::{
    Hello, Opened, Responder, RngSource, SealedChannel, SealedError, StaticKeypair,
};
use appduct_sdk::{Client, ClientState, ConnectError, ConnectOptions, ToolError, Transport};
use serde_json::{Value, json};
use support::{FakeConn, FakeDaemon, Read, SESSION, TOKEN_BYTES, TestResult, WAIT};
use tokio::sync::watch;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

fn client() -> Result<Client, appduct_sdk::BuildError> {
    Client::builder().jitter(|| 0.0).build()
}

fn keys() -> StaticKeypair {
    StaticKeypair::from_private_bytes([0x2a; 32])
}

/// A sealed link to `daemon`'s plain listener, carrying `key`.
fn sealed_link(daemon: &FakeDaemon, key: &StaticKeypair) -> String {
    let payload = BootstrapPayload::new(
        daemon.addr.ip(),
        daemon.addr.port(),
        SESSION.to_owned(),
        ClaimToken::from_bytes(TOKEN_BYTES),
        support::now_s() + 300,
    );
    let text = SealedBootstrapPayload::new(payload, *key.public_key())
        .encode()
        .unwrap_or_default();
    compose_sealed_deep_link("demo", &text).unwrap_or_default()
}

async fn state_becomes(rx: &mut watch::Receiver<ClientState>, want: ClientState) -> TestResult {
    timeout(WAIT, rx.wait_for(|s| *s == want)).await??;
    Ok(())
}

/// The daemon's side of one sealed connection.
struct SealedConn {
    conn: FakeConn,
    channel: SealedChannel,
    hello: Hello,
    /// Every record received, as sent on the wire.
    wire: Vec<Vec<u8>>,
}

/// Reads message 1 (which must be binary) off `conn`.
async fn message1(conn: &mut FakeConn) -> BoxResult<Vec<u8>> {
    loop {
        match conn.read().await? {
            Read::Binary(m) => return Ok(m),
            Read::Ping | Read::Pong(_) => continue,
            other => return Err(format!("expected message 1, got {other:?}").into()),
        }
    }
}

impl SealedConn {
    async fn accept(mut conn: FakeConn, keys: &StaticKeypair) -> BoxResult<Self> {
        let m1 = message1(&mut conn).await?;
        let mut responder = Responder::new(keys, [0x44; 32])?;
        let hello = responder.read_message1(&m1)?;
        let m2 = responder.write_message2()?;
        conn.send_message(Message::binary(m2)).await?;
        Ok(Self {
            conn,
            channel: responder.into_transport()?,
            hello,
            wire: vec![m1],
        })
    }

    /// The next complete frame; pings are skipped.
    async fn frame(&mut self) -> BoxResult<Value> {
        loop {
            match self.conn.read().await? {
                Read::Binary(record) => {
                    self.wire.push(record.clone());
                    match self.channel.open_record(&record)? {
                        None => continue,
                        Some(Opened::Frame(text)) => return Ok(serde_json::from_str(&text)?),
                        Some(other) => {
                            return Err(format!("expected a frame, got {other:?}").into());
                        }
                    }
                }
                Read::Ping | Read::Pong(_) => continue,
                other => return Err(format!("expected a record, got {other:?}").into()),
            }
        }
    }

    async fn frame_of(&mut self, ty: &str) -> BoxResult<Value> {
        let frame = self.frame().await?;
        if frame["type"] == ty {
            Ok(frame)
        } else {
            Err(format!("expected {ty}, got {frame}").into())
        }
    }

    async fn send(&mut self, frame: Value) -> TestResult {
        for record in self.channel.seal_frame(&frame.to_string())? {
            self.conn.send_message(Message::binary(record)).await?;
        }
        Ok(())
    }

    async fn ack(&mut self, resume_token: &str) -> TestResult {
        self.send(
            json!({"type": "session_ack", "session_id": SESSION, "status": "ok",
                         "alias": "sealed-device", "resume_token": resume_token,
                         "keepalive_interval_s": 15, "grace_s": 600}),
        )
        .await
    }

    /// A close record, then a bare `1000` WebSocket close (as the daemon closes).
    async fn close_sealed(&mut self, code: u16, reason: &str) -> TestResult {
        let record = self.channel.seal_close(code, reason)?;
        self.conn.send_message(Message::binary(record)).await?;
        self.conn.close(1000, "").await
    }
}

/// Starts a sealed connect on `client`, accepts the handshake and the claim, acks it.
async fn connect(client: &Client, daemon: &mut FakeDaemon) -> BoxResult<SealedConn> {
    let pending = client.start_connect(&sealed_link(daemon, &keys()), ConnectOptions::default())?;
    let mut conn = SealedConn::accept(daemon.next_conn().await?, &keys()).await?;
    conn.frame_of("session_claim").await?;
    conn.ack("resume-1").await?;
    timeout(WAIT, pending).await??;
    conn.frame_of("tool_registry_snapshot").await?;
    Ok(conn)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn a_sealed_link_claims_and_carries_calls_inside_the_channel() -> TestResult {
    let mut daemon = FakeDaemon::web().await?;
    let client = client()?;
    client.register_tool(
        &json!({"name": "secret_echo", "description": "Echo.",
                "input_schema": {"type": "object"}, "output_schema": {"type": "object"}}),
        |args: Value, _ctx| async move { Ok::<_, ToolError>(json!({"echoed": args})) },
    )?;
    let pending =
        client.start_connect(&sealed_link(&daemon, &keys()), ConnectOptions::default())?;
    let mut conn = SealedConn::accept(daemon.next_conn().await?, &keys()).await?;
    assert_eq!(conn.hello.rng, RngSource::Csprng);
    let claim = conn.frame_of("session_claim").await?;
    assert_eq!(claim["token"], support::claim_token());
    conn.ack("resume-1").await?;
    let info = timeout(WAIT, pending).await??;
    assert_eq!(info.alias, "sealed-device");
    let snapshot = conn.frame_of("tool_registry_snapshot").await?;
    assert_eq!(snapshot["tools"][0]["name"], "secret_echo");

    conn.send(
        json!({"type": "tool_call", "session_id": SESSION, "id": "call_1",
                     "name": "secret_echo", "args": {"word": "hunter2"}}),
    )
    .await?;
    let result = conn.frame_of("tool_result").await?;
    assert_eq!(result["result"], json!({"echoed": {"word": "hunter2"}}));

    // What crossed the wire: no token, tool name, argument or result in clear.
    let token = support::claim_token();
    for needle in [
        token.as_bytes(),
        b"secret_echo",
        b"hunter2",
        b"session_claim",
        b"echoed",
    ] {
        assert!(
            !conn.wire.iter().any(|r| contains(r, needle)),
            "{} in clear",
            String::from_utf8_lossy(needle)
        );
    }
    Ok(())
}

#[tokio::test]
async fn frames_over_one_record_are_fragmented_both_ways() -> TestResult {
    let mut daemon = FakeDaemon::web().await?;
    let client = client()?;
    client.register_tool(
        &json!({"name": "big", "description": "Big.", "input_schema": {"type": "object"},
                "output_schema": {"type": "object"}}),
        |args: Value, _ctx| async move {
            let n = args["n"].as_u64().unwrap_or(0) as usize;
            Ok::<_, ToolError>(json!({"text": "é".repeat(n)}))
        },
    )?;
    let mut conn = connect(&client, &mut daemon).await?;
    let records_before = conn.wire.len();
    // 200,000 bytes of text: four records app → daemon.
    conn.send(
        json!({"type": "tool_call", "session_id": SESSION, "id": "call_1",
                     "name": "big", "args": {"n": 100_000, "pad": "x".repeat(100_000)}}),
    )
    .await?;
    let result = conn.frame_of("tool_result").await?;
    assert_eq!(
        result["result"]["text"].as_str().map(str::len),
        Some(200_000)
    );
    assert!(
        conn.wire.len() - records_before >= 4,
        "the result was fragmented"
    );
    assert!(conn.wire.iter().all(|r| r.len() <= 65_535));
    Ok(())
}

#[tokio::test]
async fn a_close_record_is_authoritative_and_1008_ends_the_session() -> TestResult {
    let mut daemon = FakeDaemon::web().await?;
    let client = client()?;
    let mut states = client.watch_state();
    let mut conn = connect(&client, &mut daemon).await?;
    conn.close_sealed(1008, "revoked_by_test").await?;
    state_becomes(
        &mut states,
        ClientState::Closed {
            reason: "revoked_by_test".into(),
        },
    )
    .await?;
    assert!(
        !daemon.connection_within(Duration::from_millis(300)).await,
        "a terminal close record is never retried"
    );
    Ok(())
}

#[tokio::test]
async fn a_bare_websocket_close_is_a_lost_connection_and_resumes() -> TestResult {
    let mut daemon = FakeDaemon::web().await?;
    let client = client()?;
    let mut conn = connect(&client, &mut daemon).await?;
    // 1008 without a close record: unauthenticated, so treated as 1006.
    conn.conn.close(1008, "revoked").await?;
    let mut resumed = SealedConn::accept(daemon.next_conn().await?, &keys()).await?;
    assert_eq!(
        resumed.frame().await?,
        json!({"type": "session_resume", "protocol_version": 2, "session_id": SESSION,
               "resume_token": "resume-1"})
    );
    assert_eq!(client.state(), ClientState::Reconnecting);
    Ok(())
}

#[tokio::test]
async fn a_tampered_record_breaks_the_connection_not_the_session() -> TestResult {
    let mut daemon = FakeDaemon::web().await?;
    let client = client()?;
    let mut conn = connect(&client, &mut daemon).await?;
    let mut record = conn
        .channel
        .seal_frame(&json!({"type": "tool_cancel", "session_id": SESSION, "id": "x"}).to_string())?
        .remove(0);
    record[5] ^= 1;
    conn.conn.send_message(Message::binary(record)).await?;
    // The app closes with a bare 1008 sealed_record_invalid (no record: the channel is broken)…
    assert_eq!(
        conn.conn.read().await?,
        Read::Close(Some((1008, "sealed_record_invalid".into())))
    );
    // …and resumes on a new connection.
    let mut resumed = SealedConn::accept(daemon.next_conn().await?, &keys()).await?;
    assert_eq!(resumed.frame().await?["type"], "session_resume");
    Ok(())
}

#[tokio::test]
async fn a_bad_record_kind_is_closed_with_a_close_record() -> TestResult {
    let mut daemon = FakeDaemon::web().await?;
    let client = client()?;
    let mut conn = connect(&client, &mut daemon).await?;
    let record = conn.channel.seal_plaintext(b"\x07hello")?;
    conn.conn.send_message(Message::binary(record)).await?;
    // A close record 1002 protocol_error, then a bare 1000 WebSocket close: the reason stays
    // sealed.
    let Read::Binary(record) = conn.conn.read().await? else {
        panic!("expected a close record");
    };
    assert_eq!(
        conn.channel.open_record(&record)?,
        Some(Opened::Close {
            code: 1002,
            reason: "protocol_error".into()
        })
    );
    assert_eq!(
        conn.conn.read().await?,
        Read::Close(Some((1000, String::new())))
    );
    let mut resumed = SealedConn::accept(daemon.next_conn().await?, &keys()).await?;
    assert_eq!(resumed.frame().await?["type"], "session_resume");
    Ok(())
}

#[tokio::test]
async fn a_link_for_another_static_key_fails_the_handshake_once() -> TestResult {
    let mut daemon = FakeDaemon::web().await?;
    let client = client()?;
    let stale = StaticKeypair::from_private_bytes([0x07; 32]);
    let pending = client.start_connect(&sealed_link(&daemon, &stale), ConnectOptions::default())?;
    let mut conn = daemon.next_conn().await?;
    let m1 = message1(&mut conn).await?;
    let e = Responder::new(&keys(), [0x44; 32])?
        .read_message1(&m1)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e, SealedError::HandshakeFailed);
    let close = e.close_reason();
    conn.close(close.code(), close.reason()).await?;
    assert_eq!(
        timeout(WAIT, pending).await?,
        Err(ConnectError::HandshakeFailed)
    );
    assert_eq!(
        client.state(),
        ClientState::Closed {
            reason: "handshake_failed".into()
        }
    );
    // The app tells the daemon why, on a new plain connection, proving it holds the link.
    let mut refusal = daemon.next_conn().await?;
    let frame = refusal.frame_of("link_refused").await?;
    assert_refusal(&frame, RefusalReason::HandshakeFailed);
    refusal.close(1000, "refusal_recorded").await?;
    assert!(
        !daemon.connection_within(Duration::from_millis(300)).await,
        "a failed handshake is never retried"
    );
    Ok(())
}

/// A `link_refused` frame for the test link: its proof checks against the claim token, which the
/// frame never carries.
fn assert_refusal(frame: &Value, reason: RefusalReason) {
    assert_eq!(frame["session_id"], SESSION);
    assert_eq!(frame["reason"], reason.as_str());
    let proof = frame["proof"].as_str().unwrap_or_default();
    assert!(verify_refusal_proof(
        &ClaimToken::from_bytes(TOKEN_BYTES),
        SESSION,
        reason,
        proof
    ));
    assert!(!frame.to_string().contains(&support::claim_token()));
    assert_eq!(frame.as_object().map(|o| o.len()), Some(4));
}

#[tokio::test]
async fn an_expired_sealed_link_is_refused_as_expired() -> TestResult {
    let mut daemon = FakeDaemon::web().await?;
    let client = client()?;
    let payload = BootstrapPayload::new(
        daemon.addr.ip(),
        daemon.addr.port(),
        SESSION.to_owned(),
        ClaimToken::from_bytes(TOKEN_BYTES),
        support::now_s() - 1,
    );
    let text = SealedBootstrapPayload::new(payload, *keys().public_key()).encode()?;
    let link = compose_sealed_deep_link("demo", &text)?;
    assert!(matches!(
        client.start_connect(&link, ConnectOptions::default()),
        Err(ConnectError::ExpiredPayload { .. })
    ));
    let mut refusal = daemon.next_conn().await?;
    assert_refusal(
        &refusal.frame_of("link_refused").await?,
        RefusalReason::LinkExpired,
    );
    refusal.close(1008, "invalid_refusal").await?;
    assert!(!daemon.connection_within(Duration::from_millis(300)).await);
    Ok(())
}

#[tokio::test]
async fn a_forged_message2_fails_the_handshake_and_sends_nothing_else() -> TestResult {
    let mut daemon = FakeDaemon::web().await?;
    let client = client()?;
    let pending =
        client.start_connect(&sealed_link(&daemon, &keys()), ConnectOptions::default())?;
    let mut conn = daemon.next_conn().await?;
    message1(&mut conn).await?;
    // An impostor without the static key cannot produce a message 2 that decrypts.
    conn.send_message(Message::binary(vec![0x5a; 50])).await?;
    assert_eq!(
        conn.read().await?,
        Read::Close(Some((1008, "sealed_handshake_failed".into())))
    );
    assert_eq!(
        timeout(WAIT, pending).await?,
        Err(ConnectError::HandshakeFailed)
    );
    Ok(())
}

#[tokio::test]
async fn the_transport_follows_the_link_kind() -> TestResult {
    let daemon = FakeDaemon::web().await?;
    let client = client()?;
    let sealed = sealed_link(&daemon, &keys());
    for transport in [Transport::Native, Transport::Web] {
        let options = ConnectOptions {
            transport: Some(transport),
        };
        assert!(matches!(
            client.start_connect(&sealed, options),
            Err(ConnectError::UnsupportedLink(_))
        ));
    }
    let v2 = compose_deep_link("demo", &daemon.payload(support::now_s() + 300), None)?;
    let options = ConnectOptions {
        transport: Some(Transport::Sealed),
    };
    assert!(matches!(
        client.start_connect(&v2, options),
        Err(ConnectError::UnsupportedLink(_))
    ));
    // A v2 link with no pin still needs one for the native default.
    assert_eq!(
        client
            .start_connect(&v2, ConnectOptions::default())
            .map(|_| ()),
        Err(ConnectError::MissingPin)
    );
    Ok(())
}
